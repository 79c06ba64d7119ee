"""`pip install .[jax]`: the JAX path through the real CLI without TensorFlow: train, resume, evaluate, predict,
preview and plan; `export`, which needs TensorFlow, says so, and exports that JAX run where TensorFlow is installed.
`make test` runs that flow in this install with TensorFlow made unimportable (tests/venvs.py's sitecustomize): no
module of the JAX path may import it, and the run reads the session's JAX machine probe. `make test-all` runs it in a
virtual environment holding every package of this one but TensorFlow (and what imports it), which measures a probe
of its own (two JAX processes: about a minute of the suite), and a sweep there too. (`bench` without TensorFlow:
tests/cli/test_bench_cli.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from docs_runner import spawn_one_process_for
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from venvs import env_hiding_tensorflow, venv_without

ROOT = Path(__file__).resolve().parents[2]
# What a `.[jax]` install lacks: TensorFlow, and the export tools that import it
HIDDEN = re.compile(r"^(tensorflow|tf2onnx)([-_.].*)?$", re.I)
# What neither extra brings: JAX too
NEITHER = re.compile(r"^(tensorflow|tf2onnx|jax|jaxlib)([-_.].*)?$", re.I)
# this project's editable install (make's): a wheel's takes its place
EDITABLE = re.compile(r"^(__editable__.*app.*|app-[\d.]+\.dist-info)$")
# no trainer.backend: `auto` is JAX where TensorFlow is not installed
TINY = ["data.num_images=24", "data.source_size=48", "data.num_classes=2",
        "data.image_size=[32,32]", "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1", "queue.workers=1"]


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    """A venv of everything but TensorFlow (the project's editable install included)."""
    venv = tmp_path_factory.mktemp("no-tensorflow") / "venv"
    venv_without(venv, HIDDEN)
    return str(venv / "bin" / "python")


def test_the_environment_has_everything_but_tensorflow(python):
    probe = "import importlib.util, jax, keras, app, hydra, albumentations; print(importlib.util.find_spec('{}'))"
    jax = {**os.environ, "KERAS_BACKEND": "jax"}
    without = subprocess.run([python, "-c", probe.format("tensorflow")], capture_output=True, text=True, env=jax)
    assert without.returncode == 0 and without.stdout.strip() == "None", without.stderr[-2000:]
    here = subprocess.run([sys.executable, "-c", probe.format("tensorflow")], capture_output=True, text=True, env=jax)
    assert "ModuleSpec" in here.stdout  # the control: this environment has it


@pytest.mark.slow
def test_with_neither_framework_train_names_both_extras_in_the_form_the_app_was_installed(tmp_path):
    """An editable checkout is told `pip install -e '.[...]'`; a wheel's install `pip install 'app[...]'`."""
    editable = tmp_path / "editable"
    venv_without(editable, NEITHER)
    wheel = tmp_path / "wheel"
    site = venv_without(wheel, re.compile(f"{NEITHER.pattern}|{EDITABLE.pattern}", re.I))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(site),
                    *map(str, (tmp_path / "dist").glob("app-*.whl"))], check=True, capture_output=True)
    forms = {editable: "pip install -e '.[{}]'", wheel: "pip install 'app[{}]'"}
    for venv, form in forms.items():
        refused = subprocess.run([str(venv / "bin" / "python"), "-m", "app", "train", *TINY],
                                 capture_output=True, text=True, cwd=tmp_path, timeout=120)
        said = refused.stderr
        assert refused.returncode == 2 and "config key `trainer.backend` = 'auto' is not allowed: TensorFlow or JAX, " \
            "and neither is installed" in said, said[-2000:]
        assert form.format("tensorflow") in said and form.format("jax") in said, said
        other = forms[wheel if venv == editable else editable]  # negative control: the other form is not given
        assert other.format("jax") not in said and len(said.strip().splitlines()) == 1


FLOW = [["train", *TINY, "logger=tensorboard", "tags=[tiny]", "hydra.run.dir=run"],
        ["train", "resume=run", "trainer.epochs=2"],
        ["evaluate", "resume=run"],
        ["predict", "resume=run", "input=datasets"],
        ["preview", *TINY, "preview.images=2", "preview.augmentations=2", "hydra.run.dir=preview"],
        ["plan", *TINY],
        ["export", "resume=run"]]


