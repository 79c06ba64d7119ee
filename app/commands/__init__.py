"""One module a command word of `python -m app`, each with its own @hydra.main entry point, and
how a command's failure leaves Hydra (`failure_carried`). Nothing here is imported by the loader,
the model or training."""

from __future__ import annotations

import functools
from collections.abc import Callable

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

_carried: list[Exception] = []


def failure_carried(task: Callable) -> Callable:
    """A command's task function, under @hydra.main, whose failure in a single run is carried out
    of Hydra and raised again by `raise_carried` (app/__main__.py prints it as one paragraph):
    raised inside, Hydra would print "Error executing job with overrides: […]" above it. A sweep's
    job fails as Hydra's launchers expect."""
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
