#!/usr/bin/env bash
# A GPU check anyone can run: `train` on the default model and a keras.applications model at
# 224² under each backend (TensorFlow, JAX: those installed), strategy (one device; all of them
# when there are several) and precision, and the default model with queue.workers=auto, then a
# table of images/s, data-wait fraction, device utilisation (nvidia-smi's, sampled while the run
# trains, when there is nvidia-smi) and peak host memory (the run's own summary.json), and where
# the uint8 → float32 cast runs under each backend (benchmarks/cast_placement.py).
# Runs go to outputs/gpu_check/<date>_<time>/.
# Usage: benchmarks/gpu_check.sh [--quick] [--runs REGEX] [more overrides for every run...]
#   --quick: on the CPU, 64² images and a few steps, 2 logical CPU devices for the strategies,
#            the distributed ones in float32 only: a couple of minutes on 2 cores.
#   --runs REGEX: only the runs whose name (e.g. jax-default-float32-resnet) matches, to fit a
#            short lease of the GPU machine.
# The figures are the last epoch's (the full check trains 2: the first one's include tracing).
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
quick=0
if [[ ${1:-} == --quick ]]; then quick=1; shift; fi
runs=
if [[ ${1:-} == --runs ]]; then runs=$2; shift 2; fi
extra=("$@")
out=outputs/gpu_check/$(date +%Y-%m-%d_%H-%M-%S)
mkdir -p "$out"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
backends=()
for b in tensorflow jax; do "$py" -c "import $b" >/dev/null 2>&1 && backends+=("$b"); done

if ((quick)); then
  common=(data.num_images=128 data.source_size=256 data.image_size=[64,64] data.batch_size=16
          trainer.steps_per_epoch=6 trainer.validation_steps=1 queue.workers=1 trainer.epochs=1)
  precisions=(float32 mixed_bfloat16)
  split=(trainer.cpu_devices=2)  # strategies on logical CPU devices
  app_model=(model=keras_app model.name=MobileNetV3Small model.weights=null)
else
  # 4000 images: 3200 train, 50 full batches of 64 an epoch
  common=(data.num_images=4000 data.image_size=[224,224] data.batch_size=64 trainer.steps_per_epoch=50 trainer.validation_steps=4
          trainer.epochs=2)
  precisions=(float32 mixed_bfloat16)
  ((gpus)) && precisions+=(mixed_float16)
  split=()
  app_model=(model=keras_app model.name=EfficientNetV2B0 model.weights=null)
fi
common+=(logger=none print_config=false)

strategies_of() {  # the strategies a backend can run here
  local distributed=$([[ $1 == tensorflow ]] && echo mirrored || echo data_parallel)
  echo default
  if ((quick || gpus > 1)); then echo "$distributed"; fi
}

train() {  # name, overrides...
  local name=$1; shift
  if [[ -n $runs && ! $name =~ $runs ]]; then return; fi
  local dir=$out/$name
  mkdir -p "$dir"
  echo "== $name: python -m app train $*" | tee -a "$out/commands.txt"
  local sampler=
  if ((gpus)); then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > "$dir/utilisation.txt" &
    sampler=$!
  fi
  "$py" -m app train "$@" "${common[@]}" "${extra[@]}" "hydra.run.dir=$dir" > "$dir/output.txt" 2>&1 ||
    echo "   failed: $(tail -n 2 "$dir/output.txt" | tr '\n' ' ')"
  if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; fi
}

for backend in "${backends[@]}"; do
  for strategy in $(strategies_of "$backend"); do
    placed=(trainer.backend=$backend trainer.strategy=$strategy)
    [[ $strategy != default ]] && placed+=("${split[@]}")
    for precision in "${precisions[@]}"; do
      if ((quick)) && [[ $strategy != default && $precision != float32 ]]; then continue; fi
      train "$backend-$strategy-$precision-resnet" "${placed[@]}" trainer.precision=$precision
    done
    if ((quick)) && [[ $strategy != default ]]; then continue; fi
    train "$backend-$strategy-float32-keras_app" "${placed[@]}" "${app_model[@]}"
    # the default queue (2 workers) starves a GPU: what `auto` chooses beside it
    ((quick)) || train "$backend-$strategy-float32-resnet-queue_auto" "${placed[@]}" queue.workers=auto queue.max_size=auto
  done
done

"$py" - "$out" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
print(f"\n| run | images/s | data wait | device utilisation | peak host MiB | status |")
print("|---|---:|---:|---:|---:|---|")
for run in sorted(p for p in out.iterdir() if p.is_dir()):
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    util = run / "utilisation.txt"
    samples = [float(v) for v in util.read_text().split()] if util.exists() else []
    busy = f"{sum(samples) / len(samples):.0f} %" if samples else "n/a"
    ips, wait, peak = summary.get("images_per_s"), summary.get("data_wait_fraction"), summary.get("peak_memory_mb")
    print(f"| {run.name} | {ips or 0:.1f} | {100 * (wait or 0):.0f} % | {busy} | {peak or 0:.0f} | "
          f"{summary.get('status', 'no summary')} |")
EOF

echo
for backend in "${backends[@]}"; do
  KERAS_BACKEND=$backend "$py" benchmarks/cast_placement.py 2>/dev/null || echo "$backend: cast check failed"
done
echo "runs: $out"
