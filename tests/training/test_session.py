"""app/training/session.py's queue as a run asks for it: a null queue.workers and max_size `auto` where the backend
sees an accelerator (a faked device list here), 2 where it sees none, a user's value first, a resume its start's."""

from __future__ import annotations

import json
from types import SimpleNamespace

from app.runs.rundir import Summary
from app.training.devices import Placement
from app.training.session import asked_queue

GPU = Placement(strategy_name="default", devices=["/device:GPU:0"], gpus=["/device:GPU:0"])
CPU = Placement(strategy_name="default", devices=["/device:CPU:0"])


def queue(workers=None, max_size=None):
    return SimpleNamespace(workers=workers, max_size=max_size)


def test_a_runs_defaults_follow_the_devices_it_sees_and_a_resume_keeps_its_starts(tmp_path):
    summary = Summary(tmp_path, [])
    on_gpu = asked_queue(SimpleNamespace(queue=queue(), resume=None), GPU, summary)
    assert (on_gpu.workers, on_gpu.max_size) == ("auto", "auto")
    recorded = json.loads((tmp_path / "summary.json").read_text())["queue_default"]
    assert recorded["workers"] == "auto" and "/device:GPU:0" in recorded["reason"]
    # resumed on a machine with no GPU: what its start made of the defaults, not this machine's
    resumed = Summary(tmp_path, [], resumed_from="checkpoints/ckpt-00000004")
    kept = asked_queue(SimpleNamespace(queue=queue(), resume=str(tmp_path)), CPU, resumed)
    assert (kept.workers, kept.max_size) == ("auto", "auto")
    # negative controls: a new run on that machine takes 2, and a user's value wins beside the GPU
    (tmp_path / "new").mkdir()
    (tmp_path / "mine").mkdir()
    fresh = asked_queue(SimpleNamespace(queue=queue(), resume=None), CPU, Summary(tmp_path / "new", []))
    assert (fresh.workers, fresh.max_size) == (2, 2)
    mine = asked_queue(SimpleNamespace(queue=queue(workers=3, max_size=4), resume=None), GPU,
                       Summary(tmp_path / "mine", []))
    assert (mine.workers, mine.max_size, mine.reason) == (3, 4, None)
