"""queue.workers=auto and queue.max_size=auto against a sweep of workers × max_size.

For each workload, in one session: `auto`, then every (workers, max_size) of the sweep, then the
same again in reverse order (so drift falls on both sides); each run a real `python -m app
train` in its own process. The figures are the second epoch's images/s and the run's peak host
memory (summary.json), each setting's mean over its runs (`--repeats`, 2 by default). Prints a
Markdown table for docs/performance.md and writes every summary to outputs/bench_auto/.

    .venv/bin/python benchmarks/auto_queue.py            # both workloads, ~40 minutes on 2 cores
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
# compute-shared: the same decode for a 4× larger input, whose step takes about as long: both share the cores
# model-bound: small inputs decoded at reduced scale, a wide model
WORKLOADS = {
    "decode-bound": ["data.image_size=[128,128]", "data.decode.draft=false", "data.batch_size=16",
                     "model.widths=[16,32]"],
    "compute-shared": ["data.image_size=[256,256]", "data.decode.draft=false", "data.batch_size=16",
                 "model.widths=[16,32]"],
    "model-bound": ["data.image_size=[64,64]", "data.batch_size=32", "model.widths=[64,128,256]",
                    "model.blocks_per_stage=2"],
}
STEPS = {"decode-bound": 40, "compute-shared": 30, "model-bound": 20}  # an epoch of ~5–15 s here


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


def mean(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs)


def row(label: str, runs: list[dict]) -> str:
    chosen = {(r["queue_auto"]["workers"], r["queue_auto"]["max_size"]) for r in runs if r.get("queue_auto")}
    label += "".join(f" → {w}, {m}" for w, m in sorted(chosen))
    each = " / ".join(f"{r['images_per_s']:.1f}" for r in runs)
    return (f"| {label} | {each} | {mean(runs, 'images_per_s'):.1f} | {100 * mean(runs, 'data_wait_fraction'):.0f} % "
            f"| {mean(runs, 'peak_memory_mb'):.0f} |")


def workload(name: str, overrides: list[str], settings: list[tuple], steps: int, repeats: int) -> list[str]:
    """Every setting `repeats` times, the order reversed each repeat; `auto` first and last."""
    results: dict[str, list[dict]] = {}
    order = [("auto", "auto"), *settings]
    for repeat in range(repeats):
        for w, m in order if repeat % 2 == 0 else order[::-1]:
            label = "auto" if w == "auto" else f"{w}, {m}"
            run = train(f"{name}/w{w}-m{m}-{repeat}", [*overrides, f"queue.workers={w}", f"queue.max_size={m}"], steps)
            results.setdefault(label, []).append(run)
    swept = {k: v for k, v in results.items() if k != "auto"}
    best_key = max(swept, key=lambda k: mean(swept[k], "images_per_s"))
    best, auto = swept[best_key], results["auto"]
    lines = [f"**{name}** (`{' '.join(overrides)}`)", "",
             "| workers, max_size | images/s (epoch 2, each run) | mean | data wait | peak host MiB |",
             "|---|---:|---:|---:|---:|"]
    lines += [row(k, v) for k, v in results.items()]
    lines += ["", f"Best of the sweep: {best_key}, {mean(best, 'images_per_s'):.1f} images/s at "
              f"{mean(best, 'peak_memory_mb'):.0f} MiB. `auto`: {mean(auto, 'images_per_s'):.1f} images/s "
              f"({mean(auto, 'images_per_s') / mean(best, 'images_per_s'):.2f} of the best) at "
              f"{mean(auto, 'peak_memory_mb'):.0f} MiB "
              f"({mean(auto, 'peak_memory_mb') - mean(best, 'peak_memory_mb'):+.0f})."
              f" Its reason: {auto[0]['queue_auto']['reason']}", ""]
    (OUT / f"{name}.json").write_text(json.dumps(results, indent=1, default=str))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps and two values of each: checks it runs")
    parser.add_argument("--only", choices=list(WORKLOADS), action="append", help="this workload (repeatable)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting, alternating order")
    args = parser.parse_args()
    quick = args.quick
    workers, sizes = ([1, 2], [1, 2]) if quick else ([1, 2, 3], [1, 2, 4])
    settings = list(itertools.product(workers, sizes))
    OUT.mkdir(parents=True, exist_ok=True)
    lines = []
    for name in args.only or list(WORKLOADS):
        overrides = WORKLOADS[name]
        steps = 3 if quick else STEPS[name]
        lines += workload(name, overrides, settings, steps, repeats=1 if quick else args.repeats)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
