"""One module a command of `python -m app`, each its own @hydra.main entry point, and how a failure leaves Hydra."""

from __future__ import annotations

import functools
from collections.abc import Callable

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

_carried: list[Exception] = []


def failure_carried(task: Callable) -> Callable:
    """Wraps a command's task so that a single run's failure is carried out of Hydra and raised by `raise_carried`, one
    paragraph instead of under Hydra's "Error executing job" line; a sweep's job fails as Hydra's launchers expect."""
    @functools.wraps(task)
    def carrying(cfg):
        try:
            return task(cfg)
        except Exception as error:
            if HydraConfig.get().mode == RunMode.MULTIRUN:
                raise
            _carried.append(error)
            return None
    return carrying


def raise_carried() -> None:
    """Raise the failure `failure_carried` took out of Hydra, if there is one."""
    if _carried:
        error = _carried.pop()
        _carried.clear()
        raise error
