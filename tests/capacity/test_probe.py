"""The machine probe: measured once with a real training process and real loader workers,
stored, and measured again on another machine."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.capacity import probe as machine_probe
from app.frameworks import load_keras
from app.training.calibration import trainer_measures

KERAS_ALONE = ("import psutil; from app.frameworks import load_keras; load_keras(); "
               "print(psutil.Process().memory_info().rss)")


@pytest.mark.slow
def test_measured_once_stored_and_measured_again_elsewhere(tmp_path, monkeypatch, capfd):
    session = Path(os.environ["APP_CACHE_DIR"])  # tests/conftest.py's, for every run of the suite
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)  # TensorFlow's: the default
    load_keras()  # as in `train`, which probes with TensorFlow loaded: its pages must not be split with us
    log_file = logging.FileHandler(tmp_path / "command.log")
    logging.getLogger().addHandler(log_file)
    capfd.readouterr()
    try:
        probe = machine_probe.measured_or_spawn_probe(trainer_measures)
    finally:
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    # the probe's TensorFlow start-up lines go to the command's log, never to the terminal
    terminal = capfd.readouterr().err
    assert "oneDNN" not in terminal and "absl::InitializeLog" not in terminal, terminal
    assert "oneDNN custom operations" in (tmp_path / "command.log").read_text()  # negative control: they were there
    # a training process holds at least what Keras alone holds, in a process of its own
    keras_alone = int(subprocess.run([sys.executable, "-c", KERAS_ALONE], capture_output=True, text=True,
                                     check=True).stdout.split()[-1]) / 2**20
    assert probe.trainer_mib >= 0.9 * keras_alone > 200, (probe.trainer_mib, keras_alone)
    # TensorFlow's process is hundreds of MiB; a worker (numpy, OpenCV, albumentations) tens
    assert 200 < probe.trainer_mib < 3000 and 20 < probe.worker_mib < probe.trainer_mib
    assert 0.3 < probe.step_mib_per_layer < 20  # the compiled steps: MiB a layer
    assert 0.5 < probe.worker_bytes_per_decoded_byte < 10  # a worker holds its largest decode at least once
    assert 0.3 < probe.activation_factor < 20
    stored = json.loads((tmp_path / "machine_probe.tensorflow.json").read_text())
    assert stored["trainer_mib"] == probe.trainer_mib and stored["machine"]["versions"]["tensorflow"]
    if not (session / "machine_probe.tensorflow.json").exists():  # the suite's runs read it, not measure again
        # whole or not at all: the other worker process of `make test` may read it at any moment
        part = session / f".machine_probe.{os.getpid()}.tmp"
        shutil.copy(tmp_path / "machine_probe.tensorflow.json", part)
        part.replace(session / "machine_probe.tensorflow.json")

    def measuring(*_):
        raise AssertionError("measured again")

    monkeypatch.setattr(machine_probe, "_spawn_trainer_probes", measuring)
    assert machine_probe.measured_or_spawn_probe(trainer_measures) == probe  # stored: nothing measured
    monkeypatch.setattr(machine_probe, "machine", lambda: {**stored["machine"], "cpu_count": 999})
    with pytest.raises(AssertionError, match="measured again"):  # negative control: another machine
        machine_probe.measured_or_spawn_probe(trainer_measures)
    monkeypatch.undo()
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # another backend: a file of its own, measured apart
    monkeypatch.setattr(machine_probe, "_spawn_trainer_probes", measuring)
    with pytest.raises(AssertionError, match="measured again"):
        machine_probe.measured_or_spawn_probe(trainer_measures)
    assert machine_probe.cache_file().name == "machine_probe.jax.json"


def test_the_lower_figures_of_the_training_processes_are_kept(monkeypatch):
    # one process settled on a higher step cost, the other (on a loaded machine) on a higher base
    measured = iter([{"trainer_mib": 943.0, "activation_factor": 0.76, "step_mib_per_layer": 1.5},
                     {"trainer_mib": 765.0, "activation_factor": 0.93, "step_mib_per_layer": 1.9}])
    monkeypatch.setattr(machine_probe, "_spawn_trainer_probe", lambda _: next(measured))
    figures = machine_probe._spawn_trainer_probes(trainer_measures)
    assert figures == {"trainer_mib": 765.0, "activation_factor": 0.76, "step_mib_per_layer": 1.5}
