"""`queue.workers=auto`, `queue.max_size=auto`. The choice from the probe's timings
(arithmetic, with made-up timings) and the probe's sample timing on real JPEG files (its step
timing: tests/training/test_calibration.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image
from slides import slide_pixels, write_slide

from app.augment import Augmenter
from app.capacity import auto as auto_module
from app.capacity.auto import Timings, choose, time_samples
from app.data.slides import regions
from app.data.slides.patches import grid_split
from app.data.source import FileSplit
from app.loader import settings
from app.loader.worker import make_sample
from app.schema.data import PatchesConfig


def use_cores(monkeypatch, n: int) -> None:
    monkeypatch.setattr(settings, "usable_cores", lambda: n)
    monkeypatch.setattr(auto_module, "usable_cores", lambda: n)


@pytest.fixture(autouse=True)
def eight_cores(monkeypatch):
    use_cores(monkeypatch, 8)


def auto(**kw):
    return SimpleNamespace(**{"workers": "auto", "max_size": "auto", "worker_limit": 16, **kw})


def always(workers, max_size):
    return True


def steady(sample_ms: float, step_ms: float, cpu_ms: float = 0.0, n: int = 32) -> Timings:
    return Timings([sample_ms / 1e3] * n, [step_ms / 1e3] * 3, [cpu_ms / 1e3] * 3)


def test_the_fewest_workers_that_keep_the_step_fed():
    # a batch of 32 at 10 ms a sample is 320 ms of work; a step is 100 ms: 4 workers build it in 80
    choice = choose(steady(10, 100), 32, auto(), always)
    assert (choice.workers, choice.max_size) == (4, 2)  # two: the workers' shares of a batch end apart
    assert choice.figures["predicted_data_wait"] == 0.0 and "the fewest" in choice.reason
    # negative control: a slower step needs fewer, a faster one more
    assert choose(steady(10, 400), 32, auto(), always).workers == 1
    assert choose(steady(10, 50), 32, auto(), always).workers == 7


def test_capped_by_the_cores_and_worker_limit_when_the_loader_bounds_training():
    choice = choose(steady(10, 10), 32, auto(), always)
    assert choice.workers == 8 and "the most allowed (8 usable cores)" in choice.reason
    # a worker done with its share starts on the next batch rather than idle (the benchmark in benchmarks/auto_queue.py)
    assert choice.max_size == 2 and "the ring never fills, and a worker done with its share" in choice.reason
    assert choose(steady(10, 10), 32, auto(worker_limit=3), always).workers == 3
    alone = choose(steady(10, 10), 32, auto(worker_limit=1), always)  # negative control: no others to wait for
    assert (alone.workers, alone.max_size) == (1, 1) and "never fills" in alone.reason
    assert "share" not in alone.reason


def test_workers_and_the_step_share_the_cores(monkeypatch):
    """Without a GPU the step's own CPU time takes the cores the workers need: a second worker
    that would build batches faster than the step alone takes them gains nothing when every
    core is already busy."""
    use_cores(monkeypatch, 2)
    # 160 ms of samples a batch, a 100 ms step that keeps 2 cores busy: 180 ms a batch either way
    shared = choose(steady(5, 100, cpu_ms=200), 32, auto(), always)
    assert shared.workers == 1 and shared.figures["cycle_ms"] == 180.0 and "on 2 core(s) 180" in shared.reason
    assert choose(steady(5, 100, cpu_ms=0), 32, auto(), always).workers == 2  # negative control: a step on a GPU
    # 320 ms of samples: a second worker does help, down to the cores' 235 ms
    assert choose(steady(10, 100, cpu_ms=150), 32, auto(), always).workers == 2


def test_a_gpu_step_waits_on_saturated_cores(monkeypatch):
    """16 workers on 16 cores, each sample 14 ms, batch 64: the cores set the pace (57 ms a batch). A step the GPU
    computes in 9 ms waits the rest (measured on an H100: 80 %); a step that keeps every core busy stretches
    with them and waits about nothing."""
    use_cores(monkeypatch, 16)
    gpu = choose(steady(14.1, 8.6, cpu_ms=8), 64, auto(), always)
    assert gpu.workers == 16 and 0.75 < gpu.figures["predicted_data_wait"] < 0.85
    cpu = choose(steady(14.1, 8.6, cpu_ms=8.6 * 16), 64, auto(), always)  # negative control: the step on the cores
    assert cpu.figures["predicted_data_wait"] == 0.0


def test_max_size_absorbs_the_jitter_of_a_batch():
    # one worker builds a batch in 160 ms, within a 200 ms step: one slot when samples are steady
    assert choose(steady(5, 200), 32, auto(workers=1), always).max_size == 1
    two = choose(steady(5, 100), 32, auto(), always)  # 2 workers: 80 ms, and at least two slots
    assert (two.workers, two.max_size) == (2, 2) and "at least 2, so a worker done with its share" in two.reason
    jittery = Timings(list(np.random.default_rng(0).choice([0.001, 0.3], 64, p=[0.97, 0.03])), [0.1] * 3, [0.0] * 3)
    choice = choose(jittery, 32, auto(), always)
    assert choice.max_size > 1 and "95th percentile" in choice.reason
    assert choice.max_size <= 5  # a 95th-percentile batch (~320 ms) within that many 100 ms steps


def test_the_memory_limit_comes_first():
    jittery = Timings(list(np.random.default_rng(0).choice([0.001, 0.3], 64, p=[0.97, 0.03])), [0.1] * 3, [0.0] * 3)
    roomy = choose(jittery, 32, auto(), always)
    tight = choose(jittery, 32, auto(), lambda workers, max_size: max_size == 1 and workers <= 1)
    assert roomy.max_size > 1 and (tight.workers, tight.max_size) == (1, 1)
    assert "by the memory limit" in tight.reason


def test_a_value_the_user_gave_is_kept():
    assert choose(steady(10, 100), 32, auto(workers=2), always).workers == 2
    assert choose(steady(10, 100), 32, auto(max_size=5), always).max_size == 5


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(6):
        path = folder / f"{i}.jpg"
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), np.uint8)).save(path, quality=90)
        paths.append(str(path))
    (folder / "bad.jpg").write_bytes(b"not a jpeg")
    return FileSplit(paths[:2] + [str(folder / "bad.jpg")] + paths[2:], [0, 1, 2, 0, 1, 2, 0])


def test_samples_are_timed_as_a_worker_builds_them(jpegs):
    augmenter = Augmenter([{"_target_": "albumentations.HorizontalFlip", "p": 0.5}], (16, 16))
    times, images, built = time_samples(jpegs, augmenter, range(len(jpegs)), seed=3)
    assert built == [0, 1, 3, 4, 5, 6]  # the unreadable file passed over
    assert len(times) == len(built) - 1 and all(t > 0 for t in times)  # the first builds the augmentation
    for index, image in zip(built, images, strict=True):  # the samples epoch 0 gives, bit for bit
        assert np.array_equal(image, make_sample(jpegs, augmenter, index, seed=3, epoch=0))
    other_seed = [make_sample(jpegs, augmenter, index, seed=4, epoch=0) for index in built]  # negative control
    assert any(not np.array_equal(a, b) for a, b in zip(images, other_seed, strict=True))


def test_the_probes_patch_reads_leave_no_chunk_kept_in_the_training_process(tmp_path):
    write_slide(tmp_path / "slide.tif", slide_pixels(256, 0, np.random.default_rng(0))[0], levels=1, tile=64)
    split = grid_split([str(tmp_path / "slide.tif")], PatchesConfig(size=[32, 32], min_foreground=0.0))[0]
    augmenter = Augmenter([], (32, 32))
    make_sample(split, augmenter, 0, seed=0, epoch=0)
    assert regions._chunks.held > 0  # negative control: a patch read keeps its chunks
    time_samples(split, augmenter, range(4), seed=0)
    assert regions._chunks.held == 0  # what the workers will hold, and the plan counts there


def test_in_process_loading_gets_one_slot_and_a_given_max_size_counts_in_the_memory_limit():
    assert choose(steady(10, 10), 32, auto(workers=0), always).max_size == 1
    fits = []
    choose(steady(10, 10), 32, auto(max_size=6), lambda w, m: fits.append((w, m)) or w <= 2)
    assert fits and all(m == 6 for _, m in fits)


def test_the_probe_times_the_step_on_masks_where_the_samples_are_pairs(tmp_path):
    """A split of (image, mask) pairs: the probe's batch is the images and their masks, built as a worker builds
    them; a split of images hands the labels (the negative control)."""
    from segmentation_data import write_texture_folder

    from app.data.masked import MaskedFileSplit, MaskRule
    from app.schema.data import FolderDataConfig

    made = write_texture_folder(tmp_path, train=3, val=1, size=16)
    images, masks = zip(*made.of("train"), strict=True)
    pairs = MaskedFileSplit([str(p) for p in images], [str(m) for m in masks], MaskRule(3, 255))
    plain = FileSplit([str(p) for p in images], [0, 1, 2])
    config = SimpleNamespace(data=FolderDataConfig(image_size=[16, 16], ignore_index=255), seed=0,
                             queue=auto(shuffle=False, use_multiprocessing=True),
                             augment=SimpleNamespace(transforms=[]))
    run = SimpleNamespace(batch_size=4, pixels=Augmenter([], (16, 16)).decode.pixels, asked=None)
    seen = {}

    def time_step(batch):
        seen["batch"] = batch
        return [0.01] * 3, [0.0] * 3

    for split in (pairs, plain):
        auto_module.probe_and_choose(config, run, split, time_step=time_step, fits=always)
        x, y = seen["batch"]
        assert x.shape == (4, 16, 16, 3)
        if split is pairs:
            assert y.shape == (4, 16, 16) and set(np.unique(y)) <= {0, 1, 2, 255}
        else:
            assert y.shape == (4,) and y.dtype == np.int64


def test_the_defaults_are_auto_only_where_an_accelerator_is_seen_and_a_users_value_wins():
    defaults = SimpleNamespace(workers=None, max_size=None)
    on_gpu = auto_module.asked(defaults, ["/device:GPU:0"])
    assert (on_gpu.workers, on_gpu.max_size) == ("auto", "auto") and "GPU:0" in on_gpu.reason
    assert auto_module.wanted(defaults, on_gpu)
    tpu = auto_module.asked(defaults, ["TPU_0(process=0,(0,0,0,0))"])
    assert (tpu.workers, tpu.max_size) == ("auto", "auto")
    # negative control: no accelerator, the defaults stay as they were, and nothing to probe
    on_cpu = auto_module.asked(defaults, [])
    assert (on_cpu.workers, on_cpu.max_size) == (2, 2) and "no GPU or TPU" in on_cpu.reason
    assert not auto_module.wanted(defaults, on_cpu)
    # a user's own value wins, beside a default made auto
    mine = auto_module.asked(SimpleNamespace(workers=3, max_size=None), ["/device:GPU:0"])
    assert (mine.workers, mine.max_size) == (3, "auto") and mine.reason.startswith("queue.max_size auto")
    given = auto_module.asked(SimpleNamespace(workers=2, max_size=4), ["/device:GPU:0"])
    assert (given.workers, given.max_size, given.reason) == (2, 4, None)


def test_a_resume_keeps_what_its_start_made_of_the_defaults():
    started = auto_module.asked(SimpleNamespace(workers=None, max_size=None), ["/device:GPU:0"]).record()
    resumed = auto_module.asked(SimpleNamespace(workers=None, max_size=None), [], kept=started)
    assert (resumed.workers, resumed.max_size) == ("auto", "auto")
    assert "start made them (queue.workers and" in resumed.reason
    # negative control: the same resume with no record takes this machine's (a CPU's 2)
    assert auto_module.asked(SimpleNamespace(workers=None, max_size=None), [], kept=None).workers == 2
