"""queue.workers=auto and queue.max_size=auto against a sweep of workers × max_size (issue 14.3).

For each workload, in one session: an `auto` run, every (workers, max_size) of the sweep, then
`auto` again (so drift shows); each run a real `python -m app train` in its own process. The
figures are the second epoch's images/s and the run's peak host memory (summary.json). Prints a
Markdown table for docs/performance.md and writes every summary to outputs/bench_auto/.

    .venv/bin/python benchmarks/auto_queue.py            # both workloads, ~25 minutes on 2 cores
    .venv/bin/python benchmarks/auto_queue.py --quick    # fewer steps and values: checks it runs
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

OUT = Path("outputs/bench_auto")
# decode-bound: photo-like JPEGs decoded whole for a small input and a small model
# balanced: the same decode for a 4× larger input, whose step takes about as long
# model-bound: small inputs decoded at reduced scale, a wide model
WORKLOADS = {
    "decode-bound": ["data.image_size=[128,128]", "data.decode.draft=false", "data.batch_size=16",
                     "model.widths=[16,32]"],
    "balanced": ["data.image_size=[256,256]", "data.decode.draft=false", "data.batch_size=16",
                 "model.widths=[16,32]"],
    "model-bound": ["data.image_size=[64,64]", "data.batch_size=32", "model.widths=[64,128,256]",
                    "model.blocks_per_stage=2"],
}


def train(name: str, overrides: list[str], steps: int) -> dict:
    run = OUT / name
    args = [sys.executable, "-m", "app", "train", *overrides, "trainer.epochs=2", f"trainer.steps_per_epoch={steps}",
            "trainer.validation_steps=2", "print_config=false", f"hydra.run.dir={run}"]
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{name} failed:\n{done.stderr[-2000:]}")
    summary = json.loads((run / "summary.json").read_text())
    summary["wall_s"] = time.perf_counter() - started
    return summary


def row(label: str, s: dict) -> str:
    q = s.get("queue_auto") or {}
    chosen = f" → {q['workers']}, {q['max_size']}" if q else ""
    return (f"| {label}{chosen} | {s['images_per_s']:.1f} | {100 * s['data_wait_fraction']:.0f} % | "
            f"{s['peak_memory_mb']:.0f} |")


def workload(name: str, overrides: list[str], workers: list[int], sizes: list[int], steps: int) -> list[str]:
    results = {"auto (first)": train(f"{name}/auto-1", [*overrides, "queue.workers=auto", "queue.max_size=auto"],
                                     steps)}
    for w, m in itertools.product(workers, sizes):
        results[f"{w}, {m}"] = train(f"{name}/w{w}-m{m}", [*overrides, f"queue.workers={w}", f"queue.max_size={m}"],
                                     steps)
    results["auto (again)"] = train(f"{name}/auto-2", [*overrides, "queue.workers=auto", "queue.max_size=auto"],
                                    steps)
    swept = {k: v for k, v in results.items() if not k.startswith("auto")}
    best_key = max(swept, key=lambda k: swept[k]["images_per_s"])
    best = swept[best_key]
    autos = [v for k, v in results.items() if k.startswith("auto")]
    lines = [f"**{name}** ({' '.join(overrides)})", "",
             "| workers, max_size | images/s (epoch 2) | data wait | peak host MiB |", "|---|---:|---:|---:|"]
    lines += [row(k, v) for k, v in results.items()]
    ratios = ", ".join(f"{a['images_per_s'] / best['images_per_s']:.2f}" for a in autos)
    memory = ", ".join(f"{a['peak_memory_mb'] - best['peak_memory_mb']:+.0f}" for a in autos)
    lines += ["", f"best of the sweep: {best_key} ({best['images_per_s']:.1f} images/s, "
              f"{best['peak_memory_mb']:.0f} MiB); auto / best images/s: {ratios}; auto − best peak MiB: {memory}",
              f"auto's reason (first run): {autos[0]['queue_auto']['reason']}", ""]
    (OUT / f"{name}.json").write_text(json.dumps(results, indent=1, default=str))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps and two values of each: checks it runs")
    quick = parser.parse_args().quick
    workers, sizes, steps = ([1, 2], [1, 2], 3) if quick else ([1, 2, 3], [1, 2, 4], 16)
    OUT.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, overrides in WORKLOADS.items():
        lines += workload(name, overrides, workers, sizes, steps)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
