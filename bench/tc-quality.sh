#!/usr/bin/env bash
# Tensor cores and training quality (issue 32): the same 600-step distillation of the tiny
# teacher twice, with the GEMMs on tensor cores (NVG_TENSOR_CORES=on: cooperative matrices, f16
# operands, f32 accumulation) and on the f32 path (NVG_TENSOR_CORES=off), with the README's
# H200 flags; for each pair it prints the first step's loss, the final held-out perplexity and
# their ratios on/off. The issue's bar: the run on tensor cores ends within 1 % of the f32
# run's held-out perplexity.
#
#   bench/tc-quality.sh CORPUS            both pairs: metric only, then --train-signs
#   MODES=metric bench/tc-quality.sh CORPUS    one pair (metric or signs)
#   bench/tc-quality.sh pack CORPUS.tgz   here, where Go is: pack the corpus for the device
#
# CORPUS is the default corpus of nvg distill, the Go standard library's .go files as
# data.ListGoTree reads them (DESIGN.md §6), given as a GOROOT (a folder whose src/ holds them),
# as that src folder itself, or as a .tgz made by `pack` (extracted into a temporary folder).
# The device has no Go toolchain and its working tree travels under 64 MiB (the .go files are
# ~99 MB, ~19 MB packed; nvg is ~62 MB, ~28 MB stripped and gzipped), so pack both here into
# an ignored path and carry it:
#   go build -ldflags=-s -o bench/out/nvg ./cmd/nvg && gzip -f bench/out/nvg
#   bench/tc-quality.sh pack bench/out/gosrc.tgz
#   (device, carry bench/out) NVG_BIN=bench/out/nvg.gz bench/tc-quality.sh bench/out/gosrc.tgz
# (an NVG_BIN ending in .gz is unpacked into a temporary folder first).
# Use the same Go version's corpus as the runs it is compared with (1.26.8 in DESIGN §6).
#
# Environment: NVG_BIN (default ./.devbin/nvg), OUT (default bench/out/tc-quality-<UTC time>),
# MODES (default "metric signs"), STEPS (default 600). Time on one H200: ~1.5 min per metric
# run and ~3 min per --train-signs run (DESIGN §6: 86 and 204 ms per f32 step at these flags,
# plus compression and the teacher pass), so MODES=metric and MODES=signs fit one 10-minute
# device call each, the metric pair in about 3 minutes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if [ "${1:-}" = pack ]; then
	out=${2:?usage: bench/tc-quality.sh pack CORPUS.tgz}
	root=$(go env GOROOT) || exit 1
	mkdir -p "$(dirname "$out")" || exit 1
	# The files data.ListGoTree reads: every .go file outside testdata folders (it also skips
	# files above 256 KiB; packing them costs little and keeps this simple).
	(cd "$root/src" && find . -name testdata -prune -o -name '*.go' -type f -print | tar -czf - -T -) >"$out.tmp" &&
		mv "$out.tmp" "$out" || exit 1
	echo "bench/tc-quality.sh: packed $(tar -tzf "$out" | wc -l) .go files of $root/src ($(go env GOVERSION)) into $out ($(du -h "$out" | cut -f1))"
	exit 0
fi

corpus=${1:-}
if [ -z "$corpus" ] || [ ! -e "$corpus" ]; then
	echo "usage: bench/tc-quality.sh CORPUS (a GOROOT, its src folder, or a .tgz from 'bench/tc-quality.sh pack'); got '${corpus}'" >&2
	exit 2
fi
NVG_BIN=${NVG_BIN:-./.devbin/nvg}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if [[ $NVG_BIN == *.gz ]]; then
	gzip -dc "$NVG_BIN" >"$tmp/nvg" && chmod +x "$tmp/nvg" || { echo "bench/tc-quality.sh: cannot unpack $NVG_BIN" >&2; exit 1; }
	NVG_BIN=$tmp/nvg
fi
[ -x "$NVG_BIN" ] || { echo "bench/tc-quality.sh: no nvg binary at $NVG_BIN (build it where Go is: go build -o .devbin/nvg ./cmd/nvg; set NVG_BIN)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench/tc-quality.sh: python3 is needed to read report.json" >&2; exit 1; }
OUT=${OUT:-bench/out/tc-quality-$(date -u +%Y%m%dT%H%M%SZ)}
MODES=${MODES:-"metric signs"}
STEPS=${STEPS:-600}
mkdir -p "$OUT" || exit 1

