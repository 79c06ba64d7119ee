"""A bench mode's child process and the pipe to its parent; the modes a machine can run."""

from __future__ import annotations

import logging
import multiprocessing

import pytest

from app.bench.modes import child_main
from app.commands import bench
from app.errors import ConfigError
from app.schema import BENCH_MODES


def test_a_mode_whose_bench_stopped_ends_quietly():
    """Ctrl-C or SIGTERM ends the bench, which closes its end of the pipe: the child's result has
    nobody to go to, and the child ends without a BrokenPipeError traceback on the terminal."""
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    child_main("serial", None, child_end)  # negative control: the parent is there and gets the error
    assert "AttributeError" in parent_end.recv()["error"]
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    parent_end.close()
    child_main("serial", None, child_end)  # raises nothing


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
