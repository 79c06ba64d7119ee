"""Checkpoints on disk: atomic, pruned, and the one place that decides where a resume starts."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from app.errors import ConfigError
from app.inference import restore
from app.runs import checkpoint


def tiny():
    inputs = keras.Input((4,))
    net = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dropout(0.5)(inputs)))
    net.compile(optimizer="adam", loss="mse")
    return net


def written(net, run_dir, step: int, state: dict) -> None:
    """A checkpoint as training writes one: then all but the newest few and the best deleted."""
    checkpoint.write_checkpoint(net, run_dir, step, state)
    checkpoint.delete_stale_checkpoints(run_dir, best=(state.get("best") or [None, None])[1])


def test_keeps_the_newest_two_and_the_protected_best(tmp_path):
    net = tiny()
    for step in range(1, 6):
        written(net, tmp_path, step, {"step": step, "best": [0.9, "step-00000002"]})
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000002", "step-00000004", "step-00000005"]  # no temporary leftovers either


def test_resume_point_passes_over_half_written_and_corrupt_checkpoints(tmp_path, caplog):
    net = tiny()
    x, y = np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32)
    net.train_on_batch(x, y)
    written(net, tmp_path, 1, {"step": 1})
    net.train_on_batch(x, y)
    written(net, tmp_path, 2, {"step": 2})
    # a kill during a write leaves only a temporary directory, which is not a checkpoint
    half = tmp_path / "checkpoints" / ".step-00000003.tmp"
    half.mkdir()
    (half / "model.keras").write_bytes(b"PK\x03\x04 cut short")
    point = restore.resume_point(tmp_path)
    assert point.path.name == "step-00000002" and point.state == {"step": 2}
    assert int(point.model.optimizer.iterations.numpy()) == 2
    # the Dropout's random state comes back too (Keras's own format leaves it out)
    restored = [np.array(v) for v in point.model.variables if v.name == "seed_generator_state"]
    assert np.array_equal(restored[0], [np.array(v) for v in net.variables if v.name == "seed_generator_state"][0])
    # a corrupt newest: a warning, and the one before it
    (tmp_path / "checkpoints" / "step-00000002" / "model.keras").write_bytes(b"garbage")
    with caplog.at_level("WARNING"):
        assert restore.resume_point(tmp_path).path.name == "step-00000001"
    assert "step-00000002 cannot be loaded" in caplog.text
    # none loads: an error, never a silent fresh start
    (tmp_path / "checkpoints" / "step-00000001" / "state.json").write_text("{not json")
    with pytest.raises(ConfigError, match="none of its checkpoints loads") as raised:
        restore.resume_point(tmp_path)
    assert "step-00000001: JSONDecodeError: Expecting property name" in str(raised.value)  # the reason
    assert str(raised.value).endswith("restore checkpoints/ from a copy of the run, or start a new run.")


def test_no_checkpoint_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="has no checkpoint"):
        restore.resume_point(tmp_path)


def test_a_folder_without_checkpoints_is_told_what_to_do_instead(tmp_path):
    """A run stopped before its first checkpoint is started again; lost checkpoints/ are restored."""
    with pytest.raises(ConfigError, match="is not a run directory"):  # negative control: nothing of a run
        checkpoint.saved_config(tmp_path)
    (tmp_path / "summary.json").write_text('{"status": "interrupted"}')
    (tmp_path / "checkpoints").mkdir()  # the first checkpoint's write was stopped
    with pytest.raises(ConfigError, match="stopped before its first checkpoint, so there is nothing to resume: run "
                       f"the command that started it again, with hydra.run.dir={tmp_path} "):
        checkpoint.saved_config(tmp_path)
    (tmp_path / "metrics.csv").write_text("epoch\n1\n")
    with pytest.raises(ConfigError, match="holds a run whose checkpoints/ are gone: restore them"):
        checkpoint.saved_config(tmp_path)


def test_trainer_epochs_below_the_checkpoints_epoch_is_refused(tmp_path):
    """A resume with fewer epochs than done would end at once and call an unfinished run completed."""
    net = tiny()
    written(net, tmp_path, 4, {"step": 4, "epoch": 1, "epoch_complete": True})  # 2 epochs done
    assert restore.resume_point(tmp_path, epochs=2).path.name == "step-00000004"  # negative control
    with pytest.raises(ConfigError, match=r"`trainer.epochs` = 1 is not allowed: 2 or more: .* has 2 epochs done "
                       r"\(checkpoint step-00000004\).*trainer.epochs=3` trains it further"):
        restore.resume_point(tmp_path, epochs=1)
    written(net, tmp_path, 6, {"step": 6, "epoch": 2, "epoch_complete": False})  # inside epoch 3
    with pytest.raises(ConfigError, match="2 is not allowed: 3 or more: .* has epoch 3 under way"):
        restore.resume_point(tmp_path, epochs=2)


def test_a_damaged_checkpoint_asked_for_by_name_is_named_with_the_others(tmp_path):
    from app.errors import DataError

    net = tiny()
    for step in (1, 2):
        written(net, tmp_path, step, {"step": step, "best": None})
    assert restore.load_model(tmp_path, "step-00000001") is not None  # negative control: a whole one loads
    (tmp_path / "checkpoints" / "step-00000001" / "model.keras").write_bytes(b"not a zip file")
    with pytest.raises(DataError, match="step-00000001/model.keras cannot be loaded") as raised:
        restore.load_model(tmp_path, "step-00000001")
    assert str(raised.value).endswith("or use another: step-00000002.")  # not the damaged one itself


def _checkpoints(tmp_path, states: dict) -> None:
    for step, state in states.items():
        folder = tmp_path / "checkpoints" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "state.json").write_text(state if isinstance(state, str) else json.dumps(state))


def test_the_walk_goes_newest_first_and_passes_over_what_does_not_open(tmp_path, caplog):
    _checkpoints(tmp_path, {1: {"step": 1}, 2: {"step": 2, "inside": True}, 3: "{cut", 4: {"step": 4, "bad": 1}})

    def opened(path, state):
        if state.get("bad"):
            raise ValueError("damaged\nsecond line")
        return None if state.get("inside") else f"model of {path.name}"

    failures = []
    with caplog.at_level("WARNING"):
        walked = list(checkpoint.walk(tmp_path, opened, failures))
    assert [(p.name, s["step"], m) for p, s, m in walked] == [("step-00000001", 1, "model of step-00000001")]
    assert failures[0] == "step-00000004: ValueError: damaged"  # the first line of why
    assert failures[1].startswith("step-00000003: JSONDecodeError: Expecting property name") and len(failures) == 2
    assert "step-00000004 cannot be loaded" in caplog.text and "step-00000002" not in caplog.text  # None: silent
    # negative control: with every checkpoint opening, each is walked, newest first
    assert [p.name for p, _, _ in checkpoint.walk(tmp_path, lambda p, s: 1)] == [
        "step-00000004", "step-00000002", "step-00000001"]


def test_evaluates_choice_last_best_or_named(tmp_path, caplog):
    """`last`: the newest written at an epoch's end that loads; `best`: the one marked, however
    old; a name: that one. A checkpoint inside an epoch is never `last`."""
    net = tiny()
    written(net, tmp_path, 2, {"step": 2, "epoch_complete": True, "best": [0.5, "step-00000002"]})
    written(net, tmp_path, 4, {"step": 4, "epoch_complete": True, "best": [0.5, "step-00000002"]})
    written(net, tmp_path, 5, {"step": 5, "epoch_complete": False, "best": [0.5, "step-00000002"]})
    assert restore.chosen_checkpoint(tmp_path)[0].name == "step-00000004"  # not step 5, inside an epoch
    assert restore.chosen_checkpoint(tmp_path, "best")[0].name == "step-00000002"
    assert restore.chosen_checkpoint(tmp_path, "step-00000005")[0].name == "step-00000005"
    (tmp_path / "checkpoints" / "step-00000004" / "model.keras").write_bytes(b"garbage")
    with caplog.at_level("WARNING"):
        assert restore.chosen_checkpoint(tmp_path)[0].name == "step-00000002"  # the one before, with a warning
    assert "step-00000004 cannot be loaded" in caplog.text
    with pytest.raises(ConfigError, match="or one of .*checkpoints: step-00000005, step-00000004, step-00000002"):
        restore.chosen_checkpoint(tmp_path, "step-00000003")
