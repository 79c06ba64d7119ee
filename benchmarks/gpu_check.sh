#!/usr/bin/env bash
# A GPU check anyone can run: `train` on the default model and a keras.applications model at
# 224² under each backend (TensorFlow, JAX: those installed), strategy (one device; all of them
# when there are several) and precision, and the default model with queue.workers=auto, then a
# table of images/s, data-wait fraction, device utilisation (nvidia-smi's, sampled while the run
# trains, when there is nvidia-smi) and peak host memory (the run's own summary.json), and where
# the uint8 → float32 cast runs under each backend (benchmarks/cast_placement.py).
# Then the runs that say what a prepared copy gives: `prepare` of the very same photos at the run's
# size (timed), and under each backend, default strategy, float32 and the queue's defaults (no
# queue.* override), the small ResNet and the keras.applications model on the originals and on the
# copy (<backend>-default-float32-<resnet|keras_app>-<originals|prepared>); the table adds the mean
# copy of a batch to the device (summary.json's device_copy_ms) and a second table sets each model's
# originals beside its copy.
# Runs go to outputs/gpu_check/<date>_<time>/ (the copy to its prepared/, prepare's log to prepare/).
# Usage: benchmarks/gpu_check.sh [--quick] [--runs REGEX] [more overrides for every run...]
#   --quick: on the CPU, 64² images and a few steps, 2 logical CPU devices for the strategies,
#            the distributed ones in float32 only, the prepare and the runs on originals and copy
#            included: a few minutes on 2 cores.
#   --runs REGEX: only the runs whose name (e.g. jax-default-float32-resnet) matches, to fit a
#            short lease of the GPU machine; the prepare runs only when a -prepared run matches
#            (e.g. --runs 'originals|prepared': the copy's question alone).
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

# common = the source's keys (data_source: also what `prepare` reads) + its size and batch
# (data_size: also what a run on the copy sets) + trainer + queue (queue: the runs above the copy's only)
if ((quick)); then
  data_source=(data.num_images=128 data.source_size=256)
  data_size=(data.image_size=[64,64] data.batch_size=16)
  schedule=(trainer.steps_per_epoch=6 trainer.validation_steps=1 trainer.epochs=1)
  queue=(queue.workers=1)
  precisions=(float32 mixed_bfloat16)
  split=(trainer.cpu_devices=2)  # strategies on logical CPU devices
  app_model=(model=keras_app model.name=MobileNetV3Small model.weights=null)
else
  # 4000 images: 3200 train, 50 full batches of 64 an epoch
  data_source=(data.num_images=4000)
  data_size=(data.image_size=[224,224] data.batch_size=64)
  schedule=(trainer.steps_per_epoch=50 trainer.validation_steps=4 trainer.epochs=2)
  queue=()
  precisions=(float32 mixed_bfloat16)
  ((gpus)) && precisions+=(mixed_float16)
  split=()
  app_model=(model=keras_app model.name=EfficientNetV2B0 model.weights=null)
fi
quiet=(logger=none print_config=false)
common=("${data_source[@]}" "${data_size[@]}" "${schedule[@]}" "${queue[@]}" "${quiet[@]}")
# the copy of the same photos, and what trains on it: its own splits, the run's size and batch
copy=$PWD/$out/prepared
on_originals=("${data_source[@]}" "${data_size[@]}" "${schedule[@]}" "${quiet[@]}")
on_copy=(data=prepared "data.path=$copy" "${data_size[@]}" "${schedule[@]}" "${quiet[@]}")

strategies_of() {  # the strategies a backend can run here
  local distributed=$([[ $1 == tensorflow ]] && echo mirrored || echo data_parallel)
  echo default
  if ((quick || gpus > 1)); then echo "$distributed"; fi
}

selected() { [[ -z $runs || $1 =~ $runs ]]; }

train() {  # name, overrides... (after them: common)
  local name=$1; shift
  train_on common "$name" "$@"
}

