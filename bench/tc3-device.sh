#!/usr/bin/env bash
# tc3-device.sh: issue 32's attention and chunked delta-rule kernels on tensor cores, on a GPU,
# in one device call of at most ~150 s (an H200 or H100; no Go there). It runs
#   1. the attention and delta-rule cooperative-matrix parity suites (the lines .ci/coopmat
#      runs on lavapipe) with NVG_EXPECT_TENSOR_CORES=1, so a skip or a missing tensor core
#      fails them;
#   2. BenchmarkAttention, BenchmarkAttentionBackward, BenchmarkGatedDeltaRuleChunked and
#      BenchmarkGatedDeltaRuleChunkedBackward at the student step's batch (NVG_BENCH_LARGE=1:
#      nb 8 windows of t 512, the 0.8B's and the 4B's heads), NVG_TC_VARIANTS=wgsl,coopmat;
#   3. when the binaries are there and time is left, the same benchmarks' coopmat lines from
#      the earlier kernels: gpu-unroll.test (loops unrolled, fragments from global memory) and
#      gpu-main.test (before this work: nothing unrolled), so that one run says what each
#      step bought.
# It prints one summary line per benchmark (BENCH binary name metric=value …) into $OUT/log;
# the raw outputs are in $OUT.
#
# Prepare here (Go and a C compiler; from the repository root, on the branch to measure):
#   mkdir -p devbin-tc3
#   go test -c -ldflags='-s -w' -o devbin-tc3/gpu.test ./gpu            # this branch
#   (optional) the same at the earlier commits into devbin-tc3/gpu-unroll.test, gpu-main.test
#   XDG_CACHE_HOME=$PWD/devbin-tc3/cache NVG_REQUIRE_GPU=1 devbin-tc3/gpu.test \
#     -test.run '^TestTensorCoresStatus$'       # builds the Vulkan layer into the cache
#   rm -rf devbin-tc3/cache/mesa_shader_cache*; xz -6 -T0 devbin-tc3/*.test
# Device (the Vulkan loader's .debs in .gl/, carried with devbin-tc3):
#   bash bench/tc3-device.sh
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD D=$R/devbin-tc3
L=${OUT:?OUT must name the output folder}/log
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
for x in "$D"/*.test.xz; do
  [[ -e $x ]] && xz -d -k -f "$x"
done
chmod +x "$D"/*.test
export XDG_CACHE_HOME=$D/cache NVG_REQUIRE_GPU=1
T0=$SECONDS
left() { echo $((148 - (SECONDS - T0))); } # seconds left of the budget
min() { echo $(($1 < $2 ? $1 : $2)); }
gt() { # gt BIN SECONDS ARGS…: the test binary BIN from gpu/ (its testdata), at most SECONDS
  local bin=$1 t=$2
  shift 2
  ((t > 0)) || { echo "tc3: no time left for $bin $*"; return 124; }
  (cd "$R/gpu" && timeout "$t" "$D/$bin" "$@" 2>&1)
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | tee -a "$L"

echo "== parity (t=$((SECONDS - T0)))" | tee -a "$L"
par=$OUT/parity.txt
for pat in '^TestTensorCoresStatus$' \
  '^(TestAttention|TestAttentionBackward|TestAttentionBackwardErrors)$/^coopmat$|^TestAttentionAutoCoopmat$' \
  '^(TestGatedDeltaRuleChunkedCoopmat|TestGatedDeltaRuleChunkedBackwardCoopmat|TestGatedDeltaRuleAutoCoopmat)$' \
  '^(TestGatedDeltaRuleChunkedInfDecay|TestGatedDeltaRuleChunkedBackwardInfDecay)$/^coopmat$'; do
  NVG_EXPECT_TENSOR_CORES=1 gt gpu.test "$(min 30 $(($(left) - 75)))" -test.run "$pat" -test.v -test.count=1 >>"$par"
  echo "parity rc=$? '$pat'" | tee -a "$L"
done
grep -E 'tensor cores' "$par" | head -2 | tee -a "$L"
echo "parity: pass=$(grep -cE -- '--- PASS' "$par") fail=$(grep -cE -- '--- FAIL' "$par") skip=$(grep -cE -- '--- SKIP' "$par")" | tee -a "$L"
grep -E -- '--- (FAIL|SKIP)|panic|max \|err\|/(bound|scale)' "$par" | sort | uniq -c | sort -rn | head -30 >>"$L"

# bench BIN VARIANTS SECONDS: the four benchmarks at the model's batch, one line per result.
bench() {
  local bin=$1 vs=$2 t=$3 out=$OUT/bench-${1%.test}.txt
  [[ -x $D/$bin ]] || { echo "tc3: no $bin" | tee -a "$L"; return; }
  NVG_BENCH_LARGE=1 NVG_TC_VARIANTS=$vs gt "$bin" "$t" -test.run '^$' -test.benchtime 8x \
    -test.bench '^Benchmark(Attention|AttentionBackward|GatedDeltaRuleChunked|GatedDeltaRuleChunkedBackward)$/^(chunked,)?nb=8,' \
    >"$out"
  echo "bench $bin rc=$? (t=$((SECONDS - T0)))" | tee -a "$L"
  grep -E -- '--- FAIL|panic|^FAIL' "$out" | head -5 | tee -a "$L"
  # Benchmark lines: name, N, then value–unit pairs.
  awk -v bin="${bin%.test}" '/^Benchmark/ {
      line = "BENCH " bin " " $1
      for (i = 4; i <= NF; i += 2) line = line " " $i "=" $(i - 1)
      print line
    }' "$out" | tee -a "$L"
}
echo "== bench (t=$((SECONDS - T0)))" | tee -a "$L"
bench gpu.test wgsl,coopmat $(($(left) - 45))
bench gpu-unroll.test coopmat $(($(left) - 22))
bench gpu-main.test coopmat "$(left)"
echo "== end (t=$((SECONDS - T0)))" | tee -a "$L"
