#!/usr/bin/env bash
# This loader beside the input pipelines its users would otherwise write: Keras's PyDataset
# (threads, processes) and tf.data (app/bench/tf_data.py), each through the same trivial model,
# at 512² with a full decode and with the default draft decode, batch 16 and 64, on the default
# synthetic data (photo-like JPEGs of about a megapixel). Each configuration is one
# `python -m app bench` run, its modes side by side; runs under outputs/bench-peers/.
# Usage: benchmarks/peers.sh [extra overrides...]   (about 12 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=outputs/bench-peers/$(date +%Y-%m-%d_%H-%M-%S)
modes='bench.modes=[loader_steps,keras_threads,keras_processes,tf_data]'
for batch in 16 64; do
  for draft in false true; do
    name=batch${batch}_draft_${draft}
    echo "== $name: python -m app bench data.image_size=[512,512] data.batch_size=$batch data.decode.draft=$draft" \
      "bench.batches=$((1920 / batch)) $modes"
    "$py" -m app bench data.image_size=[512,512] data.batch_size=$batch data.decode.draft=$draft \
      bench.batches=$((1920 / batch)) "$modes" "hydra.run.dir=$out/$name" "$@" 2>/dev/null | grep -E '^\||^[a-z0-9_]+: '
  done
done
echo "bench.json files: $out/*/bench.json"
