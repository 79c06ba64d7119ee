"""app/loader/worker.py run in this process: what a worker does with each sample of a task (a
good one, a bad one under each policy, one that crashes) and how the augmenter's transform
reaches the ring. The same loop runs in the real worker processes of test_enqueuer.py and
test_bad_samples.py; here each answer is read directly, in milliseconds."""

from __future__ import annotations

from multiprocessing import Pipe

import numpy as np
import pytest
from marked import IdentityAugmenter, MarkedSplit, index_of, marked_image

from app.augment import Augmenter
from app.loader import messages
from app.loader.pool import Work
from app.loader.worker import fill, serve, take_stages

SIZE, SLOTS, BATCH = 8, 2, 4


class Stamped:
    """Writes the randomness a sample is given (seed, epoch, index) into channel 2."""

    decode = None

    def __call__(self, image, seed, epoch, index, draw=0):
        out = image.copy()
        out[..., 2] = (seed + 10 * epoch + index) % 256
        return out


def ring() -> np.ndarray:
    return np.full((SLOTS, BATCH, SIZE, SIZE, 3), 99, np.uint8)  # 99: nothing written there yet


def work(split, policy: str = "raise", augmenter=None, seed: int = 0) -> Work:
    return Work(splits={"train": split}, augmenters={"train": augmenter or IdentityAugmenter()}, seed=seed,
                on_bad_sample=policy)


def task(*items: tuple[int, int], slot: int = 1, epoch: int = 0) -> messages.Task:
    return messages.Task(split="train", epoch=epoch, slot=slot, items=[messages.Item(*item) for item in items])


def test_a_good_sample_is_written_into_its_place_and_timed():
    pixels, job = ring(), work(MarkedSplit(10))
    take_stages()  # what earlier tests on this thread left
    assert fill(pixels, task((2, 7)), job, messages.Item(2, 7)) == messages.Written(slot=1, position=2)
    assert index_of(pixels[1, 2]) == 7 and np.array_equal(pixels[1, 2], marked_image(7, SIZE))
    assert (pixels[0] == 99).all() and (pixels[1, [0, 1, 3]] == 99).all()  # nowhere else
    *seconds, built, retried = take_stages()
    assert built == 1 and retried == 0 and all(s >= 0 for s in seconds)
    assert take_stages() == (0.0, 0.0, 0.0, 0.0, 0, 0)  # taken: the next share starts from nothing


def test_a_bad_sample_under_raise_is_a_bad_note_naming_the_file_and_nothing_is_written():
    pixels = ring()
    reply = fill(pixels, task((0, 5)), work(MarkedSplit(10, bad=(5,)), "raise"), messages.Item(0, 5))
    assert reply == messages.Bad(slot=1, position=0, index=5, where="/data/marked/00005.png", detail="truncated file")
    assert (pixels == 99).all()


def test_a_bad_sample_under_mark_is_zeros_and_a_marked_note():
    pixels = ring()
    reply = fill(pixels, task((3, 5)), work(MarkedSplit(10, bad=(5,)), "mark"), messages.Item(3, 5))
    assert reply == messages.Marked(slot=1, position=3, index=5, where="/data/marked/00005.png",
                                    detail="truncated file")
    assert (pixels[1, 3] == 0).all() and (pixels[1, :3] == 99).all()


def test_a_bad_sample_under_skip_stands_in_the_next_readable_one_with_its_own_randomness():
    """Samples 5 and 6 are bad: 7 stands in for 5, augmented as 5 would have been (its seed,
    epoch and index), so the batch is the same for any worker count."""
    pixels, split = ring(), MarkedSplit(10, bad=(5, 6))
    reply = fill(pixels, task((1, 5), epoch=2), work(split, "skip", Stamped(), seed=3), messages.Item(1, 5))
    assert reply == messages.Skipped(slot=1, position=1, index=5, where="/data/marked/00005.png",
                                     detail="truncated file", stand_in=7)
    assert index_of(pixels[1, 1]) == 7
    assert (pixels[1, 1, ..., 2] == 3 + 20 + 5).all()  # the bad sample's randomness, not the stand-in's (30)
    last = fill(ring(), task((0, 9)), work(MarkedSplit(10, bad=(9,)), "skip"), messages.Item(0, 9))
    assert last.stand_in == 0  # past the end: from the start