train_on() {  # the name of an array of overrides for every run, name, overrides...
  local -n base=$1
  local name=$2; shift 2
  selected "$name" || return
  local dir=$out/$name
  mkdir -p "$dir"
  echo "$name" >> "$out/runs.txt"
  echo "== $name: python -m app train $* ${base[*]} ${extra[*]}" | tee -a "$out/commands.txt"
  local sampler=
  if ((gpus)); then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > "$dir/utilisation.txt" &
    sampler=$!
  fi
  "$py" -m app train "$@" "${base[@]}" "${extra[@]}" "hydra.run.dir=$dir" > "$dir/output.txt" 2>&1 ||
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

# Originals against a prepared copy of the same photos: the queue's defaults (no queue.* override)
prepared_wanted=0
for backend in "${backends[@]}"; do
  for model in resnet keras_app; do
    selected "$backend-default-float32-$model-prepared" && prepared_wanted=1
  done
done
prepared_ok=0
if ((prepared_wanted)); then
  # prepare's workers: every core (it has no step to share them with); the source and size the runs train on
  prepare=("${data_source[@]}" "${data_size[@]}" "${quiet[@]}" queue.workers=auto "prepare.out=$copy")
  mkdir -p "$out/prepare"
  echo "== prepare: python -m app prepare ${prepare[*]} ${extra[*]}" | tee -a "$out/commands.txt"
  started=$(date +%s.%N)
  if "$py" -m app prepare "${prepare[@]}" "${extra[@]}" "hydra.run.dir=$out/prepare" > "$out/prepare/output.txt" 2>&1; then
    prepared_ok=1
    echo "   prepare: $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s;" \
         "$(grep '^prepared ' "$out/prepare/output.txt" | tail -n 1)" | tee -a "$out/commands.txt"
  else
    echo "   prepare failed: $(tail -n 2 "$out/prepare/output.txt" | tr '\n' ' ')"
  fi
fi
for backend in "${backends[@]}"; do
  placed=(trainer.backend=$backend trainer.strategy=default trainer.precision=float32)
  for model in resnet keras_app; do
    chosen=()
    [[ $model == keras_app ]] && chosen=("${app_model[@]}")
    train_on on_originals "$backend-default-float32-$model-originals" "${placed[@]}" "${chosen[@]}"
    if ((prepared_ok)); then
      train_on on_copy "$backend-default-float32-$model-prepared" "${placed[@]}" "${chosen[@]}"
    elif selected "$backend-default-float32-$model-prepared"; then
      echo "   $backend-default-float32-$model-prepared: skipped, no copy (the prepare failed)"
    fi
  done
done

"$py" - "$out" <<'EOF'
import json, re, sys
from pathlib import Path

out = Path(sys.argv[1])
names = (out / "runs.txt").read_text().split() if (out / "runs.txt").exists() else []


def figures(name):
    run = out / name
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    util = run / "utilisation.txt"
    samples = [float(v) for v in util.read_text().split()] if util.exists() else []
    return summary, samples


def wait_of(summary):
    wait = summary.get("data_wait_fraction")
    return "n/a" if wait is None else f"{100 * wait:.0f} %"


print("\n| run | images/s | data wait | copy to device | device utilisation | peak host MiB | status |")
print("|---|---:|---:|---:|---:|---:|---|")
for name in sorted(set(names)):
    summary, samples = figures(name)
    busy = f"{sum(samples) / len(samples):.0f} %" if samples else "n/a"
    ips, peak, copy = summary.get("images_per_s"), summary.get("peak_memory_mb"), summary.get("device_copy_ms")
    print(f"| {name} | {ips or 0:.1f} | {wait_of(summary)} | {'n/a' if copy is None else f'{copy:.1f} ms'} | "
          f"{busy} | {peak or 0:.0f} | {summary.get('status', 'no summary')} |")

pairs = sorted({m.group(1) for n in names if (m := re.fullmatch(r"(.+)-(?:originals|prepared)", n))})
if pairs:
    print("\n| model | images/s originals | images/s prepared | prepared / originals | data wait originals | data wait prepared |")
    print("|---|---:|---:|---:|---:|---:|")
    for pair in pairs:
        original, prepared = (figures(f"{pair}-{kind}")[0] for kind in ("originals", "prepared"))
        a, b = original.get("images_per_s"), prepared.get("images_per_s")
        ratio = f"{b / a:.2f}×" if a and b else "n/a"
        print(f"| {pair} | {'n/a' if a is None else f'{a:.1f}'} | {'n/a' if b is None else f'{b:.1f}'} | {ratio} | "
              f"{wait_of(original)} | {wait_of(prepared)} |")
EOF

echo
for backend in "${backends[@]}"; do
  KERAS_BACKEND=$backend "$py" benchmarks/cast_placement.py 2>/dev/null || echo "$backend: cast check failed"
done
echo "runs: $out"
