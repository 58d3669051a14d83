#!/usr/bin/env bash
# Sign learning (issue 15, DESIGN.md "Sign learning") on the tiny teacher, side by side with
# the metric-only run of the issue's table: the same data, seed and budget, with and without
# --train-signs. Prints per run the distilled perplexity, the teacher's, the mean step time
# and the signs flipped.
#
#   bench/signs-h200.sh            the full rows: 600 steps, metric only and --train-signs
#   bench/signs-h200.sh short      100 steps of both modes (for tuning the --sign-* knobs)
#   bench/signs-h200.sh long       the 2,200-step rows
#
# Environment: NVG_BIN (default ./.devbin/nvg), OUT (default bench/out/signs-<UTC time>),
# SIGN_FLAGS (extra knobs for the --train-signs run, e.g. "--sign-alpha 4 --sign-tau 48").
# Each run is one `nvg distill` (about 3-4 min at 600 steps on one H200); a machine with a
# 10-minute limit per command runs one mode per call: MODES=signs bench/signs-h200.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NVG_BIN=${NVG_BIN:-./.devbin/nvg}
OUT=${OUT:-bench/out/signs-$(date -u +%Y%m%dT%H%M%SZ)}
MODES=${MODES:-"metric signs"}
steps=600
case "${1:-}" in
short) steps=100 ;;
long) steps=2200 ;;
"") ;;
*) echo "usage: $0 [short|long]" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
common=(--steps "$steps" --nb 16 --t 512 --lr 0.005 --warmup 50 --eval-windows 256 --eval-every 0)
for mode in $MODES; do
	dir="$OUT/$mode-$steps"
	extra=()
	if [ "$mode" = signs ]; then
		# shellcheck disable=SC2206
		extra=(--train-signs ${SIGN_FLAGS:-})
	fi
	echo "== $mode, $steps steps: $NVG_BIN distill ${common[*]} ${extra[*]} -o $dir"
	start=$(date +%s)
	"$NVG_BIN" distill "${common[@]}" "${extra[@]}" -o "$dir" >"$dir.log" 2>&1
	rc=$?
	echo "   exit $rc, $(($(date +%s) - start)) s wall (log: $dir.log)"
	grep -E "held-out perplexity|gap closed" "$dir.log" | sed 's/^/   /'
	if [ -f "$dir/metrics.jsonl" ]; then
		python3 - "$dir/metrics.jsonl" <<'PY' || true
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"step"' in l.replace(" ", "")]
if steps:
    w = [s["wall_seconds"] for s in steps if s.get("wall_seconds") is not None]
    dt = (w[-1] - w[0]) / max(1, len(w) - 1) if len(w) > 1 else float("nan")
    flips = [sum(s.get("sign_flips") or []) for s in steps]
    print(f"   mean step time {1000 * dt:.1f} ms over {len(steps)} steps; signs flipped {sum(flips)} "
          f"(first 10 steps {sum(flips[:10])}, last 10 {sum(flips[-10:])})")
PY
	fi
done
