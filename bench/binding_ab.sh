#!/usr/bin/env bash
# A/B of the WebGPU binding (issue 16 item 3): the same nvg commit built on
# github.com/oliverbestmann/webgpu v1.0.0 (wgpu-native 27) and on v1.34.1 (wgpu-native 29),
# run one after the other, ROUNDS times, on the same geometries (one GPU, one process at a time).
#
#   bench/binding_ab.sh [GEOMETRIES]        default 0.8B,4B
#
# Environment:
#   OLD   binary on v1.0.0  (default ./.devbin/nvg-old)
#   NEW   binary on v1.34.1 (default ./.devbin/nvg-new)
#   OUT   where the JSON and logs go (default bench/out/binding-ab)
#   FLAGS nvg bench flags (default "--profile=false --steps 3 --reps 1")
#   ROUNDS how many old/new pairs (default 2). With a 10-minute limit per command, run one
#          geometry per call: bench/binding_ab.sh 0.8B, then OUT=… bench/binding_ab.sh 4B
# Prints, per run, the binary, its geometry lines and its throughput lines (teacher pass and
# student step tokens/s, peak GPU GiB, loss); the full logs and JSON (device, driver) stay in OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
geoms="${1:-0.8B,4B}"
OLD="${OLD:-./.devbin/nvg-old}"
NEW="${NEW:-./.devbin/nvg-new}"
OUT="${OUT:-bench/out/binding-ab}"
FLAGS="${FLAGS:---profile=false --steps 3 --reps 1}"
ROUNDS="${ROUNDS:-2}"
mkdir -p "$OUT"
for bin in "$OLD" "$NEW"; do
	[ -x "$bin" ] || { echo "bench/binding_ab.sh: $bin is not an executable (set OLD/NEW)" >&2; exit 2; }
done
rc=0
for rep in $(seq 1 "$ROUNDS"); do
	for side in old new; do
		bin="$OLD"
		[ "$side" = new ] && bin="$NEW"
		log="$OUT/$side-$geoms-$rep.log"
		echo "== $side run $rep: $bin bench --model $geoms $FLAGS ($(date -u +%FT%TZ))"
		# shellcheck disable=SC2086
		if ! "$bin" bench --model "$geoms" $FLAGS --json "$OUT/$side-$geoms-$rep.json" >"$log" 2>&1; then
			echo "   FAILED (exit status $?): tail of $log"; tail -20 "$log"; rc=1
		fi
		grep -E "^== |tokens/s|loss|profiled|FAILED" "$log" | head -20
	done
done
exit $rc
