#!/usr/bin/env bash
# Data-parallel scaling of the student step (issue 19): nvg bench at 1, 2, 4, 8 ranks (one
# GPU each, as many as the host has) on the 9B and 27B synthetic geometries, 8 windows ×
# 512 tokens per rank. Needs a binary built with MPI at ./.devbin/nvg:
#   go build -tags mpi -o .devbin/nvg ./cmd/nvg      (libopenmpi-dev, pkg-config)
# Run from the repository root. Prints one line per geometry and rank count:
#   "<geom> data parallel: N ranks × 4096 tokens per step: student X tokens/s summed over the ranks"
# (the 1-rank line is the plain "student step: X tokens/s"), and writes out/bench-dp-N.json.
# Scaling efficiency = tokens/s(N) / (N · tokens/s(1)).
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
gpus=$(nvidia-smi -L | wc -l)
mkdir -p out
for n in 1 2 4 8; do
  ((n <= gpus)) || break
  echo "== $n rank(s)"
  mpirun --oversubscribe -np "$n" ./.devbin/nvg bench --model 9B,27B --nb 8 --t 512 --profile=false \
    --json "out/bench-dp-$n.json" | grep -E 'student step:|data parallel:|FAILED'
done
