"""app/runs/sweeps.py: `train resume=<sweep dir>` rewritten as the sweep's own command line,
what each of its jobs does, and the locks that keep a live sweep from being resumed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from app.cli.argv import claim_and_rewrite_argv
from app.errors import ConfigError, DataError
from app.runs import sweeps
from app.runs.rundir import RunInUseError, _held, release_lock
from app.runs.saved import SAFE_PREFIXES

TASK = ["data.num_images=24", "queue.max_size=1,2", "trainer.epochs=2", "data.image_size=[32,32]"]
OWN = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=S",
       "hydra.sweep.subdir=job${hydra.job.num}", "hydra.mode=MULTIRUN"]


def recorded_sweep(folder: Path, task=TASK, own=OWN, sweeper=sweeps.BASIC_SWEEPER) -> Path:
    """A sweep's folder as Hydra leaves it: multirun.yaml (what matters of it) and a job folder."""
    (folder / "0").mkdir(parents=True)
    OmegaConf.save({"hydra": {"sweeper": {"_target_": sweeper}, "overrides": {"task": task, "hydra": own}}},
                   folder / "multirun.yaml")
    return folder


def test_a_sweeps_folder_becomes_the_sweeps_own_command_line_into_that_folder(tmp_path):
    sweep = recorded_sweep(tmp_path / "S")
    argv = claim_and_rewrite_argv([f"resume={sweep}", "trainer.epochs=3", "queue.workers=1", "hydra.launcher.n_jobs=1"],
                        tmp_path / "outputs")
    assert argv == ["-m", "data.num_images=24", "queue.max_size=1,2", "trainer.epochs=3", "data.image_size=[32,32]",
                    "queue.workers=1", "hydra/launcher=joblib", "hydra.sweep.subdir=job${hydra.job.num}",
                    "hydra.launcher.n_jobs=1",
                    f"hydra.sweep.dir='{sweep.resolve()}'", "hydra.output_subdir=${app.unless_resumed:.hydra}",
                    "hydra.callbacks.sweep.resuming=true"]
    assert all(o.input_line for o in OverridesParser.create().parse_overrides(argv[1:]))  # Hydra's grammar
    assert not (tmp_path / "outputs").exists()  # no directory of its own claimed
    # nothing added: the sweep's line as it was
    plain = claim_and_rewrite_argv([f"resume={sweep}"], tmp_path / "outputs")
    assert plain[1:5] == TASK
    # negative control: a run's folder is resumed alone, as before
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    single = claim_and_rewrite_argv([f"resume={tmp_path / 'run'}"], tmp_path / "outputs")
    assert "-m" not in single and single[-1] == "hydra.output_subdir=null"
    release_lock(tmp_path / "run")


def test_a_resumed_sweep_resumed_again_keeps_its_first_lines(tmp_path):
    resumed = claim_and_rewrite_argv([f"resume={recorded_sweep(tmp_path / 'S')}", "queue.workers=1"],
                                     tmp_path / "outputs")
    hydra_part = [a for a in resumed[1:] if a.startswith("hydra")] + ["hydra.mode=MULTIRUN"]
    again = recorded_sweep(tmp_path / "T", task=[a for a in resumed[1:] if not a.startswith("hydra")], own=hydra_part)
    argv = claim_and_rewrite_argv([f"resume={again}"], tmp_path / "outputs")
    assert argv.count("hydra.output_subdir=${app.unless_resumed:.hydra}") == 1 and "queue.workers=1" in argv
    assert f"hydra.sweep.dir='{again.resolve()}'" in argv and f"hydra.sweep.dir='{tmp_path / 'S'}'" not in argv


