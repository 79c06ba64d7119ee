"""Sweeps beyond the basic launcher: parallel jobs with joblib, an Optuna search, the SLURM config."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from app.data.synthetic import dataset_dir_name

TINY = ["data.num_images=48", "data.source_size=96", "data.num_classes=3", "data.image_size=[32,32]",
        "data.batch_size=4", "model.widths=[8]", "trainer.epochs=1"]


def app(*args, cwd):
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_joblib_runs_jobs_in_parallel_on_one_dataset(tmp_path):
    result = app("train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY, "queue.workers=1,2",
                 "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1"):
        summary = json.loads((tmp_path / "sweep" / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["isolation"] == "clean"
    # both jobs asked for the dataset (and its test split) at once: each was generated once, and no half
    # copy is left
    made = sorted(d.name for d in (tmp_path / "datasets" / "synthetic").iterdir())
    assert made == [dataset_dir_name(48, 96, 3, 0), f"{dataset_dir_name(48, 96, 3, 0)}-test12"]


@pytest.mark.slow
def test_optuna_search_returns_the_best_validation_accuracy(tmp_path):
    result = app("train", "-m", "hparams_search=lr_optuna", "hydra.sweeper.n_trials=2", *TINY,
                 "hydra.sweep.dir=search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = yaml.safe_load((tmp_path / "search" / "optimization_results.yaml").read_text())
    trials = [json.loads((tmp_path / "search" / j / "summary.json").read_text()) for j in ("0", "1")]
    assert found["best_value"] == max(t["val_accuracy"] for t in trials)
    lrs = {o for t in trials for o in t["overrides"] if o.startswith("optimizer.learning_rate=")}
    assert len(lrs) == 2  # two different learning rates were tried
    assert 1e-4 <= found["best_params"]["optimizer.learning_rate"] <= 1e-2


@pytest.mark.slow
def test_slurm_launcher_config_composes(tmp_path):
    result = app("train", "hydra/launcher=slurm", "--cfg", "hydra", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    launcher = yaml.safe_load(result.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("SlurmLauncher") and launcher["gpus_per_node"] == 1
