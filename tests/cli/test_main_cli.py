"""The command line's conventions (app/__main__.py): every command's --help, the `app` script,
and its bash completion, through real processes and a real bash (the commands that need no process of
their own, --help and the refusals, one after another in one: tests/docs_runner.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from docs_runner import spawn_one_process_for

BIN = Path(sys.executable).parent


def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=120, env={**os.environ, **(env or {})})


HELPED = ("train", "evaluate", "predict", "bench")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> SimpleNamespace:
    """Each command's --help and the refusals below with what follows their advice, in one folder; whether
    any made ./outputs."""
    cwd = tmp_path_factory.mktemp("one_process")
    commands = {**{command: [command, "--help"] for command in HELPED},
                "two_modes": ["train", "-m", "queue.max_size=1,2", "--cfg", "job"],
                "one_mode": ["train", "queue.max_size=1", "--cfg", "job"],
                "benchs_key": ["train", "data.batch_size=8", "bench.batches=2"],
                "in_bench": ["bench", "--cfg", "job", "bench.batches=2"]}
    done = spawn_one_process_for(*commands.values(), cwd=cwd)
    return SimpleNamespace(outputs=(cwd / "outputs").exists(), **dict(zip(commands, done, strict=True)))


@pytest.mark.slow
@pytest.mark.parametrize("command", HELPED)
def test_every_command_has_its_help(command, one_process):
    result = getattr(one_process, command)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{command} is powered by Hydra" in result.stdout and "== Configuration groups ==" in result.stdout
    assert "queue: default" in result.stdout
    assert not one_process.outputs  # help makes no run directory


def test_the_app_script_is_the_same_cli(tmp_path):
    script = BIN / "app"
    assert script.exists(), "pip install -e . installs the `app` script"
    result = run(str(script), "--help", cwd=tmp_path)
    assert result.returncode == 0 and "evaluate" in result.stdout and "app completion bash" in result.stdout
    assert run(str(script), "trian", cwd=tmp_path).returncode == 2


def complete(line: str, tmp_path: Path) -> list[str]:
    """What bash offers for `line` with the installed completion, as a user's shell would ask."""
    setup = run(str(BIN / "app"), "completion", "bash", cwd=tmp_path).stdout
    words = line.split(" ")
    script = (f"{setup}\nCOMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; "
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
              '_app_complete; printf "%s\\n" "${COMPREPLY[@]}"')
    result = run("bash", "-c", script, cwd=tmp_path, env={"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr[-2000:]
    return [w for w in result.stdout.splitlines() if w]


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_bash_completion_of_commands_and_overrides(tmp_path):
    assert complete("app tr", tmp_path) == ["train"]
    assert complete("app rep", tmp_path) == ["report"]  # every command, report too
    (tmp_path / "outputs").mkdir()
    assert complete("app report out", tmp_path) == ["outputs"]  # its arguments are folders
    assert "data=" in complete("app train da", tmp_path)  # the command word is not taken for an override
    assert "data=cifar" in complete("app train data=ci", tmp_path)
    assert "queue.max_size=" in complete("app evaluate queue.max", tmp_path)
    assert complete("app train zzz", tmp_path) == []  # negative control: nothing matches, nothing offered


def test_a_refused_predict_leaves_no_folder_in_a_run_elsewhere(tmp_path, monkeypatch):
    """A run outside the working directory: the claimed <run>/predict/<stamp> and the predict/
    made for it both go; the run's own folder and what it holds stay."""
    from app.__main__ import _delete_empty_claims
    from app.cli import argv as argv_step

    run, here = tmp_path / "run", tmp_path / "elsewhere"
    (run / "checkpoints").mkdir(parents=True)
    here.mkdir()
    monkeypatch.chdir(here)
    claimed = run / "predict" / "2026-01-01_00-00-00"
    claimed.mkdir(parents=True)
    (claimed / "predict.log").write_text("refused\n")
    monkeypatch.setattr(argv_step, "CLAIMED", [claimed])
    _delete_empty_claims("predict", failed=True)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints"]
    kept = run / "predict" / "2026-01-02_00-00-00"  # negative control: an earlier result stays, and so its folder
    kept.mkdir(parents=True)
    (kept / "predictions.csv").write_text("path\n")
    claimed.mkdir()
    _delete_empty_claims("predict", failed=True)
    assert sorted(p.name for p in (run / "predict").iterdir()) == ["2026-01-02_00-00-00"]


def test_two_hydra_modes_are_refused_naming_both(one_process):
    refused, followed = one_process.two_modes, one_process.one_mode
    assert refused.returncode == 2 and refused.stderr.startswith("error: --multirun and --cfg cannot be given "
                                                                 "together") and "a bug" not in refused.stderr
    assert followed.returncode == 0 and "max_size: 1" in followed.stdout  # the advice, followed
    assert not one_process.outputs


def test_the_old_spelling_of_a_group_choice_works_and_names_the_new_one(tmp_path):
    old = run(sys.executable, "-m", "app", "train", "scheduler.name=cosine", "--cfg", "job", cwd=tmp_path)
    assert old.returncode == 0 and "use `scheduler=cosine`" in old.stderr
    assert "_target_: app.training.schedules.cosine" in old.stdout and "warmup_epochs: 1.0" in old.stdout  # cosine.yaml
    new = run(sys.executable, "-m", "app", "train", "scheduler=cosine", "--cfg", "job", cwd=tmp_path)
    assert new.returncode == 0 and new.stdout == old.stdout and "deprecated" not in new.stderr  # negative control


def test_a_key_of_another_commands_config_is_refused_naming_that_command(one_process):
    """bench's and preview's groups are in their own commands' configs only: train given one is
    told which command takes it, before any folder is made; bench itself takes it."""
    refused, taken = one_process.benchs_key, one_process.in_bench
    assert refused.returncode == 2 and not one_process.outputs
    assert refused.stderr.startswith("error: config key `bench.batches` is read by `python -m app bench` only")
    assert refused.stderr.rstrip().endswith("python -m app bench bench.batches=2")
    assert taken.returncode == 0 and "batches: 2" in taken.stdout  # negative control: bench's own key
