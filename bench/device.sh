#!/usr/bin/env bash
# device.sh: one device call's worth of GPU work for nvg — the tensor-core parity suites, kernel
# A/B benchmarks against an earlier build, `nvg bench` and the PyTorch peer — split into what
# runs here (Go and a C compiler are here) and what runs on the GPU machine (neither is there).
#
#   bash bench/device.sh prep [OLD]   here: builds devbin/q — gpu.test and nvg of the checkout
#                                     (nvg stamped with HEAD), the Vulkan layer in its cache, the
#                                     Vulkan loader's .debs in .gl, the peer torch_baseline.py;
#                                     OLD (a commit) adds gpu-old.test for the A/B lines
#   bash bench/device.sh slim         here: moves the large tracked files a GPU run does not need
#                                     (notebook pages, fixtures, the Qwen tokenizer) to
#                                     /tmp/nvg-slim, so that the tree and devbin/q fit the 64 MiB
#                                     a call carries; `unslim` puts them back (git checkout)
#   bash bench/device.sh run STEP…    on the GPU machine, $OUT set, with .gl and devbin/q carried:
#                                     parity   the kernels' tensor-core parity suites
#                                              (NVG_EXPECT_TENSOR_CORES=1: a skip fails;
#                                              PARITY_FAST=1: without the delta rule's,
#                                              2: the BLR GEMMs' alone)
#                                     kernels  BenchmarkLinearQuant (4B gate and down, 27B down;
#                                              a build before 518dab2 lacks 4B down) and
#                                              BenchmarkLogitsTopK (the merge forms), on
#                                              gpu-old.test too when it is there;
#                                              Q8_F32=1 adds q8 with f32 scales, TOPK=0
#                                              drops the top-k benchmark, LQ_SHAPES
#                                              the shapes
#                                     bench    nvg bench per geometry of BENCH_BUDGETS
#                                              (0.8B:1900,4B:11800: the activation budget
#                                              in MiB), f16, q8 and fp8 teachers
#                                              (BENCH_DTYPES); BENCH_TAG suffixes the
#                                              output files (a second run in one call)
#                                     cm2      the coopmat2 GEMM: its self-test at Open
#                                              (NVG_COOPMAT2=on) and parity lines
#                                              (NVG_EXPECT_COOPMAT2=1: a skip fails) and
#                                              BenchmarkGEMM's dense shapes (CM2_SHAPES)
#                                              under CM2_VARIANTS (KHR, coopmat2 blocks),
#                                              then coopmat2 with robust buffer access
#                                              kept (NVG_COOPMAT2_ROBUST=on)
#                                     peer     torch_baseline.py 0.8B 4B, PEER_RUNS times
#                                              (default 2; 4B needs the H200's memory)
# Each step prints a summary into $OUT/log and keeps its raw output in $OUT; a step is cut at
# its share of BUDGET seconds (default 560: a call's 600 less the unpacking).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
D=devbin/q
mode=${1:-}
shift || true

