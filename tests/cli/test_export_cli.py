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
    trained = subprocess.run([sys.executable, "-m", "app", "train", *TINY], capture_output=True, text=True,
                             cwd=root, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    run = root / "run"
    shutil.copytree(run, root / "without_model", ignore=shutil.ignore_patterns("model.keras", "export"))
    commands = {"tf_saved_model": ["export", f"resume={run}"],
                "onnx": ["export", f"resume={run}", "export.format=onnx"],
                "litert": ["export", f"resume={run}", "export.format=litert"],
                "strict": ["export", f"resume={run}", "export.format=litert", "export.tolerance=0",
                           f"export.out={root / 'strict'}"],
                "last": ["export", f"resume={run}", "checkpoint=last", "export.format=onnx", "export.samples=2",
                         f"export.out={root / 'last'}"],
                "bad_format": ["export", f"resume={run}", "export.format=keras"],
                "no_run": ["export", f"resume={root / 'nowhere'}"],
                "no_model": ["export", f"resume={root / 'without_model'}"]}
    done = spawn_one_process_for(*[[*argv, "queue.workers=0"] for argv in commands.values()], cwd=root)
    return {"root": root, "run": run, **dict(zip(commands, done, strict=True))}


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
