# What every group's rules share: the one refusal, the seed's range, and the word `auto`.

from __future__ import annotations

from typing import Any

from app.errors import config_error

AUTO = "auto"  # queue.workers, queue.max_size: chosen when training starts (app/capacity/auto.py); trainer.top_k's 5

SEEDS = 2**32  # Keras's and NumPy's seeding take 0 to 2**32 - 1


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise config_error(key, value, allowed)


def check_seed(key: str, value: int) -> None:
    require(0 <= value < SEEDS, key, value, f"an integer from 0 to {SEEDS - 1} (2**32 − 1), e.g. {key}=0")
