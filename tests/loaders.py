"""Shared by the loader's tests: an enqueuer over a marked source, and checks that nothing is
left behind (worker processes, shared memory)."""

from __future__ import annotations

import os
import time

import psutil
from marked import IdentityAugmenter

from app.capacity.memory import is_multiprocessing_helper
from app.loader.enqueuer import Enqueuer
from app.loader.settings import Queue, Settings


def make(split, *, workers=2, processes=True, max_size=2, batch=4, **kw) -> Enqueuer:
    """An enqueuer over `split` as both splits; `kw`: more Settings or Queue keys, and seed, on_bad_sample."""
    policy = {k: kw.pop(k) for k in ("seed", "on_bad_sample") if k in kw}
    queue = Queue(workers=workers, use_multiprocessing=processes, max_size=max_size, timeout_s=kw.pop("timeout_s", 30),
                  **{k: kw.pop(k) for k in ("start_method", "startup_timeout_s") if k in kw})
    settings = Settings(batch_size=batch, image_size=(split.size, split.size), queue=queue, **kw)
    return Enqueuer({"train": split, "val": split}, {"train": IdentityAugmenter(), "val": IdentityAugmenter()},
                    settings, **policy)


def wait_until(condition, timeout_s: float = 5.0) -> bool:
    """Polls `condition` until it holds or `timeout_s` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def my_segments() -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"app-ring-{os.getpid()}-")]


def workers_alive() -> set[int]:
    """Child processes but multiprocessing's own helpers (resource tracker, fork server),
    which live as long as the parent by design."""
    return {p.pid for p in psutil.Process().children(recursive=True) if not is_multiprocessing_helper(p)}


def assert_clean(children_before: set[int]) -> None:
    """No worker process left, no shared-memory segment of ours left."""
    wait_until(lambda: not workers_alive() - children_before)
    assert not workers_alive() - children_before, f"orphan worker processes: {workers_alive() - children_before}"
    assert my_segments() == []
