"""The bench group's rules (app/schema/__init__.py: BenchConfig, `python -m app bench` only)."""

from __future__ import annotations

from app.rules.common import require
from app.schema import BENCH_MODES, SLIDE_BENCH_MODES


def check(bench) -> None:
    known = BENCH_MODES + SLIDE_BENCH_MODES
    require(len(bench.modes) > 0 and all(m in known for m in bench.modes), "bench.modes", list(bench.modes),
            f"a list of modes from {', '.join(known)}")
    require(bench.batches >= 1, "bench.batches", bench.batches, "at least 1 timed batch")
    require(bench.warmup >= 0, "bench.warmup", bench.warmup, "0 or more batches")