@pytest.mark.parametrize(("given", "says"), [
    (["data.batch_size=8"], "`data.batch_size` cannot change for a run that exists"),
    (["queue.max_size=3"], "the sweep gives each job its own (queue.max_size=1,2)"),
    (["queue.workers=1,2"], "not a sweep of its own"),
    (["hydra.sweep.dir=elsewhere"], "the sweep's folder and sweeper decide which job is which"),
    (["hydra/sweeper=optuna"], "the sweep's folder and sweeper decide which job is which"),
    (["overwrite=true"], "false with `resume`"),
])
def test_what_a_sweeps_resume_may_not_change_is_refused(tmp_path, given, says):
    sweep = recorded_sweep(tmp_path / "S")
    with pytest.raises(ConfigError, match=f".*{says}.*".replace("(", r"\(").replace(")", r"\)")):
        claim_and_rewrite_argv([f"resume={sweep}", *given], tmp_path / "outputs")
    # negative control: a safe key
    claim_and_rewrite_argv([f"resume={sweep}", "queue.prefetch=1"], tmp_path / "outputs")


def test_a_search_whose_trials_depend_on_earlier_ones_is_refused(tmp_path):
    search = recorded_sweep(tmp_path / "S", sweeper="hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")
    with pytest.raises(ConfigError, match="run by OptunaSweeper, which picks each job's settings from the results") \
            as refused:
        claim_and_rewrite_argv([f"resume={search}"], tmp_path / "outputs")
    assert f"resume={search.resolve()}/<job>" in str(refused.value)


def test_a_damaged_record_and_a_sweep_given_to_evaluate_or_with_m_are_refused(tmp_path):
    sweep = recorded_sweep(tmp_path / "S")
    (sweep / "3" / "checkpoints").mkdir(parents=True)
    for word in ("evaluate", "predict"):
        with pytest.raises(ConfigError, match=f"works on one run. Give a job's folder, e.g. python -m app {word} "
                                              f"resume={sweep.resolve()}/3"):
            claim_and_rewrite_argv([f"resume={sweep}"], tmp_path / "outputs", word=word)
    # -m is the sweep's anyway
    assert claim_and_rewrite_argv([f"resume={sweep}", "-m"], tmp_path / "outputs")[0] == "-m"
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="give the sweep's folder to finish every job of a sweep"):
        claim_and_rewrite_argv([f"resume={tmp_path / 'run'}", "-m"], tmp_path / "outputs")
    (sweep / "multirun.yaml").write_text("hydra: [unclosed")
    with pytest.raises(DataError, match="multirun.yaml cannot be read .*resume each job alone"):
        claim_and_rewrite_argv([f"resume={sweep}"], tmp_path / "outputs")


def holding(folder: Path) -> subprocess.Popen:
    """Another process that holds `folder`'s lock until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from app.runs.rundir import hold_lock; "
         "hold_lock(sys.argv[1], 'python -m app train -m'); print('held', flush=True); sys.stdin.read()",
         str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("locked", [".", "0"])
def test_a_live_sweep_or_a_job_trained_alone_is_never_resumed_beside_it(tmp_path, locked):
    sweep = recorded_sweep(tmp_path / "S")
    holder = holding(sweep / locked)
    try:
        with pytest.raises(RunInUseError, match=r"is in use: process \d+ \(python -m app train -m\)"):
            claim_and_rewrite_argv([f"resume={sweep}"], tmp_path / "outputs")
    finally:
        holder.stdin.close()
        holder.wait()
    before = (sweep / locked / ".lock").stat().st_mtime_ns
    claim_and_rewrite_argv([f"resume={sweep}"], tmp_path / "outputs")  # negative control: once it ended, it resumes
    assert (sweep / locked / ".lock").stat().st_mtime_ns == before  # the check only read the lock


def test_the_sweep_lock_is_held_from_the_sweeps_start_to_its_end(tmp_path):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "S")}}})
    lock = sweeps.SweepLock()
    lock.on_multirun_start(config)
    assert (tmp_path / "S").resolve() in _held and (tmp_path / "S" / ".lock").read_text().endswith("train -m\n")
    lock.on_multirun_end(config)
    assert (tmp_path / "S").resolve() not in _held and (tmp_path / "S" / ".lock").read_text() == ""


def job(folder: Path, status: str, overrides: list[str], *, checkpoint=True, epochs=2) -> Path:
    """A job's folder: its summary.json, and a checkpoint of a run set to `epochs` epochs."""
    folder.mkdir(parents=True)
    if checkpoint:
        (folder / "checkpoints" / "step-00000004").mkdir(parents=True)
        (folder / "checkpoints" / "step-00000004" / "state.json").write_text(
            json.dumps({"config": {"trainer": {"epochs": epochs}}}))
        (folder / "metrics.csv").write_text("epoch\n1\n")
    (folder / "summary.json").write_text(json.dumps({"status": status, "overrides": overrides, "val_accuracy": 0.5}))
    return folder


