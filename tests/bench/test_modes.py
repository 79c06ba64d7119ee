"""A bench mode's child process and the pipe to its parent; the modes a machine can run."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing

import numpy as np
import pytest
import tifffile
from hydra import compose, initialize_config_dir
from PIL import Image
from segmentation_data import TEXTURE_CLASSES, write_texture_folder

from app.bench.keras_modes import _trivial_model
from app.bench.modes import child_main
from app.commands import bench
from app.config import conf_dir, load
from app.data.pixels.pixels import run_pixels
from app.data.source import FileSplit
from app.data.sources.chosen import load_or_generate_source
from app.errors import ConfigError
from app.loader.settings import Queue, Settings
from app.schema import BENCH_MODES, register
from app.training.steps import target_spec

register()


def test_a_mode_whose_bench_stopped_ends_quietly():
    """Ctrl-C or SIGTERM ends the bench, which closes its end of the pipe: the child's result has
    nobody to go to, and the child ends without a BrokenPipeError traceback on the terminal."""
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    child_main("serial", None, Queue(), child_end)  # negative control: the parent is there and gets the error
    assert "AttributeError" in parent_end.recv()["error"]
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    parent_end.close()
    child_main("serial", None, Queue(), child_end)  # raises nothing


def test_tf_data_needs_tensorflow_left_out_of_the_default_modes_refused_when_named(monkeypatch, caplog):
    """Where TensorFlow is not installed, the default modes run without tf_data (a note says
    why); a list that names it is refused before anything runs, naming the package to install."""
    named = ["tf_data", "loader"]
    # negative control: TensorFlow is installed here, and every mode asked for runs
    assert bench.tensorflow_installed()
    assert bench._runnable_modes(BENCH_MODES, patches=True) == BENCH_MODES
    assert bench._runnable_modes(named, patches=True) == named
    monkeypatch.setattr(bench, "tensorflow_installed", lambda: False)
    with caplog.at_level(logging.INFO, logger="app.bench"):
        assert bench._runnable_modes(BENCH_MODES, patches=True) == [m for m in BENCH_MODES if m != "tf_data"]
    assert "leaves tf_data out of its default modes" in caplog.text and "'.[tensorflow]'" in caplog.text
    with pytest.raises(ConfigError, match=r"`bench.modes`.*tf_data times tf.data.*`tensorflow`.*pip install -e "
                                          r"'\.\[tensorflow\]', or leave tf_data out of bench.modes"):
        bench._runnable_modes(named, patches=True)
    assert bench._runnable_modes(["loader", "serial"], patches=True) == ["loader", "serial"]  # no TensorFlow's asked


def test_keras_regions_needs_patches_left_out_of_the_default_modes_refused_when_named():
    """keras_regions reads slides' regions by hand: without data.patches the default modes run without it, and a list
    that names it is refused naming the key."""
    assert bench._runnable_modes(BENCH_MODES, patches=True) == BENCH_MODES  # negative control: patches, it runs
    assert bench._runnable_modes(BENCH_MODES, patches=False) == [m for m in BENCH_MODES if m != "keras_regions"]
    with pytest.raises(ConfigError, match=r"`bench.modes`.*keras_regions reads patches of slides: set "
                                          r"data.patches.size"):
        bench._runnable_modes(["keras_regions", "loader"], patches=False)


def test_serial_reads_a_six_band_uint16_run_and_the_figures_are_of_its_batches(tmp_path):
    """serial reads as the run reads (6 bands of uint16, where 8-bit RGB refuses the files), and bench.json's queue and
    float32 batch bytes are those of 6 bands, the ring's 2 bytes a sample."""
    for c, name in enumerate(("a", "b")):
        (tmp_path / name).mkdir()
        for i in range(4):
            tifffile.imwrite(tmp_path / name / f"{i}.tif", np.full((16, 16, 6), 1000 + c, np.uint16),
                             photometric="minisblack", planarconfig="contig")
    data = [f"data.path={tmp_path}", "data.image_size=[16,16]", "data.batch_size=2", "augment=none"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("bench", ["data=folder", *data, "data.channels=all", "data.dtype=uint16",
                                        "bench.warmup=1", "bench.batches=2"]))
        rgb = load(compose("bench", ["data=folder", *data, "bench.warmup=1", "bench.batches=2"]))
    for loaded, failed in ((rgb, True), (config, False)):  # negative control: a uint8 run refuses 16-bit files
        parent_end, child_end = multiprocessing.Pipe(duplex=False)
        child_main("serial", loaded, Queue(workers=1), child_end)
        assert ("error" in parent_end.recv()) is failed
    pixels = run_pixels(config.data, FileSplit(sorted(tmp_path.rglob("*.tif")), [0] * 8))
    batch = Settings.of(config.data, Queue(workers=1), pixels=pixels)
    derived = bench._derived({}, batch, slots=3)
    assert derived == {"queue_bytes": 3 * 2 * 16 * 16 * 6 * 2, "float32_batch_bytes": 4 * 2 * 16 * 16 * 6}


def in_process(mode: str, config) -> dict:
    """`mode`'s result, run in this process (as its child process runs it), one worker."""
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    child_main(mode, config, Queue(workers=1), child_end)
    return parent_end.recv()


@pytest.mark.slow
def test_every_mode_benches_a_segmentation_folder_and_the_peers_read_the_masks_themselves(tmp_path):
    """data.task=segmentation: every mode times (image, mask) batches, the modes with a model through a per-pixel
    head whose targets in train's step loop (target_spec) are the split's masks; the peers read each mask as their
    users do (read_mask), so a colour mask fails them."""
    write_texture_folder(tmp_path, train=8, val=2, size=32)
    data = ["data=folder", f"data.path={tmp_path / 'images'}", f"data.masks={tmp_path / 'masks'}",
            "data.task=segmentation", f"data.classes=[{','.join(TEXTURE_CLASSES)}]", "data.ignore_index=255",
            "data.image_size=[32,32]", "data.batch_size=4"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("bench", [*data, "bench.warmup=1", "bench.batches=1"]))
    # the modes that read, augment or feed pairs themselves; keras_processes runs keras_threads' dataset in Keras's
    # processes, loader and loader_fit the loader loader_steps runs (each of them: tests/cli/test_bench_cli.py)
    for mode in ("baseline", "loader_steps", "keras_threads", "tf_data", "serial"):
        result = in_process(mode, config)
        assert "error" not in result, (mode, result.get("traceback"))
        assert result["timed_batches"] == 1 and result["images_per_s"] > 0, mode
    source = load_or_generate_source(config.data)
    assert target_spec(_trivial_model(config, source)) == ((32, 32), source.train.mask_dtype) == ((32, 32), "uint8")
    masked = dataclasses.replace(Settings.of(config.data, Queue(workers=1)), mask_dtype="uint8")
    assert bench._derived({}, masked, slots=2) == {"queue_bytes": 2 * 4 * 32 * 32 * (3 + 1),  # the ring holds masks too
                                                   "float32_batch_bytes": 4 * 4 * 32 * 32 * 3 + 4 * 32 * 32}
    for mask in (tmp_path / "masks" / "train").iterdir():  # negative control: masks no reader takes
        Image.new("RGB", (32, 32), (200, 40, 40)).save(mask)
    for mode in ("serial", "keras_threads", "tf_data"):
        assert "colour" in in_process(mode, config)["error"], mode
