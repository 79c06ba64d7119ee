"""`export` on one real training run, through the real CLI: each format loaded in this test with
its own runtime (TensorFlow's SavedModel loader, onnxruntime, LiteRT's interpreter), never through
the app, and compared with Keras's model.keras; the parity check's record; its failure and the
command's refusals. One run trained, every export in one process (tests/docs_runner.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from docs_runner import spawn_one_process_for

from app.commands.export import installed

TINY = ["data.num_images=36", "data.source_size=48", "data.num_classes=3", "data.image_size=[16,16]",
        "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1", "queue.workers=0", "hydra.run.dir=run"]
RUNTIME_TOLERANCE = {"tf_saved_model": 1e-4, "onnx": 1e-4, "litert": 1e-3}
WRITTEN = {"tf_saved_model": "saved_model", "onnx": "model.onnx", "litert": "model.tflite"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("export")
    run = root / "run"
    # a user's folder and a user's file at export.out: refused first, in the process that trains the run,
    # then the advice followed with the exports below
    users = {}
    for kind in ("folder", "file"):
        out = root / f"users_{kind}" / "mine"
        out.parent.mkdir()
        if kind == "folder":
            out.mkdir()
            (out / "important.txt").write_text("keep me")
        else:
            out.write_text("keep me too")
        users[kind] = SimpleNamespace(out=out, before=tree(out))
    trained, *refused = spawn_one_process_for(["train", *TINY], *(export_argv(run, f"export.out={user.out}")
                                                                  for user in users.values()), cwd=root)
    assert trained.returncode == 0, trained.stdout[-3000:]
    for user, refusal in zip(users.values(), refused, strict=True):
        user.refused, user.after = refusal, tree(user.out)
        user.beside = sorted(p.name for p in user.out.parent.iterdir())
    shutil.copytree(run, root / "without_model", ignore=shutil.ignore_patterns("model.keras", "export"))
    earlier = root / "replaced" / "earlier"
    commands = {"tf_saved_model": ["export", f"resume={run}"],
                "onnx": ["export", f"resume={run}", "export.format=onnx"],
                "litert": ["export", f"resume={run}", "export.format=litert"],
                "strict": ["export", f"resume={run}", "export.format=litert", "export.tolerance=0",
                           f"export.out={root / 'strict'}"],
                "last": ["export", f"resume={run}", "checkpoint=last", "export.format=onnx", "export.samples=2",
                         f"export.out={root / 'last'}"],
                "bad_format": ["export", f"resume={run}", "export.format=keras"],
                "no_run": ["export", f"resume={root / 'nowhere'}"],
                "no_model": ["export", f"resume={root / 'without_model'}"],
                # as app_export below runs them, one after another here
                **{f"moved_{kind}": ["export", f"resume={run}", "export.format=onnx", "export.samples=2",
                                     f"export.out={user.out}", "overwrite=true"] for kind, user in users.items()},
                "earlier": ["export", f"resume={run}", "export.format=onnx", "export.samples=2",
                            f"export.out={earlier}"],
                "replaced": ["export", f"resume={run}", "export.format=tf_saved_model", "export.samples=2",
                             f"export.out={earlier}"]}
    done = spawn_one_process_for(*[[*argv, "queue.workers=0"] for argv in commands.values()], cwd=root)
    return {"root": root, "run": run, "users": users, "earlier_out": earlier, **dict(zip(commands, done, strict=True))}


def keras_reference(run: Path, images: np.ndarray) -> np.ndarray:
    import keras  # loaded only here: the test's own reference, not the app's

    return np.asarray(keras.saving.load_model(run / "model.keras").predict(images.astype(np.float32), verbose=0))


def loaded_with_its_runtime(path: Path, fmt: str):
    """A uint8 batch → probabilities, from the runtime a deployer would use."""
    if fmt == "tf_saved_model":
        import tensorflow as tf

        served = tf.saved_model.load(str(path)).signatures["serving_default"]
        return lambda x: next(iter(served(tf.constant(x)).values())).numpy()
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return lambda x: session.run(None, {session.get_inputs()[0].name: x})[0]
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    given, taken = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    assert list(given["shape"]) == [1, 16, 16, 3] and given["dtype"] == np.uint8  # LiteRT's batch of one

    def one_at_a_time(x):
        rows = []
        for image in x:
            interpreter.allocate_tensors()
            interpreter.set_tensor(given["index"], image[None])
            interpreter.invoke()
            rows.append(interpreter.get_tensor(taken["index"])[0].copy())
        return np.stack(rows)
    return one_at_a_time


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tf_saved_model", "onnx", "litert"])
def test_each_format_loads_with_its_runtime_and_predicts_as_keras(exported, fmt):
    result, run = exported[fmt], exported["run"]
    assert result.returncode == 0, result.stdout[-3000:]
    folder = run / "export" / fmt
    images = np.random.default_rng(0).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    theirs, ours = loaded_with_its_runtime(folder / WRITTEN[fmt], fmt)(images), keras_reference(run, images)
    assert theirs.shape == (5, 3) and np.allclose(theirs.sum(axis=1), 1, atol=1e-5)
    assert np.abs(theirs - ours).max() <= RUNTIME_TOLERANCE[fmt]
    # negative control: the same comparison sees other images' probabilities
    assert np.abs(theirs - ours[::-1]).max() > RUNTIME_TOLERANCE[fmt]
    split = json.loads((run / "split.json").read_text())
    assert (folder / "labels.txt").read_text().splitlines() == split["class_names"] and len(split["class_names"]) == 3
    steps = json.loads((folder / "preprocessing.json").read_text())
    assert steps["image_size"] == [16, 16] and steps["input"]["dtype"] == "uint8" and steps["resize"]["method"] == \
        "resize"
    record = json.loads((folder / "export.json").read_text())
    assert record["parity"]["samples"] == len(split["val"]) and record["parity"]["passed"]
    assert 0 <= record["parity"]["max_abs_difference"] <= RUNTIME_TOLERANCE[fmt] == record["parity"]["tolerance"]
    assert record["path"] == str(folder / WRITTEN[fmt]) and record["sizes"]["export_bytes"] > 1000
    assert f"{fmt}: {len(split['val'])} validation samples, largest difference" in result.stdout
    assert not list(folder.parent.glob(".*tmp"))  # the staging folder is gone


@pytest.mark.slow
def test_a_difference_above_the_tolerance_fails_and_publishes_nothing(exported):
    strict, root = exported["strict"], exported["root"]
    assert strict.returncode == 1 and "above export.tolerance=0 " in strict.stdout, strict.stdout[-2000:]
    assert not (root / "strict").exists()
    (log_dir,) = [p for p in (exported["run"] / "export").iterdir() if str(p) in strict.stdout]
    record = json.loads((log_dir / "export.json").read_text())
    assert not record["parity"]["passed"] and record["parity"]["max_abs_difference"] > 0
    # negative control: the same format at its own tolerance passes (the fixture's litert export)
    assert exported["litert"].returncode == 0


@pytest.mark.slow
def test_a_checkpoint_and_a_sample_count_are_chosen(exported):
    last = exported["last"]
    assert last.returncode == 0, last.stdout[-3000:]
    record = json.loads((exported["root"] / "last" / "export.json").read_text())
    assert "/checkpoints/step-" in record["model"] and record["parity"]["samples"] == 2
    assert json.loads((exported["run"] / "export" / "onnx" / "export.json").read_text())["model"].endswith(
        "run/model.keras")  # negative control: without checkpoint=, the run's model.keras


@pytest.mark.slow
def test_refusals_are_one_paragraph_and_leave_no_folder(exported):
    bad, no_run, no_model = exported["bad_format"], exported["no_run"], exported["no_model"]
    assert bad.returncode == 2 and "`export.format` = 'keras' is not allowed: tf_saved_model, onnx, litert" in \
        bad.stdout
    assert no_run.returncode != 0 and "nowhere" in no_run.stdout
    assert no_model.returncode == 1 and "model.keras cannot be used: it is missing" in no_model.stdout
    assert not (exported["root"] / "without_model" / "export").exists()


BLOCKED = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tf2onnx":
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Blocked())
from app.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_missing_extra_is_named(exported):
    run = exported["run"]
    result = subprocess.run([sys.executable, "-c", BLOCKED, "export", f"resume={run}", "export.format=onnx"],
                            capture_output=True, text=True, cwd=exported["root"], timeout=300)
    assert result.returncode == 2 and "export.format=onnx needs tf2onnx, not installed" in result.stderr
    assert "pip install -e '.[export]'" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert installed("tf2onnx") and not installed("no_such_module_here")  # negative control: present, found


def export_argv(run: Path, *args: str) -> list[str]:
    return ["export", f"resume={run}", "export.format=onnx", "export.samples=2", "queue.workers=0", *args]


def app_export(run: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m app export` on `run`, as a user types it: its own process, in the folder that
    trained it (where its synthetic data is)."""
    return subprocess.run([sys.executable, "-m", "app", *export_argv(run, *args)], capture_output=True, text=True,
                          cwd=run.parent, timeout=600)