def assert_the_jax_flow_ran(runs: list, tmp_path: Path, tensorflow: str) -> None:
    """FLOW's commands ran on JAX (`export` refused), their files as TensorBoard's reader reads them, and the run
    exports where TensorFlow is installed. `tensorflow`: its version as summary.json records it."""
    *worked, export = runs
    for run in worked:
        assert run.returncode == 0, f"{run.args}: {run.stdout[-3000:]}"
    assert export.returncode != 0 and "export needs TensorFlow" in export.stdout, export.stdout[-2000:]

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["versions"]["tensorflow"] == tensorflow and summary["status"] == "completed"
    assert summary["backend"] == "jax"  # trainer.backend=auto, as the run used it (never `auto`)
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["1", "2"]  # the resumed run's second epoch
    train, top = (EventAccumulator(str(tmp_path / "run" / "tensorboard" / folder)).Reload() for folder in ("train", ""))
    # the dashboard, written with no TensorFlow: each plugin's summaries, read by TensorBoard's own reader
    assert {"step/loss", "epoch/loss"} <= set(train.PluginTagToContent("scalars"))
    assert set(train.PluginTagToContent("images")) == {"augmented"}
    assert set(train.PluginTagToContent("text")) == {"tags"}
    assert hparams_metadata.SESSION_START_INFO_TAG in top.Tags()["tensors"]
    assert list((tmp_path / "run" / "predict").glob("*/predictions.csv"))
    assert (tmp_path / "preview" / "preview.png").exists()

    # the JAX run exported where TensorFlow is installed: its model.keras loaded under TensorFlow
    exported, = spawn_one_process_for(["export", "resume=run", "export.samples=4"], cwd=tmp_path,
                                      env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert exported.returncode == 0, exported.stdout[-3000:]
    record = json.loads((tmp_path / "run" / "export" / "tf_saved_model" / "export.json").read_text())
    assert record["parity"]["passed"] and 1 <= record["parity"]["samples"] <= 4, record


@pytest.mark.slow
def test_train_resume_evaluate_predict_preview_and_plan_run_on_jax_where_tensorflow_cannot_be_imported(tmp_path):
    env = {**env_hiding_tensorflow(tmp_path / "hidden"), "KERAS_BACKEND": "jax"}
    finds = "import importlib.util; print(importlib.util.find_spec('tensorflow'))"
    hidden = subprocess.run([sys.executable, "-c", finds], capture_output=True, text=True, env=env, check=True)
    assert hidden.stdout.strip() == "None"  # the control, a ModuleSpec without the hook, is the environment test's
    assert_the_jax_flow_ran(spawn_one_process_for(*FLOW, cwd=tmp_path, env=env), tmp_path,
                            tensorflow=metadata.version("tensorflow"))


@pytest.mark.slow
@pytest.mark.exhaustive
def test_train_resume_evaluate_predict_preview_and_plan_run_on_jax(python, tmp_path):
    """Covered in `make test` by: the test above, the same flow with TensorFlow unimportable in this install."""
    runs = spawn_one_process_for(*FLOW, cwd=tmp_path, env={**os.environ, "KERAS_BACKEND": "jax"}, python=python)
    assert_the_jax_flow_ran(runs, tmp_path, tensorflow="not installed")


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_sweep_runs_its_job_in_a_fresh_process_on_jax(python, tmp_path):
    """Covered in `make test` by: sweeps on TensorFlow (README's, tests/cli/test_docs_commands.py)
    and the JAX commands above."""
    (sweep,) = spawn_one_process_for(["train", "-m", *TINY, "queue.max_size=2", "hydra.sweep.dir=sweep"],
                                     cwd=tmp_path, env={**os.environ, "KERAS_BACKEND": "jax"}, python=python)
    assert sweep.returncode == 0, sweep.stdout[-3000:]
    jobs = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert [json.loads(job.read_text())["status"] for job in jobs] == ["completed"]
    assert json.loads(jobs[0].read_text())["isolation"] == "clean"
