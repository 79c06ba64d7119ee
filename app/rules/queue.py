"""The queue group's rules (app/schema/data.py: QueueConfig): each value a number or `auto`, within the machine."""

from __future__ import annotations

from app.processes import worker_limit
from app.rules.common import AUTO, require


def check(queue) -> None:
    q = queue
    for key in ("workers", "max_size"):
        value = getattr(q, key)
        require(value is None or value == AUTO or (isinstance(value, int) and not isinstance(value, bool)),
                f"queue.{key}", value, "an integer, auto (chosen by a short probe of the data and the model when "
                "training starts), or null (auto where training sees a GPU or TPU, else 2)")
    if q.worker_limit is not None:
        require(q.worker_limit >= 1, "queue.worker_limit", q.worker_limit,
                "null (what the machine holds) or at least 1")
    if isinstance(q.workers, int):
        _check_workers(q)
    require(q.memory_budget_mb is None or q.memory_budget_mb >= 1, "queue.memory_budget_mb", q.memory_budget_mb,
            "null (what the machine has available) or a positive number of MiB")
    require(not isinstance(q.max_size, int) or q.max_size >= 1, "queue.max_size", q.max_size,
            "an integer of at least 1 (batches held ready), auto, or null")
    require(q.timeout_s > 0, "queue.timeout_s", q.timeout_s, "a positive number of seconds")
    require(q.startup_timeout_s > 0, "queue.startup_timeout_s", q.startup_timeout_s, "a positive number of seconds")


def _check_workers(q) -> None:
    require(q.workers >= 0, "queue.workers", q.workers, "0 (load in the training process), more workers, or auto")
    if q.worker_limit is not None:
        require(q.workers <= q.worker_limit, "queue.workers", q.workers,
                f"at most queue.worker_limit={q.worker_limit}")
    elif q.workers > 1:
        limit, why = worker_limit()
        require(q.workers <= limit, "queue.workers", q.workers,
                f"at most {limit} on this machine ({why}); more would compete for the cores and memory. Set "
                f"queue.worker_limit={q.workers} if you know better (workers that mostly wait on network storage)")
