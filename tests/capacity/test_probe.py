"""The machine probe: measured once with a real training process and real loader workers,
stored, and measured again on another machine."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.capacity import probe as machine_probe
from app.frameworks import load_keras
from app.io import held_exclusively
from app.training.calibration import trainer_measures

KERAS_ALONE = ("import psutil; from app.frameworks import load_keras; load_keras(); "
               "print(psutil.Process().memory_info().rss)")


@pytest.mark.slow
def test_measured_once_stored_and_measured_again_elsewhere(tmp_path, monkeypatch, capfd):
    """Measured into the suite's own cache (tests/conftest.py's, run first): the runs of the other
    worker process that start meanwhile wait for these figures instead of measuring beside them."""
    session = Path(os.environ["APP_CACHE_DIR"])
    monkeypatch.delenv("KERAS_BACKEND", raising=False)  # TensorFlow's: the default
    load_keras()  # as in `train`, which probes with TensorFlow loaded: its pages must not be split with us
    log_file = logging.FileHandler(tmp_path / "command.log")
    logging.getLogger().addHandler(log_file)
    capfd.readouterr()
    try:
        probe = machine_probe.measured_or_spawn_probe(trainer_measures, refresh=True)
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
    # a forked worker shares the modules its fork server imported: that server holds them once
    assert probe.forked_worker_mib < probe.worker_mib / 2 < probe.fork_server_mib < probe.worker_mib * 1.5
    assert 0.3 < probe.step_mib_per_layer < 20  # the compiled steps: MiB a layer
    assert 0.5 < probe.worker_bytes_per_decoded_byte < 10  # a worker holds its largest decode at least once
    assert 1 < probe.worker_region_mib < 50  # zarr and its stores, for region reads
    # forked, a worker starts from the server's pages and what the reads write becomes its own: more than spawned
    assert probe.worker_region_mib < probe.forked_worker_region_mib < probe.worker_mib
    assert 0.3 < probe.activation_factor < 20
    stored = json.loads((session / "machine_probe.tensorflow.json").read_text())
    assert stored["trainer_mib"] == probe.trainer_mib and stored["machine"]["versions"]["tensorflow"]

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


class Said(logging.Handler):
    """The lines a logger says, and an event set at the first that holds `words`."""

    def __init__(self, words: str):
        super().__init__()
        self.words, self.lines, self.heard = words, [], threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.words in self.lines[-1]:
            self.heard.set()


def test_processes_asking_together_wait_for_one_measurement(tmp_path, monkeypatch, caplog):
    """A sweep's jobs starting at once: the one that takes the lock measures, the others say they
    wait and read its figures when it lets go, instead of measuring beside it."""
    caplog.set_level(logging.INFO, logger=machine_probe.__name__)
    said = Said("waiting to read them")
    monkeypatch.setattr(machine_probe.log, "handlers", [*machine_probe.log.handlers, said])  # undone after
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path))
    figures = {"trainer_mib": 800.0, "activation_factor": 0.8, "step_mib_per_layer": 1.5, "worker_mib": 60.0,
               "forked_worker_mib": 10.0, "fork_server_mib": 50.0, "worker_region_mib": 10.0,
               "forked_worker_region_mib": 30.0, "worker_bytes_per_decoded_byte": 2.0}
    measured = []
    monkeypatch.setattr(machine_probe, "_spawn_trainer_probes", lambda _: measured.append(1) or {
        k: figures[k] for k in ("trainer_mib", "activation_factor", "step_mib_per_layer")})
    monkeypatch.setattr(machine_probe, "_spawn_worker_probe", lambda: {
        k: figures[k] for k in ("worker_mib", "forked_worker_mib", "fork_server_mib", "worker_bytes_per_decoded_byte",
                                "worker_region_mib", "forked_worker_region_mib")})
    path = machine_probe.cache_file()
    got = []
    with held_exclusively(path.with_name(f"{path.name}.lock")):  # another process measuring
        asker = threading.Thread(target=lambda: got.append(machine_probe.measured_or_spawn_probe(trainer_measures)))
        asker.start()
        assert said.heard.wait(timeout=30)  # it found no figures, met the lock and says it waits
        path.write_text(json.dumps({**figures, "machine": machine_probe.machine()}))  # the other one's
    asker.join(timeout=30)
    assert got and got[0].trainer_mib == 800.0 and measured == []
    assert said.lines == [f"another process is measuring this machine's memory figures (it holds {path}.lock): "
                          "waiting to read them"]
    said.lines.clear()
    path.unlink()  # negative control: no figures when the lock is let go, so it measures them itself
    machine_probe.measured_or_spawn_probe(trainer_measures)
    assert measured == [1] and json.loads(path.read_text())["trainer_mib"] == 800.0
    assert not [line for line in said.lines if "waiting" in line]  # nobody held the lock: nothing said
