"""The epoch's one-line diagnosis: each bound named when its figures say so, and not otherwise."""

from types import SimpleNamespace

import pytest

from app.capacity.diagnosis import diagnose

QUEUE = SimpleNamespace(workers=2, max_size=4)
ROW = {"data_wait_fraction": 0.02, "ring_fill": 0.5, "peak_memory_mb": 1000.0, "read_ms": 0.1, "decode_ms": 4.0,
       "augment_ms": 2.0, "copy_ms": 0.1}


@pytest.fixture(autouse=True)
def sixteen_cores(monkeypatch):
    """The advice counts the cores: these figures are a 16-core machine's whatever this one has."""
    monkeypatch.setattr("app.capacity.diagnosis.usable_cores", lambda: 16)


def test_input_bound_names_the_stage_times_and_the_fixes():
    line = diagnose({**ROW, "data_wait_fraction": 0.35, "ring_fill": 0.0}, QUEUE, 8000)
    assert line.startswith("input-bound: the step waited on the loader 35 %") and "decode 4.0" in line
    assert "queue.workers=3" in line and "data.decode.draft=true" in line
    assert not diagnose({**ROW, "data_wait_fraction": 0.19}, QUEUE, 8000).startswith("input")  # negative control
    drafted = diagnose({**ROW, "data_wait_fraction": 0.35, "ring_fill": 0.0}, QUEUE, 8000, drafted=True)  # on already
    assert "data.decode.draft" not in drafted and drafted.endswith("(queue.workers=3), smaller data.image_size")


def test_model_bound_when_the_ring_stays_full_and_the_step_never_waits():
    line = diagnose({**ROW, "ring_fill": 0.95, "data_wait_fraction": 0.01}, QUEUE, 8000)
    assert line.startswith("model-bound") and "queue.workers=1 or queue.max_size=1" in line
    assert diagnose({**ROW, "ring_fill": 0.95, "data_wait_fraction": 0.08}, QUEUE, 8000).startswith("balanced")
    assert diagnose({**ROW, "ring_fill": None}, QUEUE, 8000).startswith("balanced")  # no ring (workers=0)
    one = SimpleNamespace(workers=1, max_size=1)  # nothing left to take away
    assert diagnose({**ROW, "ring_fill": 1.0, "data_wait_fraction": 0.0}, one, 8000).startswith("balanced")


def test_memory_bound_near_the_budget_beside_another_bound():
    line = diagnose({**ROW, "data_wait_fraction": 0.5, "peak_memory_mb": 950.0}, QUEUE, 1000)
    assert line.startswith("input-bound") and "; memory-bound: peak 950 MiB of 1000 MiB" in line
    assert "memory-bound" not in diagnose({**ROW, "peak_memory_mb": 850.0}, QUEUE, 1000)


def test_input_bound_never_advises_a_worker_the_budget_has_no_room_for():
    """One more worker, at what each took this epoch (peak_workers_mb / workers), must fit the budget."""
    starved = {**ROW, "data_wait_fraction": 0.35, "peak_memory_mb": 887.0, "peak_workers_mb": 140.0}
    line = diagnose(starved, SimpleNamespace(workers=1, max_size=2), 900)
    assert "queue.workers=2" not in line and "not more workers (one more, ~140 MiB" in line
    assert "data.decode.draft=true" in line
    roomy = diagnose(starved, SimpleNamespace(workers=1, max_size=2), 2000)  # negative control
    assert "more workers (queue.workers=2)" in roomy


def test_input_bound_never_advises_more_workers_than_cores():
    """A GPU machine's 16 workers on 16 cores still wait: a prepared copy is the way on, not a 17th worker."""
    starved = {**ROW, "data_wait_fraction": 0.8, "peak_workers_mb": 5481.0}
    line = diagnose(starved, SimpleNamespace(workers=16, max_size=2), 100_000,
                    cure=lambda row, workers: f"a prepared copy: `python -m app prepare ...` ({workers} workers)")
    assert "queue.workers=17" not in line and "not more workers (16 already on 16 cores)" in line
    assert "but a prepared copy: `python -m app prepare ...` (16 workers); or data.decode.draft=true" in line
    on_a_copy = diagnose(starved, SimpleNamespace(workers=16, max_size=2), 100_000)  # no copy to advise
    assert "python -m app prepare" not in on_a_copy and "but data.decode.draft=true" in on_a_copy
    assert "queue.workers=16" in diagnose(starved, SimpleNamespace(workers=15, max_size=2), 100_000)  # negative control


def test_copy_bound_when_the_copies_to_the_device_take_more_than_the_loader_made_it_wait():
    row = {**ROW, "data_wait_fraction": 0.4, "ring_wait_fraction": 0.05, "device_copy_fraction": 0.3,
           "device_copy_ms": 12.5}
    line = diagnose(row, QUEUE, 8000)
    assert line.startswith("copy-bound: the step waited 40 %") and "(12.5 ms)" in line
    # negative controls: the loader's wait the larger, or the copies a small part of the wait, the loader binds
    assert diagnose({**row, "ring_wait_fraction": 0.5}, QUEUE, 8000).startswith("input-bound")
    assert diagnose({**row, "device_copy_fraction": 0.1}, QUEUE, 8000).startswith("input-bound")
