"""A thread's count of storage calls tried again after a transient error: storage.py counts, a loader worker's
telemetry reads its own thread's, without importing fsspec for it."""

from __future__ import annotations

import threading

_thread = threading.local()


def thread_retries() -> int:
    return getattr(_thread, "count", 0)


def count_retry() -> None:
    _thread.count = thread_retries() + 1
