"""The ring: shared memory that workers map by name, and that leaves nothing behind."""

import os

import numpy as np

from app.loader.ring import Ring, attach


def test_worker_view_shares_the_parent_memory():
    ring = Ring(2, 3, (4, 5), shared=True)
    try:
        assert ring.nbytes == 2 * 3 * 4 * 5 * 3 and ring.array.shape == (2, 3, 4, 5, 3)
        view, buffer = attach(ring.spec)
        view[1, 2] = 200
        assert ring.array[1, 2].min() == 200 and ring.array[0].max() == 0
        del view
        buffer.close()
        path = f"/dev/shm/{ring.spec.name}"
        assert os.path.exists(path)
    finally:
        ring.close()
    assert not os.path.exists(path)


def test_in_process_ring_has_no_segment():
    ring = Ring(1, 2, (4, 4), shared=False)
    assert ring.spec.name is None and isinstance(ring.array, np.ndarray)
    ring.close()
