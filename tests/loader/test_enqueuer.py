"""app/loader/enqueuer.py with real worker processes and threads, real shared memory, real faults:
scheduling, order, draining."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time

import numpy as np
import pytest
from loaders import assert_clean, make, my_segments, wait_until, workers_alive
from marked import MarkedSplit, index_of

from app.errors import WorkerError
from app.loader import messages
from app.loader import worker as worker_loop
from app.loader.enqueuer import Enqueuer
from app.loader.order import epoch_order
from app.loader.settings import Queue, Settings

MODES = [(0, True), (1, True), (2, True), (1, False), (2, False)]
IDS = ["in-process", "1-process", "2-processes", "1-thread", "2-threads"]


@pytest.mark.parametrize(("workers", "processes"), MODES, ids=IDS)
def test_every_batch_in_order(workers, processes, children):
    split = MarkedSplit(23)
    order = epoch_order(23, seed=3, epoch=1, shuffle=True)
    with make(split, workers=workers, processes=processes, max_size=2) as enq:
        got, labels = [], []
        for images, y in enq.batches("val", order, epoch=1):
            got.extend(index_of(image) for image in images)
            labels.extend(y)
        assert got == list(order)  # every sample exactly once, in order, last batch short
        assert labels == list(split.labels[order])
        # a second pass on the same workers
        again = [index_of(im) for images, _ in enq.batches("train", order[:8], epoch=2) for im in images]
        assert again == list(order[:8])
    assert_clean(children)


def test_forkserver_workers(children, tmp_path, monkeypatch):
    """Forked from a server started before, they read the environment as the parent has it at their start."""
    order = np.arange(12)[::-1]
    with make(MarkedSplit(12), workers=2, start_method="forkserver") as enq:
        assert [index_of(im) for b, _ in enq.batches("val", order, epoch=0) for im in b] == list(order)
        assert len(workers_alive() - children) == 2
    assert_clean(children)
    log = tmp_path / "reads.log"
    for seen in ("first", "second"):  # the fork server's own environment has neither
        monkeypatch.setenv("MARKED_SEEN", seen)
        with make(MarkedSplit(4, log_path=str(log)), workers=1, start_method="forkserver") as enq:
            list(enq.batches("val", np.arange(4), epoch=0))
        assert {line.split()[2] for line in log.read_text().splitlines()} == {seen}
        log.unlink()


def read_count(log) -> int:
    return len(log.read_text().splitlines())


@pytest.mark.parametrize("max_size", [1, 2, 3])
def test_never_builds_more_than_max_size_ahead(max_size, tmp_path, children):
    """Samples read at the source, counted in the workers, against batches consumed."""
    log = tmp_path / "reads.log"
    batch, n = 4, 40
    split = MarkedSplit(n, log_path=str(log))
    most_ahead = 0
    with make(split, workers=2, max_size=max_size, batch=batch) as enq:
        for consumed, _ in enumerate(enq.batches("train", np.arange(n), epoch=0), start=1):
            allowed = min((consumed - 1 + max_size) * batch, n)  # the batch being consumed and (max_size - 1) more
            # the workers fill every slot they may; more would show here, or a batch later
            assert wait_until(lambda allowed=allowed: read_count(log) >= allowed), (consumed, allowed)
            reads = read_count(log)
            assert reads <= allowed
            most_ahead = max(most_ahead, reads - consumed * batch)
    # Negative control: the count is real, the workers do fill every slot they may.
    assert most_ahead == (max_size - 1) * batch
    assert enq.queue_bytes == max_size * batch * 8 * 8 * 3
    assert_clean(children)


def test_queue_memory_is_max_size_slots(children):
    split = MarkedSplit(16, size=16)  # 4 batches a pass: room for the 3 slots
    with make(split, workers=2, max_size=3, batch=5) as enq:
        assert enq.ring.array.shape == (3, 5, 16, 16, 3) and enq.ring.array.dtype == np.uint8
        segment = my_segments()
        assert len(segment) == 1
        # the pixels of max_size batches, and a `done` byte a sample
        assert os.stat(f"/dev/shm/{segment[0]}").st_size == 3 * 5 * 16 * 16 * 3 + 3 * 5
    assert_clean(children)


def test_the_ring_holds_no_more_slots_than_a_pass_fills(caplog, children):
    """A pass over a split schedules nothing past its last batch: queue.max_size above the largest
    split's batches is capped there (the memory plan counts the same), with a line saying so."""
    split = MarkedSplit(10, size=8)  # 3 batches of 4 a pass, the last short
    with caplog.at_level(logging.INFO, logger="app.loader.enqueuer"):
        with make(split, workers=1, processes=False, max_size=100000, batch=4) as enq:
            assert enq.slot_count == 3 and enq.ring.array.shape[0] == 3 and enq.queue_bytes == 3 * 4 * 8 * 8 * 3
            got = [index_of(image) for images, _ in enq.batches("train", np.arange(10), 0) for image in images]
        assert got == list(range(10))
        assert "queue.max_size=100000 capped at 3 ring slot(s): a pass over the train split (10 samples" in caplog.text
        caplog.clear()
        # negative control: a value at or under the cap is left as it is, and nothing is said
        assert [make(split, max_size=m, batch=4).slot_count for m in (2, 3)] == [2, 3] and "capped" not in caplog.text
    assert make(MarkedSplit(0), max_size=4, batch=4).slot_count == 1  # an empty split: still one slot
    assert_clean(children)


