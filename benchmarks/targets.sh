#!/usr/bin/env bash
# The README's Performance figures: `python -m app bench` in each configuration the targets
# name, on the default synthetic data (photo-like JPEGs of about a megapixel), each run under
# outputs/bench-targets/.
# Usage: benchmarks/targets.sh [extra overrides...]   (about 13 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=outputs/bench-targets/$(date +%Y-%m-%d_%H-%M-%S)
run() {
  local name=$1; shift
  echo "== $name: python -m app bench $*"
  "$py" -m app bench "$@" "hydra.run.dir=$out/$name" "${EXTRA[@]}" 2>/dev/null | grep -E '^\||^[a-z0-9_]+: '
}
EXTRA=("$@")
all='bench.modes=[baseline,loader_steps,loader_fit,loader,keras_threads,keras_processes,serial]'
run full512 data.image_size=[512,512] data.batch_size=16 data.decode.draft=false bench.batches=120 "$all"
run draft256 data.image_size=[256,256] data.batch_size=16 bench.batches=120 "$all"
# max_size 2 against 10, alternating three times: runs here drift by ±10 %, alternation keeps
# the drift out of the comparison. The warmup (12 batches) outlasts the 10 slots the workers
# fill while the model compiles, so those are not timed as if built at the steady rate.
for batch in 16 64; do
  for repeat in 1 2 3; do
    for slots in 2 10; do
      run "slots${slots}_batch${batch}_$repeat" data.image_size=[512,512] data.batch_size=$batch \
        data.decode.draft=false queue.max_size=$slots bench.warmup=12 bench.batches=$((1920 / batch)) \
        'bench.modes=[loader_steps]' bench.memory=false
    done
  done
done
run memory64 data.image_size=[512,512] data.batch_size=64 data.decode.draft=false queue.max_size=10 \
  bench.batches=12 'bench.modes=[baseline,loader_steps,keras_processes]'
echo "bench.json files: $out/*/bench.json"
