"""The pipeline builder and the Loader a command holds: built from a loaded config, started and
stopped with `with`, every sample once in order, the bad samples counted, the queue's figures."""

from __future__ import annotations

import os
import secrets

import numpy as np
from hydra import compose, initialize_config_dir
from loaders import assert_clean, make
from marked import MarkedSplit, index_of

from app.capacity.auto import loading_only
from app.config import conf_dir, load
from app.loader import ring
from app.loader.pipeline import Loader, Queue, build_loader
from app.schema import register


def config(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=["data.image_size=[8,8]", "data.batch_size=4", "queue.workers=1",
                                                 "queue.use_multiprocessing=false", "queue.max_size=2",
                                                 *overrides]))


def test_the_loader_gives_every_sample_and_names_the_unreadable(children):
    split = MarkedSplit(10, bad=(3,))
    loaded = config()
    with build_loader(loaded, {"val": (split, [])}, queue=loading_only(loaded.queue), on_bad_sample="mark") as loader:
        assert loader.queue == Queue(workers=1, use_multiprocessing=False, max_size=2)
        assert loader.queue_bytes == 2 * 4 * 8 * 8 * 3
        batches = list(loader.every_sample("val"))
        failed = loader.failed("val")
        live = loader.telemetry("live")
    assert [len(y) for _, y in batches] == [4, 4, 2]  # in order, the last batch short
    images = np.concatenate([x for x, _ in batches])
    assert [index_of(image) for i, image in enumerate(images) if i != 3] == [i for i in range(10) if i != 3]
    assert not images[3].any()  # `mark`: zeros in its place ...
    assert list(failed) == [3] and "truncated file" in failed[3]  # ... and named
    assert live["read_ms"] is not None and loader.skipped == 0 and loader.restarts == 0
    assert_clean(children)


def test_skip_counts_what_it_replaced(children):
    split = MarkedSplit(8, bad=(1, 5))
    cfg = config("data.max_bad_fraction=0.5")
    with build_loader(cfg, {"train": (split, [])}, queue=loading_only(cfg.queue), on_bad_sample="skip") as loader:
        assert loader.skipped == 0  # negative control: nothing read yet
        got = [index_of(x) for batch, _ in loader.batches("train", np.arange(8), 0) for x in batch]
        assert loader.skipped == 2 and loader.failed("train") == {}
    assert 1 not in got and 5 not in got and len(got) == 8
    assert_clean(children)


def test_the_loaders_with_deletes_a_dead_processs_ring_and_the_enqueuers_start_does_not(children, caplog, monkeypatch):
    """Deleting other processes' segments is the Loader's own call, made as a command enters it, not a side effect of
    starting an enqueuer. PID 1 always runs, so no other test's loader deletes the planted ring; this one is told
    it does not run."""
    monkeypatch.setattr(ring, "_alive", lambda pid: pid != 1)
    path = f"{ring.SHM_DIR}/{ring.PREFIX}1-{secrets.token_hex(4)}"
    with open(path, "wb") as planted:
        planted.write(bytes(64))
    try:
        with caplog.at_level("WARNING"), make(MarkedSplit(4), workers=1):
            pass
        assert os.path.exists(path) and path not in caplog.text  # the enqueuer makes its own ring, nothing more
        with caplog.at_level("WARNING"), Loader(make(MarkedSplit(4), workers=1)):
            assert not os.path.exists(path)
        assert f"removed {path}" in caplog.text
    finally:
        if os.path.exists(path):
            os.unlink(path)
    assert_clean(children)