def test_each_job_of_a_resumed_sweep_is_done_resumed_or_started(tmp_path):
    mine, safe = ["queue.max_size=1", "trainer.epochs=2", "seed=3"], SAFE_PREFIXES
    done = job(tmp_path / "0", "completed", mine)
    assert sweeps.job_step(done, mine, epochs=2, safe=safe) == sweeps.Step("done", monitored=("val_accuracy", 0.5))
    added = [*mine, "queue.workers=1"]  # what a resume may add leaves a completed run done
    assert sweeps.job_step(done, added, epochs=2, safe=safe).action == "done"
    longer = ["queue.max_size=1", "trainer.epochs=4", "seed=3"]  # negative control: more epochs go on from it
    assert sweeps.job_step(done, longer, epochs=4, safe=safe) == \
        sweeps.Step("resume", ["queue.max_size=1", "trainer.epochs=4"])
    early = job(tmp_path / "early", "completed", mine, epochs=4)  # stopped early (EarlyStopping) of 4: done
    assert sweeps.job_step(early, longer, epochs=4, safe=safe).action == "done"
    for status in ("running", "interrupted", "failed"):  # stopped after a checkpoint: resumed in its folder
        stopped = job(tmp_path / status, status, mine)
        assert sweeps.job_step(stopped, added, epochs=2, safe=safe) == \
            sweeps.Step("resume", ["queue.max_size=1", "trainer.epochs=2", "queue.workers=1"])
    never = tmp_path / "never"  # Hydra made its folder, nothing more
    assert sweeps.job_step(never, mine, epochs=2, safe=safe) == sweeps.Step("start", mine)
    first = job(tmp_path / "first", "interrupted", mine, checkpoint=False)  # stopped before its first checkpoint
    assert sweeps.job_step(first, mine, epochs=2, safe=safe).action == "start"
    other = job(tmp_path / "other", "completed", ["queue.max_size=1", "trainer.epochs=2", "seed=4"])
    with pytest.raises(ConfigError, match="holds a run of queue.max_size=1 trainer.epochs=2 seed=4, where job other"):
        sweeps.job_step(other, mine, epochs=2, safe=safe)
    lost = job(tmp_path / "lost", "interrupted", mine)
    shutil.rmtree(lost / "checkpoints")
    with pytest.raises(ConfigError, match="checkpoints/ are gone"):
        sweeps.job_step(lost, mine, epochs=2, safe=safe)


def test_a_job_that_holds_a_run_keeps_the_record_of_its_first_start(tmp_path):
    job(tmp_path / "run", "interrupted", [])
    config = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path / "run")}}})
    assert sweeps._unless_resumed(".hydra", config) is None  # Hydra writes no .hydra/ over the first start's
    config.hydra.runtime.output_dir = str(tmp_path / "new")  # negative control: a job that starts gets its own
    assert sweeps._unless_resumed(".hydra", config) == ".hydra"
    resolved = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path / "run")},
                                           "output_subdir": "${app.unless_resumed:.hydra}"}})
    assert resolved.hydra.output_subdir is None  # registered under the name the command line gives


def test_a_new_sweep_into_a_sweeps_folder_is_told_to_resume_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = recorded_sweep(tmp_path / "S")
    # no run there yet
    assert claim_and_rewrite_argv(["-m", "seed=1,2", "hydra.sweep.dir=S"])[-1] == "hydra.sweep.dir=S"
    (sweep / "0" / "metrics.csv").write_text("epoch\n1\n")
    with pytest.raises(ConfigError, match=r"S holds a run already .* Continue it with `python -m app train "
                                          r"resume=S` \(every job of the sweep, each in its own folder\)"):
        claim_and_rewrite_argv(["-m", "seed=1,2", "hydra.sweep.dir=S"])