def test_a_skip_with_nothing_readable_to_stand_in_is_stranded():
    reply = fill(ring(), task((0, 1)), work(MarkedSplit(3, bad=(0, 1, 2)), "skip"), messages.Item(0, 1))
    assert isinstance(reply, messages.Stranded) and (reply.index, reply.detail) == (1, "truncated file")


@pytest.mark.parametrize("policy", ["raise", "skip", "mark"])
def test_a_crash_is_failed_under_every_policy_with_its_traceback(policy):
    reply = fill(ring(), task((0, 4)), work(MarkedSplit(10, crash_at=4), policy), messages.Item(0, 4))
    assert isinstance(reply, messages.Failed) and reply.where == "/data/marked/00004.png"
    assert "RuntimeError: decoder exploded on purpose at 4" in reply.detail and "Traceback" in reply.detail


def test_the_augmenters_transform_is_what_reaches_the_ring():
    """A real Augmenter: its configured flip and resize (16² → 8²) applied to the sample read."""
    class Gradient(MarkedSplit):
        def read(self, i, decode=None, drawn=None):
            return np.broadcast_to(np.arange(16, dtype=np.uint8)[None, :, None] * 16, (16, 16, 3)).copy()

    augmenter = Augmenter([{"_target_": "albumentations.HorizontalFlip", "p": 1.0}], [SIZE, SIZE])
    pixels = ring()
    reply = fill(pixels, task((0, 0)), work(Gradient(4), augmenter=augmenter), messages.Item(0, 0))
    assert isinstance(reply, messages.Written)
    row = pixels[1, 0, 0, :, 0].astype(int)
    assert pixels[1, 0].shape == (SIZE, SIZE, 3) and (np.diff(row) < 0).all()  # flipped: bright on the left
    plain = ring()
    fill(plain, task((0, 0)), work(Gradient(4), augmenter=Augmenter([], [SIZE, SIZE])), messages.Item(0, 0))
    assert (np.diff(plain[1, 0, 0, :, 0].astype(int)) > 0).all()  # negative control: unflipped


def test_serve_sets_done_bytes_answers_notes_and_ends_a_share_with_its_stages():
    """One share of four samples (one bad, skipped) in slot 1; STOP ends the loop."""
    pixels, done = ring(), np.zeros((SLOTS, BATCH), np.uint8)
    parent, child = Pipe()
    parent.send(task((0, 3), (1, 5), (2, 6), (3, 8)))
    parent.send(messages.STOP)
    take_stages()
    serve(child, pixels, done, work(MarkedSplit(10, bad=(5,)), "skip"))
    replies = []
    while parent.poll(0):  # serve has returned: whatever it sent is in the pipe already
        replies.append(parent.recv())
    assert len(replies) == 2, replies  # one note, one ShareDone
    assert replies[0] == messages.Skipped(slot=1, position=1, index=5, where="/data/marked/00005.png",
                                         detail="truncated file", stand_in=6)
    assert isinstance(replies[1], messages.ShareDone) and replies[1].slot == 1 and replies[1].stages[4] == 3
    assert done.tolist() == [[0, 0, 0, 0], [1, 0, 1, 1]]  # the stand-in is told, not flagged done
    assert [index_of(image) for image in pixels[1]] == [3, 6, 6, 8]


def test_serve_returns_when_the_parents_end_closes():
    parent, child = Pipe()
    parent.close()
    pixels, done = ring(), np.zeros((SLOTS, BATCH), np.uint8)
    # returns (a hang would fail under the suite's timeout), having written nothing: no task came
    assert serve(child, pixels, done, work(MarkedSplit(4))) is None
    assert not done.any() and (pixels == 99).all()
