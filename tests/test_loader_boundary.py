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
