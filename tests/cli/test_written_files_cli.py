"""What the app writes, through the real CLI: every file it writes replaces its own path, never a symbolic
link's target (a resume's appended logs and tables, report's PNGs); a linked folder of a run and a run's folder
as report's --out are refused; a resume's keys of another data group and an emptied summary.json. Every command
runs in one process kept for the module (tests/docs_runner.py's OneProcess): TensorFlow loads once."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from docs_runner import OneProcess
from PIL import Image

TINY = ["data.num_images=24", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
        "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1", "queue.workers=1"]
APPENDED = ("train.log", "metrics.csv", "scalars.csv", "samples.csv")  # what a resume adds lines to


def refused(result: subprocess.CompletedProcess, *words: str) -> str:
    """The one-paragraph error of a refused command, checked to name `words` and not to be a bug."""
    assert result.returncode != 0 and "a bug" not in result.stderr, result.stderr[-2000:]
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and all(w in error for w in words), error
    return error


def link_to_a_copy(path: Path, elsewhere: Path) -> tuple[Path, bytes]:
    """`path` made a symbolic link to a file of the same bytes in `elsewhere`: (that file, its bytes)."""
    target = elsewhere / path.name
    shutil.move(path, target)
    path.symlink_to(target)
    return target, target.read_bytes()


@pytest.fixture(scope="module")
def app():
    """`python -m app <args>` in `cwd`, each command of the module in one process."""
    with OneProcess() as one_process:
        yield one_process


@pytest.fixture(scope="module")
def run(tmp_path_factory, app) -> Path:
    """One tiny run with every appended record: train.log, metrics.csv, scalars.csv (logger csv), samples.csv."""
    root = tmp_path_factory.mktemp("written")
    result = app("train", *TINY, "logger=[tensorboard,csv]", "trainer.record_samples=true", "hydra.run.dir=run",
                 cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert all((root / "run" / name).is_file() for name in APPENDED)
    return root / "run"


@pytest.fixture(scope="module")
def resumed(run, app) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """A copy of the run whose appended files are links to the user's files (train.log a hard link, the others
    symbolic), its summary.json emptied to `{}`, resumed for one more epoch: (the copy, each target and its bytes
    before, the resume)."""
    copy, elsewhere = run.parent / "resumed", run.parent / "the user's files"
    shutil.copytree(run, copy)
    elsewhere.mkdir()
    targets = dict(link_to_a_copy(copy / name, elsewhere) for name in APPENDED if name != "train.log")
    os.link(copy / "train.log", elsewhere / "train.log")  # one file, two names: the user's and the run's
    targets[elsewhere / "train.log"] = (copy / "train.log").read_bytes()
    (copy / "summary.json").write_text("{}", encoding="utf-8")
    return copy, targets, app("train", f"resume={copy}", "trainer.epochs=2", cwd=run.parent)


@pytest.mark.slow
def test_a_resume_appends_to_its_own_files_never_to_a_links_target(resumed):
    copy, targets, result = resumed
    assert result.returncode == 0, result.stderr[-3000:]
    for target, before in targets.items():
        assert target.read_bytes() == before, f"{target} was written through its link"
        own = copy / target.name
        assert own.is_file() and not own.is_symlink() and own.stat().st_nlink == 1, own
    assert [row["epoch"] for row in csv.DictReader((copy / "metrics.csv").open())] == ["1", "2"]  # history kept
    log = (copy / "train.log").read_bytes()
    assert log.startswith(targets[copy.parent / "the user's files" / "train.log"]) and b"epoch 2/2" in log


@pytest.mark.slow
def test_a_resume_over_an_emptied_summary_rebuilds_what_it_lacks(resumed):
    copy, _, result = resumed
    assert result.returncode == 0 and "KeyError" not in result.stderr, result.stderr[-3000:]
    log = (copy / "train.log").read_text(encoding="utf-8")
    assert f"{copy / 'summary.json'} lacks status" in log and "hardware" in log  # the file and what it lacked, named
    summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed" and summary["epochs_completed"] == 2 and summary["hardware"]["cpu_count"]


@pytest.mark.slow
def test_a_summary_that_is_not_an_object_is_refused_naming_it(run, app):
    copy = run.parent / "listed summary"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("tensorboard"))
    (copy / "summary.json").write_text("[1, 2]", encoding="utf-8")
    refused(app("train", f"resume={copy}", "trainer.epochs=2", cwd=run.parent), f"{copy / 'summary.json'}",
            "JSON object")
    assert (copy / "summary.json").read_text(encoding="utf-8") == "[1, 2]"


@pytest.mark.slow
def test_a_linked_tensorboard_folder_is_refused_and_its_target_kept(run, app):
    mine = run.parent / "my dashboards"
    (mine / "train").mkdir(parents=True)
    (mine / "train" / "notes.txt").write_text("keep me")
    fresh = run.parent / "fresh"
    fresh.mkdir()
    (fresh / "tensorboard").symlink_to(mine)
    refused(app("train", *TINY, f"hydra.run.dir={fresh}", cwd=run.parent), f"{fresh / 'tensorboard'}",
            "symbolic link")
    copy = run.parent / "linked"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("tensorboard"))
    (copy / "tensorboard").symlink_to(mine)
    error = refused(app("train", f"resume={copy}", "trainer.epochs=2", cwd=run.parent), f"{copy / 'tensorboard'}")
    assert [p.name for p in mine.rglob("*")] == ["train", "notes.txt"] and sorted(p.name for p in fresh.iterdir()) \
        == ["tensorboard"]
    assert (copy / "metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()  # the run left as it was
    # the command the error gives puts the folder in the link's place: the run keeps what the link showed
    subprocess.run(error.split("keeps the run whole: ", 1)[1].rsplit(", then run", 1)[0], shell=True, check=True)
    assert not (copy / "tensorboard").is_symlink()
    assert (copy / "tensorboard" / "train" / "notes.txt").read_text() == "keep me"


@pytest.mark.slow
def test_a_linked_logger_folder_or_a_log_linked_to_a_folder_is_refused_before_anything_runs(run, app):
    mine = run.parent / "my events"
    mine.mkdir()
    copy = run.parent / "linked logger"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "tensorboard" / "train")
    (copy / "tensorboard" / "train").symlink_to(mine)
    refused(app("train", f"resume={copy}", "trainer.epochs=2", cwd=run.parent), f"{copy / 'tensorboard' / 'train'}",
            "symbolic link")
    assert list(mine.iterdir()) == [] and (copy / "tensorboard" / "train").is_symlink()
    (copy / "tensorboard" / "train").unlink()
    (copy / "train.log").unlink()
    (copy / "train.log").symlink_to(mine)
    refused(app("train", f"resume={copy}", "trainer.epochs=2", cwd=run.parent), f"{copy / 'train.log'}",
            "symbolic link to the folder")
    assert list(mine.iterdir()) == [] and (copy / "metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()


@pytest.mark.slow
def test_report_replaces_a_linked_png_and_never_writes_into_a_run(run, app):
    out = run.parent / "report"
    assert app("report", str(run), "--out", str(out), cwd=run.parent).returncode == 0
    png = sorted(out.glob("report_*.png"))[0]
    photo = run.parent / "holiday.jpg"
    Image.new("RGB", (16, 16), "orange").save(photo, quality=90)
    before = photo.read_bytes()
    png.unlink()
    png.symlink_to(photo)
    result = app("report", str(run), "--out", str(out), cwd=run.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert photo.read_bytes() == before and not png.is_symlink() and Image.open(png).format == "PNG"
    files = sorted(p.name for p in run.iterdir())
    for into in (run, run / "reports"):
        refused(app("report", str(run), "--out", str(into), cwd=run.parent), "never writes into", str(run))
    assert sorted(p.name for p in run.iterdir()) == files


@pytest.mark.slow
def test_a_resume_with_another_data_groups_key_is_told_it_cannot_change(run, app):
    for key in ("data.patches.level=1", "data.classes=[a,b,c]"):
        refused(app("train", f"resume={run}", key, cwd=run.parent), f"`{key.split('=')[0]}` cannot change for a "
                "run that exists")
    # negative control: a key no data group has is still no such key
    refused(app("train", f"resume={run}", "data.colour=1", cwd=run.parent), "`data.colour`", "no such key")


@pytest.mark.slow
def test_hydras_own_files_replace_their_links_in_a_run_a_sweep_and_a_sweeps_resume(tmp_path, app):
    refused_early = [*TINY, "trainer.epochs=0"]  # Hydra writes its files, then the run refuses its config
    mine = {name: tmp_path / f"my {name}.yaml" for name in ("config", "sweep", "job", "record")}
    for name, path in mine.items():
        path.write_text(f"the user's {name}\n")
    planted = {tmp_path / "run" / ".hydra" / "config.yaml": mine["config"],
               tmp_path / "sw" / "multirun.yaml": mine["sweep"], tmp_path / "sw" / "0" / ".hydra" / "hydra.yaml":
               mine["job"]}
    for link, target in planted.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    with open(tmp_path / "run" / ".hydra" / "config.yaml", "w") as f:  # negative control: a plain open, as Hydra's
        f.write("through the link\n")
    assert mine["config"].read_text() == "through the link\n"  # wrote into the target
    mine["config"].write_text("the user's config\n")
    refused(app("train", *refused_early, "hydra.run.dir=run", cwd=tmp_path), "trainer.epochs")
    refused(app("train", "-m", *refused_early, "model.widths=[8]", "hydra.sweep.dir=sw", cwd=tmp_path),
            "trainer.epochs")
    record = tmp_path / "sw" / "multirun.yaml"
    recorded = record.read_bytes()
    mine["record"].write_bytes(recorded)  # the sweep's record, now the user's file behind a link
    record.unlink()
    record.symlink_to(mine["record"])
    planted[record] = mine["record"]
    refused(app("train", "resume=sw", cwd=tmp_path), "trainer.epochs")  # its record read through the link first
    for link in planted:
        assert not link.is_symlink() and "trainer" in link.read_text(), link  # Hydra's file, written in place
    assert [mine[name].read_text() for name in ("config", "sweep", "job")] == [f"the user's {name}\n" for name in
                                                                                ("config", "sweep", "job")]
    assert mine["record"].read_bytes() == recorded  # the sweep's record behind the link, left as it was