# The corpus as a GOROOT: nvg distill's default corpus is GOROOT/src (data.StdlibCorpus), and
# the runtime takes GOROOT from the environment.
case "$corpus" in
*.tgz | *.tar.gz)
	mkdir -p "$tmp/goroot/src" && tar -xzf "$corpus" -C "$tmp/goroot/src" || { echo "bench/tc-quality.sh: cannot extract $corpus" >&2; exit 1; }
	goroot=$tmp/goroot
	;;
*)
	corpus=$(cd "$corpus" && pwd) || exit 1
	if [ -d "$corpus/src" ]; then
		goroot=$corpus
	else
		mkdir -p "$tmp/goroot" && ln -s "$corpus" "$tmp/goroot/src"
		goroot=$tmp/goroot
	fi
	;;
esac
n=$(find -L "$goroot/src" -name testdata -prune -o -name '*.go' -type f -print | wc -l)
((n > 1000)) || { echo "bench/tc-quality.sh: $goroot/src holds $n .go files; want the Go standard library's (~6,500)" >&2; exit 1; }
echo "bench/tc-quality.sh: $NVG_BIN, corpus $n .go files under $goroot/src, $STEPS steps, modes $MODES, outputs in $OUT"

common=(--steps "$STEPS" --nb 16 --t 512 --lr 0.005 --warmup 50 --eval-every 0 --eval-windows 256)
status=0
for mode in $MODES; do
	extra=()
	case "$mode" in
	metric) ;;
	signs) extra=(--train-signs) ;;
	*) echo "bench/tc-quality.sh: MODES: unknown mode $mode (metric, signs)" >&2; exit 2 ;;
	esac
	for tc in on off; do
		dir="$OUT/$mode-tc-$tc"
		echo "== $mode, tensor cores $tc: NVG_TENSOR_CORES=$tc $NVG_BIN distill ${common[*]} ${extra[*]} -o $dir"
		start=$(date +%s)
		GOROOT=$goroot NVG_TENSOR_CORES=$tc "$NVG_BIN" distill "${common[@]}" "${extra[@]}" -o "$dir" >"$dir.log" 2>&1
		rc=$?
		echo "   exit $rc, $(($(date +%s) - start)) s wall (log: $dir.log)"
		if ((rc != 0)); then
			tail -n 5 "$dir.log" | sed 's/^/   /'
			status=1
		fi
	done
	python3 - "$mode" "$OUT/$mode-tc-on/report.json" "$OUT/$mode-tc-off/report.json" <<'PY' || status=1
import json, sys
mode, paths = sys.argv[1], sys.argv[2:]
runs = []
for p in paths:
    try:
        r = json.load(open(p))
    except (OSError, ValueError) as e:
        sys.exit(f"   {mode}: cannot read {p}: {e}")
    losses = r.get("loss_history") or [None]
    runs.append({"tc": (r.get("provenance") or {}).get("tensor_cores", "?"), "first": losses[0],
                 "ppl": r.get("distilled_perplexity"), "compressed": r.get("compressed_perplexity"),
                 "teacher": r.get("teacher_perplexity"), "steps": r.get("steps"),
                 "step_s": r.get("wall_seconds", 0) / max(1, r.get("steps") or 1)})
on, off = runs
for name, x in (("on ", on), ("off", off)):
    print(f"   {mode} tensor cores {name}: first-step loss {x['first']:.6f}, held-out perplexity {x['ppl']:.4f} "
          f"(compressed {x['compressed']:.3f}, teacher {x['teacher']:.3f}; {x['steps']} steps, {1000 * x['step_s']:.0f} ms/step with evaluations) [{x['tc']}]")
ratio = on["ppl"] / off["ppl"]
print(f"   {mode}: on/off first-step loss {on['first'] / off['first']:.6f}, held-out perplexity {ratio:.4f} "
      f"({100 * (ratio - 1):+.2f} %; the bar is within 1 %: {'met' if abs(ratio - 1) <= 0.01 else 'MISSED'})")
if not on["tc"].startswith("on") or not off["tc"].startswith("off"):
    sys.exit(f"   {mode}: the runs did not take the paths asked for (on: {on['tc']}; off: {off['tc']})")
PY
done
exit $status
