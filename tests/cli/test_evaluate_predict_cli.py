"""`evaluate` and `predict` on a real training run, through the real CLI. The run and the commands that need no
process of their own share one kept for the module (tests/docs_runner.py's OneProcess): TensorFlow loads once;
those that check what a terminal shows, or signal the process, run in their own."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from docs_runner import OneProcess, spawn_one_process_for
from PIL import Image

TINY = ["data.num_images=36", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
        "data.batch_size=4", "model.widths=[8,16]", "trainer.epochs=2", "hydra.run.dir=run"]


def app(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def one_process():
    with OneProcess() as one_process:
        yield one_process


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_process) -> Path:
    root = tmp_path_factory.mktemp("evaluate")
    result = one_process("train", *TINY, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run"


GARBAGE = b"\xff\xfe\x00 garbage\n"


@pytest.fixture(scope="module")
def commands(run, one_process) -> SimpleNamespace:
    """The commands of the tests below that need no process of their own, one after another in the
    module's process, on the run and on copies of it made first:
    `budget` and `logger` for a refused resume each, `garbage` with bytes appended to its metrics.csv,
    `damaged` with model.keras cut in half, `piped` predicting a folder that holds a pipe and a link to a device."""
    root = run.parent
    copies = SimpleNamespace(**{name: root / name for name in ("budget", "logger", "garbage", "damaged", "piped")})
    for copy in vars(copies).values():
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("predict"))  # earlier tests' predictions
    with open(copies.garbage / "metrics.csv", "ab") as f:
        f.write(GARBAGE)
    whole = (copies.damaged / "model.keras").read_bytes()
    (root / "whole.keras").write_bytes(whole)
    (copies.damaged / "model.keras").write_bytes(whole[: len(whole) // 2])
    image = root / "image.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    (root / "self.jpg").symlink_to("self.jpg")  # a link in a loop, given as the input
    (root / "odd").mkdir()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(root / "odd" / "image.png")
    os.mkfifo(root / "odd" / "pipe.jpg")  # read, it would wait for a writer
    (root / "odd" / "device.jpg").symlink_to("/dev/urandom")  # read, it would never end
    kept = ("train.log", ".lock")
    before = {name: tree(getattr(copies, name), but=kept) for name in ("budget", "logger", "garbage")}
    before["evaluate"] = set((run / "evaluate").iterdir()) if (run / "evaluate").exists() else set()
    names = ["best", "wrong", "test", "no_input", "looped", "budget", "logger", "metrics", "damaged_predict",
             "damaged_resume", "odd"]
    done = [one_process(*argv, cwd=root) for argv in (
        ["evaluate", f"resume={run}", "checkpoint=best", "queue.workers=1"],
        ["evaluate", f"resume={run}", "checkpoint=step-99999999"],
        ["evaluate", f"resume={run}", "split=test", "queue.workers=1"],
        ["predict", f"resume={run}", f"input={root / 'none'}"],
        ["predict", f"resume={run}", f"input={root / 'self.jpg'}"],
        ["train", f"resume={copies.budget}", "queue.memory_budget_mb=50"],
        ["train", f"resume={copies.logger}", "logger.mlflow.tracking_uri=sqlite:///x.db"],
        ["train", f"resume={copies.garbage}", "trainer.epochs=3"],
        ["predict", f"resume={copies.damaged}", f"input={image}"],
        ["train", f"resume={copies.damaged}"],
        ["predict", f"resume={copies.piped}", f"input={root / 'odd'}"])]
    evaluated = set((run / "evaluate").iterdir()) - before["evaluate"]
    return SimpleNamespace(root=root, copies=copies, before=before, evaluated=evaluated,
                           **dict(zip(names, done, strict=True)))


NATIVE_NOISE = ("absl::InitializeLog", "oneDNN custom operations", "cuda drivers", "cuInit")


@pytest.mark.slow
def test_evaluate_equals_the_last_validation_row(run):
    before = set((run / "evaluate").iterdir()) if (run / "evaluate").exists() else set()
    result = app("evaluate", f"resume={run}", "queue.workers=1", cwd=run.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    (out,) = set((run / "evaluate").iterdir()) - before
    # TensorFlow's native start-up lines go to the command's log, not the screen
    assert not [n for n in NATIVE_NOISE if n in result.stderr + result.stdout]
    assert "oneDNN custom operations" in (out / "evaluate.log").read_text()
    evaluation = json.loads((out / "evaluation.json").read_text())
    last = list(csv.DictReader((run / "metrics.csv").open()))[-1]
    assert evaluation["loss"] == pytest.approx(float(last["val_loss"]), rel=1e-6)
    assert evaluation["accuracy"] == pytest.approx(float(last["val_accuracy"]), rel=1e-6)
    confusion = np.array(evaluation["confusion"])
    assert confusion.sum() == evaluation["samples"] == len(json.loads((run / "split.json").read_text())["val"])
    assert np.trace(confusion) / confusion.sum() == pytest.approx(evaluation["accuracy"], abs=1e-6)
    assert (out / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "true \\ predicted" in result.stdout


@pytest.mark.slow
def test_the_report_best_and_named_checkpoints(run, commands):
    result, wrong, test = commands.best, commands.wrong, commands.test  # one after another, in one process
    assert result.returncode == 0, result.stderr[-3000:]
    written = {json.loads((f / "evaluation.json").read_text())["split"]: f for f in commands.evaluated}
    assert sorted(written) == ["test", "val"]  # a refused evaluate leaves no folder (and log) behind
    out = written["val"]
    evaluation = json.loads((out / "evaluation.json").read_text())
    best = json.loads((run / "summary.json").read_text())["best"]
    assert Path(evaluation["checkpoint"]).name == best["checkpoint"]
    confusion = np.array(evaluation["confusion"])
    recall = np.diag(confusion) / confusion.sum(axis=1)
    assert [c["recall"] for c in evaluation["per_class"].values()] == pytest.approx(recall.tolist())
    assert evaluation["macro"]["recall"] == pytest.approx(recall.mean())
    assert evaluation["weighted"]["recall"] == pytest.approx(evaluation["accuracy"])  # support-weighted recall
    report = (out / "report.txt").read_text()
    assert "macro avg" in report and "weighted avg" in report and f"accuracy {evaluation['accuracy']:.4f}" in report
    mistakes = confusion.sum() - np.trace(confusion)
    assert (out / "misclassified.png").exists() == bool(mistakes)
    assert wrong.returncode == 2 and "`checkpoint`" in wrong.stderr and "step-0000" in wrong.stderr
    assert wrong.stderr.count("error:") == 1 and "Error executing job" not in wrong.stderr  # one paragraph, once
    assert test.returncode == 0 and "on 9 test samples" in test.stdout  # synthetic: a quarter of 36, generated apart


@pytest.mark.slow
def test_evaluate_refuses_other_data_settings_and_needs_a_run(run, tmp_path, one_process):
    changed = one_process("evaluate", f"resume={run}", "data.batch_size=2", cwd=tmp_path)
    missing = one_process("evaluate", cwd=tmp_path)  # a folder without runs
    assert changed.returncode == 2 and "data.batch_size" in changed.stderr
    assert missing.returncode == 2 and "resume" in missing.stderr


@pytest.mark.slow
def test_predict_matches_model_keras_in_plain_python(run, tmp_path):
    images = tmp_path / "images"
    (images / "sub").mkdir(parents=True)
    rng = np.random.default_rng(3)
    for i in range(7):  # already 32×32 PNGs: the loader's resize is the identity, no decode differences
        target = images / ("sub" if i % 2 else "") / f"{i}.png"
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(target)
    result = app("predict", f"resume={run}", f"input={images}", "queue.workers=2", cwd=run.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not [n for n in NATIVE_NOISE if n in result.stderr + result.stdout]
    (out,) = (run / "predict").iterdir()
    rows = list(csv.reader((out / "predictions.csv").open()))
    header, rows = rows[0], rows[1:]
    assert header[:2] == ["path", "class"] and header[-1] == "error" and len(rows) == 7
    assert all(r[-1] == "" for r in rows)
    script = f"""
