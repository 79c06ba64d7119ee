"""app/loader/prefetch.py: batches leave the ring as uint8 copies, one ahead, in order."""

import threading

import numpy as np
import pytest
from marked import IdentityAugmenter, MarkedSplit

from app.errors import WorkerError
from app.loader.enqueuer import Enqueuer
from app.loader.prefetch import batches, detach
from app.loader.settings import Queue, Settings


def test_detach_survives_the_slot_being_reused():
    slot = np.full((2, 4, 4, 3), 9, np.uint8)
    batch = detach(slot)
    slot[...] = 0  # the ring reuses the slot at once
    assert batch.dtype == np.uint8 and batch.min() == 9


def make(split):
    settings = Settings(batch_size=4, image_size=(8, 8), queue=Queue(workers=2, max_size=2))
    return Enqueuer({"train": split}, {"train": IdentityAugmenter()}, settings)


def test_batches_ahead_keep_order_and_stop_cleanly():
    order = np.arange(40)[::-1]
    with make(MarkedSplit(40)) as enq:
        got = [int(x[i, 0, 0, 0]) for x, _ in batches(enq, "train", order, 0) for i in range(len(x))]
        assert got == list(order)  # channel 0 holds the sample index (below 256 here)
        for k, (x, _) in enumerate(batches(enq, "train", order, 0)):  # stop early: the thread ends
            assert x.dtype == np.uint8 and x.base is None  # its own array, not a ring view
            if k == 1:
                break
        assert not [t for t in threading.enumerate() if t.name == "app-prefetch"]
        assert len(list(batches(enq, "train", order, 1))) == 10


def test_worker_errors_reach_the_consumer_thread():
    with pytest.raises(WorkerError, match="sample 13"), make(MarkedSplit(40, crash_at=13)) as enq:
        list(batches(enq, "train", np.arange(40), 0))
