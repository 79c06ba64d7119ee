"""Starting child processes from wherever the app runs, a launcher's worker included."""

from __future__ import annotations

import multiprocessing as mp
from contextlib import contextmanager


@contextmanager
def startable(start_method: str):
    """Inside a launcher's own worker (joblib's loky) the process-wide start method is one a
    spawned child cannot set up, and it travels in the child's start-up data: `start_method`
    stands in for it while a child starts."""
    method = mp.get_start_method(allow_none=True)
    foreign = method not in (None, *mp.get_all_start_methods())
    if foreign:
        mp.set_start_method(start_method, force=True)
    try:
        yield
    finally:
        if foreign:
            mp.set_start_method(method, force=True)