@pytest.mark.slow
def test_hung_worker_times_out_naming_batch_and_sample(children):
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"batch 1 of the train split .* sample\(s\) 6") as caught, \
            make(MarkedSplit(16, hang_at=6), workers=2, timeout_s=1.5) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
    assert "/data/marked/00006.png" in str(caught.value)
    assert time.monotonic() - started < 15
    assert_clean(children)


def test_consumer_interrupt_stops_workers_and_frees_memory(children):
    with pytest.raises(KeyboardInterrupt), make(MarkedSplit(400), workers=2, max_size=3) as enq:
        for k, _ in enumerate(enq.batches("train", np.arange(400), epoch=0)):
            if k == 3:
                raise KeyboardInterrupt
    assert_clean(children)


def test_the_ring_is_freed_even_when_stopping_the_workers_fails(children, monkeypatch):
    from app.loader.pool import Pool

    stop_workers = Pool.close

    def stop_then_fail(pool):
        stop_workers(pool)
        raise RuntimeError("a worker would not stop")

    monkeypatch.setattr(Pool, "close", stop_then_fail)
    enq = make(MarkedSplit(16), workers=1).start()
    assert my_segments()  # negative control: the ring is there until close
    with pytest.raises(RuntimeError, match="would not stop"):
        enq.close()
    assert_clean(children)


def test_consumer_stopping_early_lets_the_next_pass_start_clean(children):
    split = MarkedSplit(64)
    with make(split, workers=2, max_size=3) as enq:
        for k, _ in enumerate(enq.batches("train", np.arange(64), epoch=0)):
            if k == 1:
                break
        got = [index_of(im) for b, _ in enq.batches("val", np.arange(64)[::-1], epoch=0) for im in b]
        assert got == list(range(63, -1, -1))
    assert_clean(children)


CROP_FLIP_JITTER = [
    {"_target_": "albumentations.RandomResizedCrop", "size": [24, 24], "scale": [0.3, 1.0]},
    {"_target_": "albumentations.HorizontalFlip", "p": 0.5},
    {"_target_": "albumentations.RandomBrightnessContrast", "p": 0.8},
]


@pytest.fixture(scope="module")
def jpeg_split(tmp_path_factory):
    from PIL import Image

    from app.data.source import FileSplit

    folder = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(18):
        path = folder / f"{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (96, 80, 3), dtype=np.uint8)).save(path, quality=90)
        paths.append(str(path))
    paths.append(paths[0])  # the same file twice: two samples, each its own randomness
    return FileSplit(paths, np.arange(len(paths)) % 3)


def epoch_bytes(split, *, workers, processes=True, start_method="spawn", seed=0, epoch=1) -> list[bytes]:
    from app.augment import Augmenter

    augmenter = Augmenter(CROP_FLIP_JITTER, [24, 24])
    order = epoch_order(len(split), seed=seed, epoch=epoch, shuffle=True)
    queue = Queue(workers=workers, use_multiprocessing=processes, max_size=2, start_method=start_method)
    settings = Settings(batch_size=4, image_size=(24, 24), queue=queue)
    with Enqueuer({"train": split}, {"train": augmenter}, settings, seed=seed) as enq:
        return [images.tobytes() for images, _ in enq.batches("train", order, epoch)]


@pytest.mark.slow
def test_batches_are_bit_identical_for_any_workers_and_mode(jpeg_split):
    reference = epoch_bytes(jpeg_split, workers=0)
    for workers, processes, method in [(1, True, "spawn"), (4, True, "spawn"), (4, True, "forkserver"),
                                       (2, True, "forkserver"), (1, False, "spawn"), (4, False, "spawn")]:
        assert epoch_bytes(jpeg_split, workers=workers, processes=processes, start_method=method) == reference, \
            (workers, processes, method)


@pytest.mark.slow
def test_negative_controls_epoch_seed_and_repeated_image_differ(jpeg_split):
    from app.augment import Augmenter

    reference = epoch_bytes(jpeg_split, workers=2)
    assert epoch_bytes(jpeg_split, workers=2, epoch=2) != reference
    assert epoch_bytes(jpeg_split, workers=2, seed=1) != reference
    augmenter = Augmenter(CROP_FLIP_JITTER, [24, 24])
    same_file = [augmenter(jpeg_split.read(i), 0, 1, i) for i in (0, len(jpeg_split) - 1)]
    assert not np.array_equal(*same_file)
    # and a pipeline with no randomness fails the "epochs differ" check
    none = Augmenter([], [24, 24])
    assert np.array_equal(none(jpeg_split.read(3), 0, 1, 3), none(jpeg_split.read(3), 0, 2, 3))


