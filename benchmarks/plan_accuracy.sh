#!/usr/bin/env bash
# `plan`'s prediction against the measured peak: three short `train` runs that differ in batch,
# image size and queue.max_size, on the default synthetic data; each run's summary.json keeps
# both (memory_plan.host_peak_mib, peak_memory_mb). Runs under outputs/plan-accuracy/.
# Usage: benchmarks/plan_accuracy.sh [extra overrides...]   (about 5 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=outputs/plan-accuracy/$(date +%Y-%m-%d_%H-%M-%S)
configs=(
  "data.image_size=[128,128] data.batch_size=32 queue.max_size=2"
  "data.image_size=[256,256] data.batch_size=16 queue.max_size=8"
  "data.image_size=[512,512] data.batch_size=8 queue.max_size=4"
)
for i in "${!configs[@]}"; do
  read -r -a overrides <<< "${configs[$i]}"
  echo "== python -m app train ${configs[$i]} trainer.epochs=1 trainer.steps_per_epoch=20"
  "$py" -m app train "${overrides[@]}" trainer.epochs=1 trainer.steps_per_epoch=20 trainer.validation_steps=2 \
    logger=none print_config=false "hydra.run.dir=$out/$i" "$@" >/dev/null 2>&1 || echo "run $i failed: $out/$i/train.log"
done
"$py" - "$out" "${configs[@]}" <<'PY'
import json, sys
from pathlib import Path
out, configs = Path(sys.argv[1]), sys.argv[2:]
print("\n| config | predicted host peak (MiB) | measured (MiB) | predicted / measured |\n|---|---:|---:|---:|")
for i, config in enumerate(configs):
    s = json.loads((out / str(i) / "summary.json").read_text())
    predicted, measured = s["memory_plan"]["host_peak_mib"], s["peak_memory_mb"]
    print(f"| `{config}` | {predicted:.0f} | {measured:.0f} | {predicted / measured:.2f} |")
PY
