"""The tasks (app/tasks/): one chosen a data.task, each keeping the contract; a multilabel run's thresholds as predict
and export read them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from app.errors import DataError
from app.io import write_json
from app.schema.data import Task as TaskName
from app.targets import TARGETS, Targets
from app.tasks import TASKS, Task, task_of

LABEL_SET = task_of("multilabel")

APP = Path(__file__).resolve().parent.parent / "app"


def missing(obj, contract) -> list[str]:
    """The members `contract` (a Protocol) declares that `obj` lacks."""
    declared = set(getattr(contract, "__annotations__", {})) | {
        name for name, value in vars(contract).items() if callable(value) and not name.startswith("_")}
    return sorted(name for name in declared if not hasattr(obj, name))


def test_each_data_task_has_one_task_keeping_the_contract_with_its_own_targets():
    assert set(TASKS) == set(TaskName) == set(TARGETS)
    for name in TaskName:
        task = task_of(name.value)
        assert task is task_of(name) and task.targets is TARGETS[name] and task.targets.task is name
        assert not missing(task, Task) and not missing(task.targets, Targets), name
    assert task_of("multiclass").activation != task_of("multilabel").activation
    assert [task_of(name).output for name in TaskName] == ["image", "image", "pixels"]
    assert [TARGETS[name].masks for name in TaskName] == [False, False, True]
    with pytest.raises(ValueError):
        task_of("detection")  # not a task

    class Partial:  # negative control: a task without evaluate is seen
        targets = TARGETS[TaskName.multiclass]
    assert "evaluate" in missing(Partial(), Task) and "check" in missing(object(), Targets)


def test_a_tasks_name_is_read_in_one_place():
    """"multilabel" as a string only in the schema's enum: every other module asks the run's task."""
    def spelled(source: str) -> int:
        return sum(isinstance(n, ast.Constant) and n.value == "multilabel" for n in ast.walk(ast.parse(source)))

    found = {str(path.relative_to(APP)): n for path in APP.rglob("*.py") if (n := spelled(path.read_text()))}
    assert found == {"schema/data.py": 1}, found
    assert spelled('several = str(config.data.task.value) == "multilabel"') == 1  # negative control


def test_the_tasks_load_no_framework():
    """Commands ask the task before Keras loads on the run's backend; prepare and the rules never load it."""
    code = ("import sys, app.tasks, app.targets; "
            "print(sorted(m for m in ('keras', 'tensorflow', 'jax') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
    control = subprocess.run([sys.executable, "-c", code.replace("app.targets", "app.objectives")],
                             capture_output=True, text=True, timeout=120, check=True)
    assert "keras" in control.stdout  # negative control: the check sees Keras where it loads


def test_each_targets_weigh_count_and_see_untrained_classes():
    one, several = TARGETS[TaskName.multiclass], TARGETS[TaskName.multilabel]
    labels, vectors = np.array([0, 0, 1, 1, 1, 1]), np.array([[1, 0, 0], [1, 1, 0], [1, 0, 0]], np.uint8)
    assert one.untrained(labels, ["a", "b", "c"]) == ["c"] and several.untrained(vectors, ["a", "b", "c"]) == ["c"]
    assert one.balanced_weights(labels, 2).tolist() == pytest.approx([1.5, 0.75])
    assert several.balanced_weights(vectors, 3).tolist() == pytest.approx([0.0, 2.0, 3.0])
    assert (one.target_bytes(3), several.target_bytes(3)) == (8, 3)
    assert one.stratum(labels).tolist() == labels.tolist() and several.stratum(vectors).tolist() == [0, 0, 0]


def test_predict_applies_thresholds_only_where_evaluate_picked_them_for_model_keras(tmp_path, caplog):
    """model.keras is the run's best checkpoint; thresholds.json records the checkpoint evaluate scored."""
    for step in (5, 15):  # each checkpoint's state.json names the best, step 5
        (tmp_path / "checkpoints" / f"step-{step:08d}").mkdir(parents=True)
        write_json(tmp_path / "checkpoints" / f"step-{step:08d}" / "state.json", {"best": [0.9, "step-00000005"]})
    trainer, names = SimpleNamespace(threshold=0.5), ["a", "b"]

    def picked_for(step: int) -> Path:
        write_json(tmp_path / "thresholds.json", {"split": "val", "checkpoint": str(tmp_path / "checkpoints" /
                   f"step-{step:08d}"), "thresholds": {"a": 0.2, "b": 0.7}})
        return tmp_path / "thresholds.json"

    picked_for(5)  # negative control: picked for model.keras's checkpoint, used
    assert LABEL_SET.cut(None, tmp_path, names, trainer).tolist() == [0.2, 0.7]
    picked_for(15)
    with caplog.at_level("WARNING", logger="app.predict"):
        assert LABEL_SET.cut(None, tmp_path, names, trainer).tolist() == [0.5, 0.5]  # trainer.threshold instead
    picked, scored = (tmp_path / "checkpoints" / f"step-{step:08d}" for step in (15, 5))
    assert f"checkpoint {picked}, where" in caplog.text and f"which is checkpoint {scored} (" in caplog.text
    assert f"evaluate resume={tmp_path} checkpoint=best" in caplog.text and "not used" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="app.predict"):  # given by name: used as asked, the warning said
        assert LABEL_SET.cut(str(picked_for(15)), tmp_path, names, trainer).tolist() == [0.2, 0.7]
    assert "used, as thresholds= asks" in caplog.text


