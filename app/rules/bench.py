"""The bench group's rules (app/schema/__init__.py: BenchConfig, `python -m app bench` only)."""

from __future__ import annotations

from app.rules.common import require
from app.schema import BENCH_MODES


def check(bench) -> None:
    require(len(bench.modes) > 0 and all(m in BENCH_MODES for m in bench.modes), "bench.modes", list(bench.modes),
            f"a list of modes from {', '.join(BENCH_MODES)}")
    require(bench.batches >= 1, "bench.batches", bench.batches, "at least 1 timed batch")
    require(bench.warmup >= 0, "bench.warmup", bench.warmup, "0 or more batches")
