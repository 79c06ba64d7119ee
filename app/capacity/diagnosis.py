"""The one-line diagnosis at an epoch's end from its metrics.csv row: what bounds training, and what to change."""

from __future__ import annotations

from collections.abc import Callable

from app.loader.settings import usable_cores

INPUT_BOUND = 0.20  # data-wait fraction
FULL_RING = 0.9  # mean share of full slots when a batch is asked for
NO_WAIT = 0.05
NEAR_BUDGET = 0.9


def diagnose(row: dict, queue, budget_mib: float, cure: Callable[[dict, int], str] | None = None, *,
             drafted: bool = False) -> str:
    """`row`: an epoch's figures; `queue`: the loader's; `budget_mib`: the run's; `cure`: a copy's advice, or None."""
    # drafted: data.decode.draft is on already, so not advised
    wait, fill, peak = row["data_wait_fraction"], row.get("ring_fill"), row["peak_memory_mb"]
    found = []
    if wait > INPUT_BOUND and _copy_binds(row):
        found.append(f"copy-bound: the step waited {100 * wait:.0f} % of the time, and a batch's copy to the device "
                     f"({row['device_copy_ms']:.1f} ms) took longer than the loader made it wait: a smaller "
                     "data.batch_size or data.image_size (the batch is uint8 already)")
    elif wait > INPUT_BOUND:
        stages = ", ".join(f"{name} {row[f'{name}_ms']:.1f}" for name in ("read", "decode", "augment", "copy")
                           if row.get(f"{name}_ms") is not None)
        found.append(f"input-bound: the step waited on the loader {100 * wait:.0f} % of the time (a sample takes "
                     f"{stages or 'n/a'} ms in a worker): {_more_workers(row, queue, budget_mib, cure)}"
                     + ("" if drafted else "data.decode.draft=true, or ") + "smaller data.image_size")
    elif fill is not None and fill >= FULL_RING and wait < NO_WAIT and (queue.workers > 1 or queue.max_size > 1):
        fewer = [f"queue.workers={queue.workers - 1}"] if queue.workers > 1 else []
        fewer += ["queue.max_size=1"] if queue.max_size > 1 else []
        found.append(f"model-bound: the ring was {100 * fill:.0f} % full when the step asked and it waited "
                     f"{100 * wait:.0f} % of the time: {' or '.join(fewer)} saves memory at no cost in speed")
    if peak >= NEAR_BUDGET * budget_mib:
        found.append(f"memory-bound: peak {peak:.0f} MiB of {budget_mib:.0f} MiB: smaller queue.max_size, "
                     "data.batch_size or queue.workers (python -m app plan shows each one's share)")
    if not found:
        full = f", ring {100 * fill:.0f} % full" if fill is not None else ""
        found.append(f"balanced: data wait {100 * wait:.0f} %{full}, peak {peak:.0f} of {budget_mib:.0f} MiB")
    return "; ".join(found)


def _copy_binds(row: dict) -> bool:
    """Whether copying to the device took more of the epoch than waiting for the ring, and half the step's wait."""
    copying = row.get("device_copy_fraction", 0.0)
    return copying > row.get("ring_wait_fraction", 0.0) and copying >= row["data_wait_fraction"] / 2


def _more_workers(row: dict, queue, budget_mib: float, cure) -> str:
    """More workers, when one more has a core and fits the budget (at what a worker took this epoch); else a copy."""
    workers = queue.workers
    if workers >= (cores := usable_cores()):
        return f"not more workers ({workers} already on {cores} cores), but " + \
            (f"{cure(row, workers)}; or " if cure else "")
    each = row.get("peak_workers_mb", 0) / workers if workers else 0
    if row["peak_memory_mb"] + each > budget_mib:
        return (f"not more workers (one more, ~{each:.0f} MiB, would pass the {budget_mib:.0f} MiB budget "
                f"at a peak of {row['peak_memory_mb']:.0f}), but ")
    return f"more workers (queue.workers={workers + 1}), "