def test_another_runs_thresholds_for_a_checkpoint_of_the_same_name_are_told_apart(tmp_path, caplog):
    for run in ("A", "B"):  # both runs' best is step 10
        (tmp_path / run / "checkpoints" / "step-00000010").mkdir(parents=True)
        write_json(tmp_path / run / "checkpoints" / "step-00000010" / "state.json", {"best": [0.9, "step-00000010"]})
        write_json(tmp_path / run / "thresholds.json", {"split": "val", "checkpoint": str(
            tmp_path / run / "checkpoints" / "step-00000010"), "thresholds": {"a": 0.2, "b": 0.7}})
    trainer, names = SimpleNamespace(threshold=0.5), ["a", "b"]
    with caplog.at_level("WARNING", logger="app.predict"):  # negative control: B's own file, given by name
        assert LABEL_SET.cut(str(tmp_path / "B" / "thresholds.json"), tmp_path / "B", names, trainer).tolist() == \
            [0.2, 0.7]
    assert caplog.text == ""
    with caplog.at_level("WARNING", logger="app.predict"):
        assert LABEL_SET.cut(str(tmp_path / "A" / "thresholds.json"), tmp_path / "B", names, trainer).tolist() == \
            [0.2, 0.7]
    picked, scored = (tmp_path / run / "checkpoints" / "step-00000010" for run in "AB")
    assert f"checkpoint {picked}, where" in caplog.text and f"which is checkpoint {scored} (" in caplog.text


def test_a_threshold_outside_0_to_1_is_refused_naming_the_class_and_the_file_by_predict_and_export(tmp_path):
    (tmp_path / "checkpoints" / "step-00000010").mkdir(parents=True)
    trainer, names = SimpleNamespace(threshold=0.5), ["a", "b"]
    path = tmp_path / "thresholds.json"
    path.write_text('{"split": "val", "thresholds": {"a": 0.0, "b": 1}}')  # negative control: the bounds are kept
    assert LABEL_SET.cut(None, tmp_path, names, trainer).tolist() == [0.0, 1.0]
    assert LABEL_SET.export_output(tmp_path, names, trainer)["thresholds"] == {"a": 0.0, "b": 1.0}
    for wrong, said in (('NaN', "'a'.s threshold is nan"), ('7.5', "'a'.s threshold is 7.5"),
                        ('"0.4"', "'a'.s threshold is '0.4'"), ('-0.1', "'a'.s threshold is -0.1")):
        path.write_text(f'{{"split": "val", "thresholds": {{"a": {wrong}, "b": 0.5}}}}')
        for read in (lambda: LABEL_SET.cut(None, tmp_path, names, trainer),
                     lambda: LABEL_SET.export_output(tmp_path, names, trainer)):
            with pytest.raises(DataError, match=f"{path} cannot be used .class {said}, not a number from 0 to 1"):
                read()