import csv, json, sys, zipfile
import numpy as np, keras
from PIL import Image
model = keras.saving.load_model({str(run / 'model.keras')!r})
names = json.loads(zipfile.ZipFile({str(run / 'model.keras')!r}).read("app_metadata.json"))["class_names"]
rows = list(csv.reader(open({str(out / 'predictions.csv')!r})))[1:]
pixels = np.stack([np.asarray(Image.open(r[0]).convert("RGB")) for r in rows]).astype("float32")
probabilities = model.predict(pixels, verbose=0)
assert not any(m == "app" or m.startswith("app.") for m in sys.modules)
print(json.dumps({{"classes": [names[i] for i in probabilities.argmax(1)], "p": probabilities.tolist()}}))
"""
    plain = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    expected = json.loads(plain.stdout.strip().splitlines()[-1])
    assert [r[1] for r in rows] == expected["classes"]
    assert np.allclose(np.array([[float(v) for v in r[2:-1]] for r in rows]), expected["p"], atol=1e-5)


@pytest.mark.slow
def test_predict_gives_a_pipe_and_a_device_their_rows_with_the_error_never_opening_them(commands):
    result = commands.odd
    assert result.returncode == 0, result.stderr[-3000:]
    (out,) = (commands.copies.piped / "predict").iterdir()
    rows = {Path(row["path"]).name: row for row in csv.DictReader((out / "predictions.csv").open())}
    assert sorted(rows) == ["device.jpg", "image.png", "pipe.jpg"]
    assert rows["image.png"]["error"] == "" and rows["image.png"]["class"]  # negative control: an image predicted
    for name in ("device.jpg", "pipe.jpg"):
        assert "not a regular file" in rows[name]["error"] and rows[name]["class"] == "", rows[name]
    assert "2 of 3 files could not be read" in result.stdout


@pytest.mark.slow
def test_predict_names_a_missing_input(run, commands):
    result, looped, root = commands.no_input, commands.looped, commands.root
    assert result.returncode == 1 and str(root / "none") in result.stderr
    assert "give input=<an image file, or a folder of images" in result.stderr  # what to do about it
    assert not (run / "predict").exists() or any((run / "predict").iterdir())  # no empty folder left in the run
    assert looped.returncode == 1 and f"input {root / 'self.jpg'} is a symbolic link in a loop" in looped.stderr
    assert "a bug" not in looped.stderr


@pytest.mark.slow
@pytest.mark.exhaustive
def test_evaluate_on_a_folders_test_split(tmp_path):
    """data=folder: `evaluate split=test` is refused while there is no test split, and scores the
    test images alone once <path>/test/<class>/ is there beside train/ and val/; adding them does
    not change the data the run was trained on (they are outside its fingerprint).
    Covered in `make test` by: README's `evaluate split=test` (tests/cli/test_docs_commands.py) and
    the folder's test split, beside train/ and val/ or by data.test_path (tests/data/test_folder.py)."""
    rng = np.random.default_rng(0)

    def images(split: str, count: int) -> None:
        for label, name in enumerate(("dark", "light")):
            folder = tmp_path / "images" / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 100, (20, 20, 3)) + 150 * label
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.png")

    images("train", 8)
    images("val", 2)
    trained, missing, held = spawn_one_process_for(
        ["train", "data=folder", f"data.path={tmp_path / 'images'}", "data.image_size=[16,16]", "data.batch_size=4",
         "model.widths=[8]", "trainer.epochs=1", "queue.workers=0", "hydra.run.dir=run"],
        ["evaluate", f"resume={tmp_path / 'run'}", "split=test"],
        ["evaluate", f"resume={tmp_path / 'run'}", "split=test", f"data.test_path={tmp_path / 'images/val'}",
         "queue.workers=0"], cwd=tmp_path)  # the advice the second gets, followed as written
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert missing.returncode == 2 and "`split`" in missing.stderr and "data.test_path" in missing.stderr
    assert held.returncode == 0 and "on 4 test samples" in held.stdout, held.stderr[-3000:]
    images("test", 3)
    result = app("evaluate", f"resume={tmp_path / 'run'}", "split=test", "queue.workers=0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = sorted((tmp_path / "run" / "evaluate").iterdir())[-1]
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["split"] == "test" and evaluation["samples"] == 6 and "on 6 test samples" in result.stdout
    assert {c: v["support"] for c, v in evaluation["per_class"].items()} == {"dark": 3, "light": 3}


def tree(run: Path, but: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file of a run, by relative path, save those named in `but`."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in but}


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_second_train_into_a_runs_folder_is_refused_and_changes_nothing(run):
    """Covered in `make test` by: the same refusal of the CLI's argv step, before Hydra writes anything
    (tests/cli/test_resume_cli.py::test_a_folder_that_holds_a_run_is_refused_unless_overwrite_moves_it_aside)."""
    before = tree(run)
    again = app("train", *TINY, cwd=run.parent)  # the same hydra.run.dir
    assert again.returncode == 2 and "run holds a run already" in again.stderr, again.stderr[-3000:]
    assert "python -m app train resume=run" in again.stderr and "overwrite=true" in again.stderr
    assert tree(run) == before  # not even train.log


@pytest.mark.slow
def test_a_refused_resume_changes_nothing_in_the_run(commands):
    """A memory budget the run cannot fit, a logger's key the run has no logger for, and garbage
    appended to metrics.csv: each refused with the file or key at fault, and summary.json stays
    `completed`. The log records the refusal."""
    copies, before, kept = commands.copies, commands.before, ("train.log", ".lock")
    budget, logger, damaged, garbage = commands.budget, commands.logger, commands.metrics, copies.garbage
    assert budget.returncode == 2 and "`queue.memory_budget_mb` = 50" in budget.stderr, budget.stderr[-3000:]
    assert tree(copies.budget, but=kept) == before["budget"]
    assert logger.returncode == 2 and "a bug" not in logger.stderr, logger.stderr[-3000:]
    assert "`logger.mlflow.tracking_uri` names a logger this run does not have (it logs to: tensorboard)" in \
        logger.stderr
    assert tree(copies.logger, but=kept) == before["logger"] and not (commands.root / "x.db").exists()
    assert all(json.loads((copy / "summary.json").read_text())["status"] == "completed"
               for copy in (copies.budget, copies.logger))
    assert (garbage / "metrics.csv").read_bytes().endswith(GARBAGE)
    assert damaged.returncode == 1 and "unexpected" not in damaged.stderr, damaged.stderr[-3000:]
    assert f"{garbage / 'metrics.csv'} is damaged: line 4 holds bytes that are not text" in damaged.stderr
    assert tree(garbage, but=kept) == before["garbage"]
    assert "not resumed (the run is as it was)" in (garbage / "train.log").read_text()


@pytest.mark.slow
def test_a_damaged_model_keras_is_named_and_resume_writes_it_again(commands):
    import keras

    copy, refused, resumed = commands.copies.damaged, commands.damaged_predict, commands.damaged_resume
    assert refused.returncode == 1 and "unexpected" not in refused.stderr, refused.stderr[-3000:]
    assert f"{copy / 'model.keras'} cannot be used: it is damaged (BadZipFile" in refused.stderr
    assert f"python -m app train resume={copy}` writes it again" in refused.stderr
    assert not (copy / "predict").exists()  # a refused predict leaves no folder behind (train writes none)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = (copy / "train.log").read_text()
    assert f"2 epochs of {copy} are done already (trainer.epochs=2): `python -m app train resume={copy} " \
           "trainer.epochs=3` trains it further" in log
    best = json.loads((copy / "summary.json").read_text())["best"]["checkpoint"]
    assert f"written again from the best checkpoint, {best}" in log
    again, original = (keras.saving.load_model(p) for p in (copy / "model.keras", commands.root / "whole.keras"))
    assert all(np.array_equal(a, b) for a, b in zip(again.get_weights(), original.get_weights(), strict=True))


def _started_worker(child: psutil.Process) -> bool:
    """A loader worker that is running its own code: not multiprocessing's resource tracker, nor a
    child still starting (its command line not yet there) or gone already."""
    try:
        line = child.cmdline()
    except psutil.Error:
        return False
    return bool(line) and "resource_tracker" not in line[-1]


@pytest.mark.slow
def test_sigterm_stops_predict_as_ctrl_c_does(run, tmp_path):
    """A scheduler's SIGTERM: workers stopped, the ring freed, no half predictions.csv, exit 130."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "predict", ignore_errors=True)  # earlier tests' predictions
    images = tmp_path / "images"
    images.mkdir()
    for i in range(1500):  # enough that the loop is still running when the ring appears
        Image.fromarray(np.full((32, 32, 3), i % 256, np.uint8)).save(images / f"{i}.png")
    process = subprocess.Popen([sys.executable, "-m", "app", "predict", f"resume={copy}", f"input={images}",
                                "queue.workers=1"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not ([n for n in os.listdir("/dev/shm") if n.startswith(f"app-ring-{process.pid}-")]
               and [p for p in psutil.Process(process.pid).children() if _started_worker(p)]):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()[-3000:]
        time.sleep(0.01)  # the ring, and then the worker: the loader is up
    process.terminate()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "interrupted." in stderr.decode(), stderr.decode()[-3000:]
    assert "leaked" not in stderr.decode() and "Traceback" not in stderr.decode()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"app-ring-{process.pid}-")]
    assert not list(copy.rglob("predictions.csv")) and not (copy / "predict").exists()