case $mode in
prep)
  export PATH=$PATH:/usr/local/go/bin
  mkdir -p "$D" .gl || exit 1
  ld="-s -w -X github.com/nvg-project/nvg/internal/version.commit=$(git rev-parse HEAD) -X github.com/nvg-project/nvg/internal/version.modified=$([[ -z $(git status --porcelain) ]] && echo false || echo true)"
  go test -c -ldflags "-s -w" -o "$D/gpu.test" ./gpu || exit 1
  go build -ldflags "$ld" -o "$D/nvg" ./cmd/nvg || exit 1
  if [[ -n ${1:-} ]]; then
    w=$(mktemp -d)
    git worktree add -q --detach "$w" "$1" && (cd "$w" && go test -c -ldflags "-s -w" -o "$OLDPWD/$D/gpu-old.test" ./gpu)
    rc=$?
    git worktree remove --force "$w"
    ((rc == 0)) || { echo "device.sh: cannot build gpu-old.test at $1" >&2; exit 1; }
  fi
  # The layer is built on first use with cc, which the GPU machine lacks: build it into the
  # cache that travels (a test that skips without a GPU still builds it).
  (cd gpu && XDG_CACHE_HOME=$PWD/../$D/cache ../$D/gpu.test -test.run '^TestTensorCoresStatus$' >/dev/null 2>&1)
  rm -rf "$D"/cache/mesa_shader_cache*
  ls "$D"/cache/nvg/vklayer-*/libnvg_vklayer.so >/dev/null || { echo "device.sh: the Vulkan layer was not built into $D/cache" >&2; exit 1; }
  for p in ../shared/bench/torch_baseline.py shared/bench/torch_baseline.py; do
    [[ -f $p ]] && cp -f "$p" "$D/" && break
  done
  if ! compgen -G ".gl/libvulkan1_*.deb" >/dev/null; then
    mkdir -p /tmp/amd64/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    # shellcheck disable=SC2086
    apt-get $o update >/dev/null && (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null) ||
      { echo "device.sh: cannot download the Vulkan loader's .debs into .gl" >&2; exit 1; }
  fi
  rm -f "$D"/*.xz
  xz -6 -T0 -f "$D"/*.test "$D/nvg"
  du -sh "$D" .gl
  exit 0
  ;;
slim | unslim)
  big=(docs/notebooks/*.html testdata/tokenizers/qwen3/tokenizer.json.gz testdata/fixtures/tiny-fp8/model.safetensors testdata/fixtures/fixtures-tiny-go.safetensors)
  if [[ $mode == slim ]]; then
    mkdir -p /tmp/nvg-slim
    for f in "${big[@]}"; do
      [[ -e $f ]] && mv -f "$f" /tmp/nvg-slim/
    done
    exit 0
  else
    git checkout -- docs/notebooks testdata/tokenizers/qwen3/tokenizer.json.gz testdata/fixtures/tiny-fp8/model.safetensors testdata/fixtures/fixtures-tiny-go.safetensors
  fi
  exit $?
  ;;
run) ;;
*)
  sed -n '2,/^set /{/^#/p}' "$0"
  exit 2
  ;;
esac

L=${OUT:?device.sh run: OUT must name the output folder}/log
compgen -G ".gl/*.deb" >/dev/null || { echo "device.sh run: no Vulkan loader .debs in .gl (carry .gl; bench/device.sh prep downloads them)" | tee -a "$L"; exit 1; }
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
for x in "$D"/*.xz; do [[ -e $x ]] && xz -d -k -f "$x"; done
chmod +x "$D"/*.test "$D"/nvg 2>/dev/null
export XDG_CACHE_HOME=$PWD/$D/cache NVG_REQUIRE_GPU=1
T0=$SECONDS
left() { echo $((${BUDGET:-560} - (SECONDS - T0))); }
upto() { local l; l=$(left); echo $((l < $1 ? l : $1)); } # upto N: N seconds, or what is left
gt() { # gt BIN SECONDS ARGS…: a gpu test binary in gpu/ (its testdata), at most SECONDS
  local bin=$1 t=$2
  shift 2
  [[ -x $D/$bin ]] || { echo "no $D/$bin"; return 127; }
  ((t > 0)) || { echo "no time left for $bin $*"; return 124; }
  (cd gpu && timeout "$t" "../$D/$bin" "$@" 2>&1)
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$L"

for step in "$@"; do
  echo "== $step (t=$((SECONDS - T0)) s)" | tee -a "$L"
  case $step in
  parity)
    par=$OUT/parity.txt
    pats=('^TestTensorCoresStatus$'
      '^(TestBLRBackwardReduceBatch|TestGradColDot|TestGatedDeltaRuleSaved|TestGatedDeltaRuleChunkedBackwardSaved|TestGatedDeltaRuleChunkedCoopmat|TestGatedDeltaRuleChunkedBackwardCoopmat|TestGatedDeltaRuleAutoCoopmat)$'
      '^(TestBLRBackward|TestBLRForward|TestLinearQuant|TestLinearQuantScaleDTypes|TestLinearFamily|TestCoopmatPack|TestBLRPathPairsBitIdentical|TestLogitsTopK|TestKLLossBackward)$')
    [[ ${PARITY_FAST:-0} == 1 ]] && pats=("${pats[0]}" "${pats[2]}") # without the delta rule's (~70 s)
    [[ ${PARITY_FAST:-0} == 2 ]] && pats=('^(TestBLRBackward|TestBLRForward|TestBLRPathPairsBitIdentical|TestCoopmatPack)$') # the BLR GEMMs' alone
    for pat in "${pats[@]}"; do
      NVG_EXPECT_TENSOR_CORES=1 gt gpu.test "$(upto 90)" -test.run "$pat" -test.v -test.count=1 >>"$par"
      echo "parity rc=$? '$pat'" | tee -a "$L"
    done
    echo "parity: pass=$(grep -cE -- '^--- PASS' "$par") fail=$(grep -cE -- '--- FAIL' "$par") skip=$(grep -cE -- '--- SKIP' "$par")" | tee -a "$L"
    grep -E -- '--- (FAIL|SKIP)|panic' "$par" | head -20 | tee -a "$L"
    ;;
  cm2)
    NVG_COOPMAT2=on NVG_EXPECT_TENSOR_CORES=1 NVG_EXPECT_COOPMAT2=1 gt gpu.test "$(upto 90)" -test.run '^(TestTensorCoresStatus|TestLinearFamily)$' -test.v -test.count=1 >"$OUT/cm2-parity.txt"
    echo "cm2 parity rc=$?" | tee -a "$L"
    grep -E 'coopmat2|--- (FAIL|SKIP)|panic' "$OUT/cm2-parity.txt" | grep -v '=== RUN' | head -20 | tee -a "$L"
    for rb in off on; do
      vs=${CM2_VARIANTS:-coopmat,coopmat2,coopmat2:128x128x64/256,coopmat2:128x256x64/256,coopmat2:256x128x64/256}
      [[ $rb == on ]] && vs=coopmat2
      NVG_COOPMAT2_ROBUST=$rb NVG_BENCH_LARGE=1 NVG_BENCH_SHAPES=${CM2_SHAPES:-sq4096,0.8B.gate,0.8B.head,4B.gate,4B.down} NVG_GEMM_VARIANTS=$vs \
        gt gpu.test "$(upto 150)" -test.run '^$' -test.bench '^BenchmarkGEMM$' -test.benchtime 3x >"$OUT/cm2-gemm-robust-$rb.txt"
      echo "cm2 gemm robust=$rb rc=$?" | tee -a "$L"
      grep -E 'GEMMROW|GEMMCHECK|FAIL|panic' "$OUT/cm2-gemm-robust-$rb.txt" | tee -a "$L"
    done
    ;;
  kernels)
    for b in gpu-old.test gpu.test gpu.test:f32; do
      [[ -x $D/${b%:*} ]] || continue
      [[ $b == *:f32 && ${Q8_F32:-0} != 1 ]] && continue # q8 with f32 scales: Q8_F32=1
      o=${b%.test*}${b#*.test} sc=
      [[ $b == *:* ]] && sc=${b#*:}
      NVG_BENCH_Q8_SCALES=$sc NVG_BENCH_LARGE=1 NVG_BENCH_SHAPES=${LQ_SHAPES:-4B.gate,4B.down,27B.down} NVG_TC_VARIANTS=coopmat \
        gt "${b%:*}" "$(upto 60)" -test.run '^$' -test.bench '^BenchmarkLinearQuant$' -test.benchtime 3x >"$OUT/lq-${o//:/-}.txt"
      echo "lq $b rc=$?" | tee -a "$L"
      grep -E 'QUANTROW|GEMMCHECK.*worst' "$OUT/lq-${o//:/-}.txt" | tee -a "$L"
      [[ ${TOPK:-1} == 1 && $b != *:f32 ]] || continue # the top-k merge forms: TOPK=1 (default)
      NVG_BENCH_LARGE=1 gt "$b" "$(upto 60)" -test.run '^$' -test.bench '^BenchmarkLogitsTopK$' -test.benchtime 3x >"$OUT/topk-${b%.test}.txt"
      echo "topk $b rc=$?" | tee -a "$L"
      grep -E 'TOPKROW.*merge' "$OUT/topk-${b%.test}.txt" | tee -a "$L"
    done
    ;;
  bench)
    # One nvg bench per geometry, each with its activation budget (BENCH_BUDGETS, MiB:
    # default what keeps the student's peak within ¼ of the peer's on the H200 with room for
    # the scratch pool's larger buffers since 376a382 — 0.8B: 3 layers of ~0.6 GiB (2,500
    # MiB kept 4 for a 9.62 GiB peak against 9.78 allowed, before); 4B: 9 layers of ~1.23
    # (21.61 GiB against 23.24); 0 recomputes every layer).
    geoms=${BENCH_BUDGETS:-0.8B:1900,4B:11800}
    n=$(tr ',' '\n' <<<"$geoms" | grep -c .)
    for gb in ${geoms//,/ }; do
      g=${gb%%:*} mib=${gb#*:}
      t=$(($(left) / n - 5))
      n=$((n - 1))
      ((t >= 60)) || { echo "bench $g: $t s left, too few" | tee -a "$L"; continue; }
      timeout "$t" "$D/nvg" bench --model "$g" --activation-budget-mib "$mib" --tensor-cores on --teacher-dtype "${BENCH_DTYPES:-f16,q8,fp8}" \
        --steps 3 --reps 3 --deadline "$((t - 20))s" --json "$OUT/bench-$g-$mib${BENCH_TAG:-}.json" >"$OUT/bench-$g-$mib${BENCH_TAG:-}.txt" 2>&1
      echo "bench${BENCH_TAG:-} $g budget $mib MiB rc=$?" | tee -a "$L"
      grep -E 'tok/s|activations' "$OUT/bench-$g-$mib${BENCH_TAG:-}.txt" | head -12 | tee -a "$L"
    done
    ;;
  peer)
    for i in $(seq "${PEER_RUNS:-2}"); do
      (($(left) >= 60)) || { echo "peer run $i: $(left) s left, too few" | tee -a "$L"; break; }
      PYTHONUNBUFFERED=1 timeout "$(($(left) - 5))" python3 "$D/torch_baseline.py" 0.8B 4B 2>>"$OUT/peer.err" | tee -a "$OUT/peer.txt"
    done
    grep -c '^RESULT' "$OUT/peer.txt" | sed 's/^/peer results: /' | tee -a "$L"
    ;;
  *) echo "device.sh: unknown step $step" | tee -a "$L" ;;
  esac
done
echo "done (t=$((SECONDS - T0)) s)" | tee -a "$L"
