"""The loader's telemetry: real workers' stage times a sample, the ring's fill, each reader's
window of its own."""

from types import SimpleNamespace

import numpy as np
import pytest
from loaders import make
from marked import MarkedSplit

from app.loader.telemetry import Telemetry


@pytest.mark.parametrize("workers", [2, 0], ids=["processes", "in-process"])
def test_stage_times_come_from_whoever_builds_the_samples(workers, children):
    with make(MarkedSplit(24), workers=workers) as enq:
        list(enq.batches("train", np.arange(24), epoch=0))
        figures = enq.telemetry.take("epoch")
        again = enq.telemetry.take("epoch")
        live = enq.telemetry.take("live")
    assert all(figures[f"{s}_ms"] > 0 for s in ("read", "decode", "augment", "copy"))
    assert again == {"read_ms": None, "decode_ms": None, "augment_ms": None, "copy_ms": None, "ring_fill": None,
                     "storage_retries": 0}
    assert live == {**figures, "ring_fill": live["ring_fill"]}  # the other window still has them
    if workers:
        assert 0 <= figures["ring_fill"] <= 1
    else:
        assert figures["ring_fill"] is None  # negative control: no ring to fill, built on demand


def test_ring_fill_is_the_share_of_whole_batches_waiting():
    telemetry = Telemetry()
    slots = [SimpleNamespace(batch_no=3, todo={}), SimpleNamespace(batch_no=4, todo={0: 17}),
             SimpleNamespace(batch_no=-1, todo={}), SimpleNamespace(batch_no=5, todo={})]
    telemetry.observe_fill(slots, 4)  # two whole: 3 and 5; 4 is being built; one slot free
    telemetry.observe_fill(slots[:1], 4)
    assert telemetry.take("epoch")["ring_fill"] == pytest.approx((2 / 4 + 1 / 4) / 2)
