#!/usr/bin/env bash
# Tuning experiment (issue 32, DESIGN.md §7): compiles coopmat_gemm_x.comp into one SPIR-V set
# per code variant under x/<set>/ (the five binding variants of ../generate.sh each), selected
# at run time by NVG_COOPMAT_SHADER=<set> or the benchmark's coopmat@<set> variants.
# Usage: NVG_GLSLANG_PREFIX=/tmp/tc-sid bash gpu/coopmat/x/generate.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
p=${NVG_GLSLANG_PREFIX:?set NVG_GLSLANG_PREFIX to a prefix with glslang 16}/root
run() { "$p/usr/lib64/ld-linux-x86-64.so.2" --library-path "$p/usr/lib/x86_64-linux-gnu" "$@"; }
sets=(
  "roll:"
  "unroll:-DUNROLL_LOOPS"
  "unroll_f16:-DUNROLL_LOOPS -DSHF16"
  "unroll_db:-DUNROLL_LOOPS -DDBUF"
  "unroll_f16_db:-DUNROLL_LOOPS -DSHF16 -DDBUF"
  "probe1:-DUNROLL_LOOPS -DPROBE=1"
  "probe2:-DUNROLL_LOOPS -DPROBE=2"
)
variants=(
  "coopmat_gemm.spv:"
  "coopmat_gemm_scale.spv:-DSCALE"
  "coopmat_blr.spv:-DSIGNS"
  "coopmat_blr_scale.spv:-DSIGNS -DSCALE"
  "coopmat_blr_scale_raw.spv:-DSIGNS -DSCALE -DRAW"
)
for s in "${sets[@]}"; do
  set_name=${s%%:*}
  set_flags=${s#*:}
  mkdir -p "$here/$set_name"
  for v in "${variants[@]}"; do
    name=${v%%:*}
    flags="${v#*:} $set_flags"
    # shellcheck disable=SC2086 # flags are words
    run "$p/usr/bin/glslangValidator" --quiet --target-env vulkan1.3 -V $flags -o "$here/$set_name/$name" "$here/coopmat_gemm_x.comp"
    run "$p/usr/bin/spirv-val" --target-env vulkan1.3 "$here/$set_name/$name"
  done
  echo "x/generate.sh: $set_name ($set_flags)"
done
