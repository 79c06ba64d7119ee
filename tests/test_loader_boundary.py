"""The queue boundary: the one uint8 → float32 conversion."""

import numpy as np

from app.loader.boundary import SCALE, to_float32


def test_converts_a_copy_normalised():
    batch = np.array([[[[0, 128, 255]]]], np.uint8)
    out = to_float32(batch)
    assert out.dtype == np.float32 and out.shape == batch.shape
    assert np.allclose(out, batch.astype(np.float64) * SCALE)
    assert out.max() == np.float32(1.0)
    batch[...] = 0  # the slot is reused at once: the float32 batch must not change
    assert out.max() == np.float32(1.0)


def test_converting_ahead_keeps_order_and_carries_errors():
    import threading

    import pytest
    from marked import IdentityAugmenter, MarkedSplit

    from app.errors import WorkerError
    from app.loader.boundary import float_batches
    from app.loader.enqueuer import Enqueuer

    def make(split):
        return Enqueuer({"train": split}, {"train": IdentityAugmenter()}, batch_size=4, image_size=(8, 8),
                        workers=2, max_size=2)

    order = np.arange(40)[::-1]
    with make(MarkedSplit(40)) as enq:
        got = [round(float(x[i, 0, 0, 0]) / SCALE) for x, _ in float_batches(enq, "train", order, 0)
               for i in range(len(x))]
        assert got == list(order)  # channel 0 holds the sample index (below 256 here)
        for k, _ in enumerate(float_batches(enq, "train", order, 0)):  # stop early: the converter ends
            if k == 1:
                break
        assert not [t for t in threading.enumerate() if t.name == "app-boundary"]
        assert len(list(float_batches(enq, "train", order, 1))) == 10
    with pytest.raises(WorkerError, match="sample 13"), make(MarkedSplit(40, crash_at=13)) as enq:
        list(float_batches(enq, "train", np.arange(40), 0))