def tree(path: Path) -> dict[str, bytes | None]:
    """Every file and folder at or under `path`, with each file's bytes."""
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


def refused_alone(result: subprocess.CompletedProcess, out: Path) -> str:
    """The refusal's one paragraph, once it is one, exit status 2, naming export.out and `out`."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "written:" not in result.stdout
    assert f"config key `export.out` = '{out}' is not allowed" in result.stderr
    return result.stderr


@pytest.mark.slow
def test_the_run_itself_as_export_out_is_refused_and_kept_even_with_overwrite(exported):
    run, root = exported["run"], exported["root"]
    before = tree(run)
    itself, forced, above, inside = spawn_one_process_for(  # one process: each refused before TensorFlow loads
        export_argv(run, f"export.out={run}"), export_argv(run, f"export.out={run}", "overwrite=true"),
        export_argv(run, f"export.out={root}", "overwrite=true"),
        export_argv(run, f"export.out={run / 'checkpoints'}", "overwrite=true"), cwd=root)
    for result in (itself, forced):
        said = refused_alone(result, run)
        assert f"{run} is the run being exported, which the export would replace. Give another export.out or " \
               f"leave it out to write {run / 'export' / 'onnx'}." in said
    assert tree(run) == before  # its checkpoints, metrics.csv, model.keras, logs: all there, unchanged
    # the folder above it holds the run, its checkpoints/ are inside it: refused too, and the advice
    # leaves overwrite out (moving checkpoints/ aside would leave a run that cannot resume)
    said = refused_alone(above, root)
    assert f"holds the run being exported ({run})" in said and "overwrite=true" not in said
    said = refused_alone(inside, run / "checkpoints")
    assert f"is inside the run being exported ({run})" in said and "overwrite=true" not in said
    assert tree(run) == before
    # negative control: export.out left out, as the advice says, exports (the fixture's onnx export)
    assert exported["onnx"].returncode == 0 and (run / "export" / "onnx" / "export.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_users_folder_or_file_is_refused_and_overwrite_moves_it_aside(exported, kind):
    user = exported["users"][kind]  # refused in a process of its own, then exported over in the fixture's
    out, before = user.out, user.before
    said = refused_alone(user.refused, out)
    what = "is a folder holding other files (important.txt)" if kind == "folder" else "is a file"
    assert f"{out} {what}, which the export would replace" in said
    assert "or add overwrite=true to move it to mine.old (nothing is deleted) and export there." in said
    assert user.after == before and user.beside == ["mine"]  # nothing moved or left
    # the advice followed
    moved = exported[f"moved_{kind}"]
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert f"overwrite=true: what was in {out} moved to {out.parent / 'mine.old'} (nothing was deleted)" in \
        moved.stdout + moved.stderr
    assert tree(out.parent / "mine.old") == before  # what was there, whole, under its new name
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "labels.txt", "model.onnx", "preprocessing.json"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["mine", "mine.old"]


@pytest.mark.slow
def test_an_earlier_export_is_replaced_but_not_one_holding_a_file_of_the_users(exported):
    out, earlier, replaced = exported["earlier_out"], exported["earlier"], exported["replaced"]
    # the fixture's onnx export there, then tf_saved_model's over it
    assert earlier.returncode == 0 and replaced.returncode == 0, (earlier.stderr[-3000:], replaced.stderr[-3000:])
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "labels.txt", "preprocessing.json", "saved_model"]
    assert json.loads((out / "export.json").read_text())["format"] == "tf_saved_model"
    assert [p.name for p in out.parent.iterdir()] == ["earlier"]  # no .old, no hidden leftover
    # negative control: a file of the user's beside an export makes it no longer the export's alone
    (out / "notes.txt").write_text("mine")
    before = tree(out)
    said = refused_alone(app_export(exported["run"], f"export.out={out}"), out)
    assert f"{out} holds an earlier export and other files (notes.txt)" in said and tree(out) == before


def test_a_failed_publish_puts_the_earlier_export_back(tmp_path, monkeypatch):
    from app.runs import export_folder as export

    out, staging = tmp_path / "out", tmp_path / ".out.tmp"
    for folder, fmt in ((out, "onnx"), (staging, "litert")):
        folder.mkdir()
        (folder / "export.json").write_text(json.dumps({"format": fmt}))

    def failing(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export.os, "replace", failing)
    with pytest.raises(OSError):
        export.publish_moving_aside(staging, out)
    assert json.loads((out / "export.json").read_text())["format"] == "onnx" and staging.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.tmp", "out"]
    monkeypatch.undo()  # negative control: the rename that works replaces it and deletes only the earlier one
    export.publish_moving_aside(staging, out)
    assert json.loads((out / "export.json").read_text())["format"] == "litert"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
