#!/usr/bin/env bash
# The quality levers of issue 36 on the tiny teacher, each alone and combined, at the issue's
# budget: 16 × 512 tokens a step, 600 steps' worth of tokens counting every phase (--steps is
# the budget of all phases), nvg's 256 × 512 held-out evaluation, seed 1, from sign learning
# (--train-signs, lr 0.005, 50 warm-up steps: the 17.667 row of DESIGN.md "Sign learning").
# Prints a markdown table: the compressed student's held-out perplexity before training (the
# initialisation's), the distilled one, its ratio to the teacher's, and the wall time.
#
#   bench/quality-ablation.sh CORPUS          every run of RUNS, then the table of all in OUT
#   bench/quality-ablation.sh --table         the table of the runs already in OUT
#
# CORPUS is the Go standard library the default corpus reads (data.StdlibCorpus, the model
# card's split): a Go installation's root (holding src/) or its src/ directory, carried to a
# machine without a Go toolchain; nvg is run with GOROOT set to it.
#
# Environment: NVG_BIN (default ./.devbin/nvg, prebuilt: the device has no Go toolchain), OUT
# (default bench/out/quality-<UTC time>; runs of several calls into the same OUT make one
# table), RUNS (default: every run below, by name), STEPS (600), FINISH (the scale-only
# finish's steps within STEPS, 100), BLOCK (the block-wise reconstruction's steps per decoder
# layer within STEPS, 8: 64 of the tiny teacher's 600), HIDDEN (the hidden-state loss's
# flags, "--hidden-loss mse": λ 1 over every layer's output; its teacher states take
# 600 × 16 windows × 2·512·256 bytes per layer = 2.3 GiB per layer, 19 GiB for all 8, in a
# file beside the top-k in the run directory), EXTRA (flags added to every run).
# Each run is one nvg distill of 600 steps (3–4 min on one H200 with --train-signs, plus the
# calibration and the refinement's compression for --init refine: DESIGN.md §5); a machine
# with a 10-minute limit per command runs two per call, e.g.
#   OUT=bench/out/q RUNS="signs refine" bench/quality-ablation.sh /data/go
#   OUT=bench/out/q RUNS="finish refine+finish" bench/quality-ablation.sh /data/go
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NVG_BIN=${NVG_BIN:-./.devbin/nvg}
OUT=${OUT:-bench/out/quality-$(date -u +%Y%m%dT%H%M%SZ)}
STEPS=${STEPS:-600}
FINISH=${FINISH:-100}

BLOCK=${BLOCK:-8}
HIDDEN=${HIDDEN:---hidden-loss mse}

# name|flags: one line per lever alone and combined (issue 36: a data-aware init, the
# block-wise reconstruction, the hidden-state loss, the scale-only finish).
runs=(
	"signs|"
	"refine|--init refine"
	"finish|--finish-steps $FINISH"
	"refine+finish|--init refine --finish-steps $FINISH"
	"blockwise|--block-steps $BLOCK"
	"hidden|$HIDDEN"
	"refine+blockwise+finish|--init refine --block-steps $BLOCK --finish-steps $FINISH"
	"all|--init refine --block-steps $BLOCK $HIDDEN --finish-steps $FINISH"
)
RUNS=${RUNS:-$(for r in "${runs[@]}"; do printf '%s ' "${r%%|*}"; done)}
common=(--steps "$STEPS" --nb 16 --t 512 --lr 0.005 --warmup 50 --eval-windows 256 --eval-every 0 --train-signs)

table() {
	# shellcheck disable=SC2046
	python3 - "$OUT" $(for r in "${runs[@]}"; do printf '%s ' "${r%%|*}"; done) <<'PY'
import json, os, sys
out, order = sys.argv[1], sys.argv[2:]
rows = []
names = [n for n in os.listdir(out) if os.path.isdir(os.path.join(out, n))]
for name in sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n)):
    rep, cfg = os.path.join(out, name, "report.json"), os.path.join(out, name, "distill.json")
    if not os.path.isfile(rep):
        continue
    r, d = json.load(open(rep)), json.load(open(cfg))
    flags = open(os.path.join(out, name + ".flags")).read().strip() if os.path.isfile(os.path.join(out, name + ".flags")) else ""
    block = [p for p in r.get("phases", []) if p["kind"] == "block"]
    phases = ", ".join(([f'block {sum(p["steps_done"] for p in block)} ({len(block)} layers)'] if block else []) +
                       [f'{p["kind"]} {p["steps_done"]}' for p in r.get("phases", []) if p["kind"] != "block"]) or f'kl {r["steps"]}'
    rows.append((name, flags, d.get("init") or "dual-svid", phases, r["tokens"], r["compressed_perplexity"],
                 r["distilled_perplexity"], r["distilled_perplexity"] / r["teacher_perplexity"], r["teacher_perplexity"], r["wall_seconds"]))
if not rows:
    sys.exit("no finished run in " + out)
print("| run | flags (beyond the common ones) | init | phases (steps) | tokens | compressed ppl | distilled ppl | × teacher | teacher ppl | training s |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print("| %s | `%s` | %s | %s | %d | %.1f | **%.3f** | %.2f | %.3f | %.0f |" % r)
PY
}

if [ "${1:-}" = --table ]; then
	table
	exit
fi
corpus=${1:?usage: $0 CORPUS (a Go root holding src/, or its src/) | --table}
[ -d "$corpus/src" ] || { [ "$(basename "$corpus")" = src ] && corpus=$(dirname "$corpus"); }
[ -d "$corpus/src" ] || { echo "$0: $1 holds no Go standard library (no src/ there)" >&2; exit 2; }
corpus=$(cd "$corpus" && pwd)
mkdir -p "$OUT"
for name in $RUNS; do
	flags=""
	found=0
	for r in "${runs[@]}"; do
		if [ "${r%%|*}" = "$name" ]; then
			flags=${r#*|}
			found=1
		fi
	done
	[ $found = 1 ] || { echo "$0: no run named $name" >&2; exit 2; }
	dir="$OUT/$name"
	if [ -f "$dir/report.json" ]; then
		echo "== $name: done before ($dir)"
		continue
	fi
	rm -rf "$dir"
	echo "$flags ${EXTRA:-}" >"$dir.flags"
	echo "== $name: GOROOT=$corpus $NVG_BIN distill ${common[*]} $flags ${EXTRA:-} -o $dir"
	start=$(date +%s)
	# shellcheck disable=SC2086
	GOROOT=$corpus "$NVG_BIN" distill "${common[@]}" $flags ${EXTRA:-} -o "$dir" >"$dir.log" 2>&1
	echo "   exit $?, $(($(date +%s) - start)) s wall (log: $dir.log)"
	grep -E "^(teacher|compressed|distilled)  +held-out|gap closed|^phases|refined:|^calibration:|block-wise reconstruction:" "$dir.log" | sed 's/^/   /'
done
table
