#!/usr/bin/env bash
# Runs nvg's benchmark and the PyTorch peer on the same geometries in one command, prints the
# nvg/peer ratios and writes docs/BENCHMARKS.md (DESIGN.md §9).
#
#   bench/run.sh [GEOMETRIES]          e.g. bench/run.sh 0.8B,4B   (default 0.8B,4B,9B,27B)
#
# Environment:
#   NVG_BIN    the nvg binary (default: nvg on PATH, else `go run ./cmd/nvg`; the benchmark
#              machine has no Go toolchain, so build it beforehand: go build -o nvg ./cmd/nvg)
#   PEER       torch_baseline.py (default ../shared/bench/torch_baseline.py, else shared/bench/…)
#   PYTHON     the peer's interpreter (default python3)
#   PEER_RUNS  how many times the peer runs (default 3): its throughput moves between runs on
#              one machine (the 0.8B teacher pass 33,314 to 45,000 tok/s on one H100 type), so
#              the report gives each figure's median over the runs and lists them
#   OUT        where the raw outputs go (default bench/out/<UTC date>). Runs of different
#              geometries into the same OUT are merged into one report (e.g. on a machine with
#              a 10-minute limit per command: OUT=bench/out/h200 bench/run.sh 0.8B,4B, then
#              OUT=bench/out/h200 bench/run.sh 9B,27B)
#   NVG_FLAGS  extra flags for nvg bench (e.g. "--teacher resident"; "--tensor-cores on,off"
#              measures every geometry with tensor cores on and off, and the report puts both
#              beside the peer)
#   CPU_JSON   the lavapipe figures for the CPU section (default docs/bench/lavapipe-tiny.json)
#   DOC        the report to write (default docs/BENCHMARKS.md; "-" for none)
#   NOTES      hand-written markdown put after the throughput table (default docs/bench/targets.md:
#              the targets, and for each one missed the profile that explains it; keep it in
#              step with the run it describes)
#   BEFORE     an earlier run's nvg bench JSON, comma-separated files merged like this run's
#              (default none): the report then compares against it (throughput, student peak,
#              and each kernel's time before and after), e.g. BEFORE=docs/bench/h200-0.8B-4B.json
# Flags: --no-peer skips the peer; --peer-only reruns only the peer and the report.
# The peer is run after nvg (one GPU, one process at a time). If the peer cannot run (no
# torch, no file), nvg's figures are still reported and the report says the peer was not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

run_peer=1
nvg_run=1
geoms=""
for a in "$@"; do
	case "$a" in
	--no-peer) run_peer=0 ;;
	--peer-only) nvg_run=0 ;;
	-h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
	-*) echo "bench/run.sh: unknown flag $a" >&2; exit 2 ;;
	*) geoms="$a" ;;
	esac
done
geoms="${geoms:-0.8B,4B,9B,27B}"
if [ -z "${PEER:-}" ]; then
	PEER=../shared/bench/torch_baseline.py
	[ -f "$PEER" ] || [ ! -f shared/bench/torch_baseline.py ] || PEER=shared/bench/torch_baseline.py
fi
PYTHON="${PYTHON:-python3}"
PEER_RUNS="${PEER_RUNS:-3}"
case $PEER_RUNS in [1-9] | [1-9][0-9]) ;; *) echo "run.sh: PEER_RUNS=$PEER_RUNS: want a whole number from 1 to 99" >&2; exit 2 ;; esac
OUT="${OUT:-bench/out/$(date -u +%Y%m%dT%H%M%SZ)}"
CPU_JSON="${CPU_JSON:-docs/bench/lavapipe-tiny.json}"
DOC="${DOC:-docs/BENCHMARKS.md}"
mkdir -p "$OUT" || exit 1

if [ -n "${NVG_BIN:-}" ]; then
	NVG=("$NVG_BIN")
elif command -v nvg >/dev/null 2>&1; then
	NVG=(nvg)
elif command -v go >/dev/null 2>&1; then
	NVG=(go run ./cmd/nvg)
else
	echo "bench/run.sh: no nvg binary: set NVG_BIN, put nvg on PATH, or install Go" >&2
	exit 1
fi
echo "bench/run.sh: nvg = ${NVG[*]}, geometries $geoms, outputs in $OUT" >&2

tag="${geoms//,/-}"
if [ "$nvg_run" = 1 ]; then
	# shellcheck disable=SC2086
	"${NVG[@]}" bench --model "$geoms" --json "$OUT/nvg-$tag.json" ${NVG_FLAGS:-} 2> >(tee "$OUT/nvg-$tag.err" >&2) | tee "$OUT/nvg-$tag.txt"
	echo "bench/run.sh: nvg bench exited with status ${PIPESTATUS[0]}" >&2
fi
if [ ! -s "$OUT/nvg-$tag.json" ]; then
	echo "bench/run.sh: no $OUT/nvg-$tag.json: nvg bench produced no result" >&2
	exit 1
fi

peer_out="$OUT/peer-$tag.txt"
if [ "$run_peer" = 0 ]; then
	echo "peer not run: bench/run.sh --no-peer" >"$peer_out"
elif [ ! -f "$PEER" ]; then
	echo "peer not run: $PEER not found (set PEER)" >"$peer_out"
elif ! "$PYTHON" -c 'import torch, transformers' >/dev/null 2>&1; then
	echo "peer not run: $PYTHON cannot import torch and transformers" >"$peer_out"
else
	: >"$peer_out"
	for ((i = 1; i <= PEER_RUNS; i++)); do
		# shellcheck disable=SC2086
		"$PYTHON" "$PEER" ${geoms//,/ } 2>>"$OUT/peer-$tag.err" | tee -a "$peer_out"
	done
	if ! grep -q '^RESULT \|^FAILED ' "$peer_out"; then
		echo "peer not run: torch_baseline.py printed no RESULT line (see $OUT/peer-$tag.err: $(tail -n 1 "$OUT/peer-$tag.err"))" >"$peer_out"
	fi
fi
grep -q '^peer not run' "$peer_out" && cat "$peer_out" >&2

cpu=()
[ -f "$CPU_JSON" ] && cpu=(--cpu "$CPU_JSON")
NOTES="${NOTES:-docs/bench/targets.md}"
[ -f "$NOTES" ] && cpu+=(--notes "$NOTES")
before=()
[ -n "${BEFORE:-}" ] && before=(--before "$BEFORE")
# Every run in OUT, in the order they were made (this one last, so it wins for a geometry).
reports=$(ls -tr "$OUT"/nvg-*.json | paste -sd, -)
peers=$(ls -tr "$OUT"/peer-*.txt | paste -sd, -)
echo
echo "nvg / peer (tokens/s: above 1 nvg is faster; peak GiB: above 1 nvg needs more):"
"${NVG[@]}" bench --report "$reports" "${before[@]}" --peer "$peers" --format text | tee "$OUT/ratios.txt"
"${NVG[@]}" bench --report "$reports" "${before[@]}" --peer "$peers" "${cpu[@]}" >"$OUT/BENCHMARKS.md" || exit 1
if [ "$DOC" != "-" ]; then
	cp "$OUT/BENCHMARKS.md" "$DOC" && echo "bench/run.sh: wrote $DOC" >&2
fi
