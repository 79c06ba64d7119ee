"""The summary line a prepare ends with, and after how many epochs its time pays back (a few samples timed each way)."""

from __future__ import annotations

import time

import numpy as np

from app.data.pixels.images import Decode

TIMED = 8  # samples of each kind


def seconds_per_sample(split, decode: Decode) -> float | None:
    """Mean read+decode time, the loader's, of the first few readable samples of `split`; None: none readable."""
    times = []
    for index in range(min(len(split), 4 * TIMED)):
        begun = time.perf_counter()
        try:
            split.read(index, decode)
        except Exception:  # noqa: BLE001 - a bad file is bad_samples.txt's, not the timing's
            continue
        times.append(time.perf_counter() - begun)
        if len(times) == TIMED:
            break
    return float(np.mean(times)) if times else None


def summary_line(*, files: int, bad: int, sizes: tuple[int, int], seconds: float, per_sample: tuple) -> str:
    """`sizes`: bytes before and after; `per_sample`: (original, prepared) seconds a sample, samples an epoch."""
    before, after = sizes
    original, prepared, epoch_samples = per_sample
    line = (f"prepared {files} files ({bad} bad, left out): {_mb(before)} → {_mb(after)} in {seconds:.1f} s")
    if original is None or prepared is None:
        return line + "; no sample could be timed for the payback"
    saved = (original - prepared) * epoch_samples
    timing = f"read+decode {1000 * original:.1f} ms an original, {1000 * prepared:.1f} ms prepared"
    if saved <= 0:
        return line + f"; {timing}: reading the copy saves no decode time, so it never pays back in time"
    epochs = seconds / saved
    shown = f"{epochs:.0f}" if epochs >= 10 else f"{max(epochs, 0.01):.2g}"
    return line + f"; {timing}: the time pays back after {shown} epochs"


def _mb(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"