def test_draft_decode_follows_the_crop(tmp_path):
    """A 1024² JPEG, 64² input, crop scale from 0.25 and aspect 3/4..4/3: short side needed
    max(64·sqrt(4/3), 64/sqrt(3/4)) / sqrt(0.25) = 148, so a quarter-scale decode."""
    from PIL import Image

    from app.augment import Augmenter
    from app.data.source import FileSplit
    from app.loader.worker import make_sample

    path = tmp_path / "big.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (1024, 1024, 3), dtype=np.uint8)).save(path)
    split = FileSplit([str(path)], [0])
    crop = [{"_target_": "albumentations.RandomResizedCrop", "size": [64, 64], "scale": [0.25, 1.0]}]
    assert split.read(0, Augmenter(crop, [64, 64]).decode).shape == (256, 256, 3)
    narrow = [{**crop[0], "scale": [0.5, 1.0]}]  # 73.9 / sqrt(0.5) = 105: an eighth-scale decode
    assert split.read(0, Augmenter(narrow, [64, 64]).decode).shape == (128, 128, 3)
    widest = [{**crop[0], "scale": [0.05, 1.0]}]  # 331 > 256: half scale
    assert split.read(0, Augmenter(widest, [64, 64]).decode).shape == (512, 512, 3)
    assert split.read(0, Augmenter(crop, [64, 64], draft=False).decode).shape == (1024, 1024, 3)
    assert make_sample(split, Augmenter(crop, [64, 64]), 0, seed=0, epoch=0).shape == (64, 64, 3)


def test_a_second_draw_of_a_sample_gets_its_own_augmentation_with_any_workers(jpeg_split):
    """data.sampling draws with replacement: each draw of an index its own randomness, the same
    pixels whichever worker builds it; the first draw as with no sampling."""
    from app.augment import Augmenter

    order, draws = np.array([3, 3, 5, 3]), np.array([0, 1, 0, 2])
    settings = Settings(batch_size=4, image_size=(24, 24), queue=Queue(workers=2, max_size=2))
    built = {}
    for workers in (0, 2):
        with Enqueuer({"train": jpeg_split}, {"train": Augmenter(CROP_FLIP_JITTER, [24, 24])},
                      dataclasses.replace(settings, queue=Queue(workers=workers, max_size=2)), seed=0) as enq:
            built[workers] = [np.array(images) for images, _ in enq.batches("train", order, 1, draws)][0]
    assert np.array_equal(built[0], built[2])
    first, second, _, third = built[2]
    assert not np.array_equal(first, second) and not np.array_equal(second, third)
    with Enqueuer({"train": jpeg_split}, {"train": Augmenter(CROP_FLIP_JITTER, [24, 24])}, settings, seed=0) as enq:
        plain = [np.array(images) for images, _ in enq.batches("train", order, 1)][0]
    assert np.array_equal(plain[0], first) and np.array_equal(plain[1], first)  # negative control: no draws


def test_a_late_share_done_does_not_complete_the_batch_its_slot_holds_next(monkeypatch, children):
    """A worker share answered sample by sample (every sample marked) completes its batch before the worker's
    ShareDone comes; that ShareDone, arriving once the slot holds the next batch, must not complete that one."""
    handed_out, late_taken = threading.Event(), threading.Event()
    take, fill = worker_loop.take_stages, worker_loop.fill

    def take_stages_once_handed_out():  # the first share's ShareDone held until the slot's next batch is out
        assert handed_out.wait(10), "the next batch was never handed out"
        return take()

    def fill_once_late_taken(ring, task, work, item):  # the next batch built only once that ShareDone is taken
        assert late_taken.wait(10), "the first batch's ShareDone never came"
        return fill(ring, task, work, item)

    monkeypatch.setattr(worker_loop, "take_stages", take_stages_once_handed_out)
    with make(MarkedSplit(8, bad=(0, 1, 2, 3)), workers=1, processes=False, max_size=1, on_bad_sample="mark") as enq:
        send, handle, still_to_build = enq._send, enq._handle, []

        def send_counted(w, slot_index, positions):
            send(w, slot_index, positions)
            if enq._slots[slot_index].fill == 2:
                monkeypatch.setattr(worker_loop, "fill", fill_once_late_taken)
                handed_out.set()

        def handle_noted(reply, w, who):
            handle(reply, w, who)
            if isinstance(reply, messages.ShareDone) and reply.fill == 1:
                still_to_build.extend(enq._slots[0].todo)  # taken before any sample of the next batch is built
                late_taken.set()

        monkeypatch.setattr(enq, "_send", send_counted)
        monkeypatch.setattr(enq, "_handle", handle_noted)
        batches = enq.batches("train", np.arange(8), epoch=0)
        first = next(batches)[0].copy()
        second = next(batches)[0].copy()
        assert not first.any() and sorted(enq.bad.failed["train"]) == [0, 1, 2, 3]
        assert still_to_build == [0, 1, 2, 3]  # the late ShareDone left the next batch waiting
        assert [index_of(image) for image in second] == [4, 5, 6, 7]  # built, not the slot's old zeros
        batches.close()
    assert_clean(children)
