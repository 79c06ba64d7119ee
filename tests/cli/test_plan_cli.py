"""`python -m app plan` and the plan's use in `train`: the real CLI in a subprocess."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from docs_runner import spawn_one_process_for
from test_train_cli import TINY, app

from app.capacity.plan import MARGIN
from app.data.sources import synthetic

ONE_EPOCH = [o for o in TINY if not o.startswith("trainer.epochs=")] + ["trainer.epochs=1"]
NOISE = ("absl::InitializeLog", "oneDNN", "cuda drivers", "cuInit")  # TensorFlow's native start-up lines


def generated(cwd):
    """TINY's synthetic dataset where `train` in `cwd` would generate it: plan never does."""
    data = SimpleNamespace(num_images=24, source_size=96, num_classes=3, seed=0, num_test_images=None)
    for spec in synthetic.specs(data):
        synthetic.ensure_dataset(cwd / "datasets" / "synthetic", spec, progress=False)


@pytest.fixture(scope="module")
def promised(tmp_path_factory):
    """plan refused on missing data; then the data, plan, and one tiny run under the budget the plan
    just fits (with its margin)."""
    cwd = tmp_path_factory.mktemp("promise")
    refused, claimed = spawn_one_process_for(  # the second in a folder of its own under outputs/, which goes again
        ["plan", *ONE_EPOCH, "hydra.run.dir=refused"], ["plan", *ONE_EPOCH], cwd=cwd)
    wrote = (cwd / "datasets").exists()
    claimed.left = sorted(p.as_posix() for p in (cwd / "outputs").rglob("*"))
    generated(cwd)
    plan = app("plan", *ONE_EPOCH, "hydra.run.dir=plan", cwd=cwd)
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = json.loads((cwd / "plan" / "plan.json").read_text())["host_peak_mib"]
    budget = math.ceil((planned + 0.05) * (1 + MARGIN))  # plan.json rounds to 0.1 MiB: the plan at most this
    run = app("train", *ONE_EPOCH, f"queue.memory_budget_mb={budget}", "hydra.run.dir=run", cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return SimpleNamespace(cwd=cwd, refused=refused, claimed=claimed, wrote=wrote, plan=plan, planned=planned,
                           budget=budget, run=run)


@pytest.fixture(scope="module")
def after(promised):
    """The commands of the tests below that need no process of their own, one after another in one
    process (tests/docs_runner.py: TensorFlow loads once), in the folder of the run the plan admitted
    (TINY's data generated there: the same as ONE_EPOCH's)."""
    datasets = sorted(p.name for p in (promised.cwd / "datasets" / "synthetic").iterdir())
    names = ["resumed", "default", "printed", "roomy", "capped", "over_budget"]
    done = spawn_one_process_for(
        ["plan", f"resume={promised.cwd / 'run'}", "queue.workers=1", "hydra.run.dir=resumed"],
        ["plan", "hydra.run.dir=default"],
        ["plan", *TINY, "queue.memory_budget_mb=1", "hydra.run.dir=printed"],
        ["plan", *TINY, "queue.workers=auto", "queue.max_size=auto", "hydra.run.dir=roomy"],
        ["plan", *TINY, "queue.max_size=100000", "hydra.run.dir=capped"],
        ["train", *TINY, "queue.memory_budget_mb=300", "hydra.run.dir=over_budget"], cwd=promised.cwd)
    return SimpleNamespace(cwd=promised.cwd, datasets=datasets, **dict(zip(names, done, strict=True)))


@pytest.mark.slow
def test_the_run_keeps_the_plan_and_the_budget_that_admitted_it(promised):
    summary = json.loads((promised.cwd / "run" / "summary.json").read_text())
    measured = summary["peak_memory_mb"]
    assert summary["memory_plan"]["host_peak_mib"] == promised.planned  # train plans what plan printed
    assert abs(measured - promised.planned) <= 0.10 * measured, (promised.planned, measured)
    assert measured <= promised.budget
    for result in (promised.plan, promised.run):  # nothing of TensorFlow's start-up on the terminal
        assert not [line for line in result.stderr.splitlines() if any(n in line for n in NOISE)], result.stderr
    assert any(n in (promised.cwd / "run" / "train.log").read_text() for n in NOISE)  # negative control: logged


@pytest.mark.slow
def test_plan_never_writes_a_dataset_and_says_what_generates_it(promised):
    assert promised.refused.returncode != 0 and not promised.wrote
    assert "is not generated yet" in promised.refused.stderr and "python -m app train" in promised.refused.stderr
    assert "datasets/synthetic/v" in promised.refused.stderr
    # a refused plan in a folder it claimed leaves no folder that looks like a result
    assert promised.claimed.returncode == 1 and "is not generated yet" in promised.claimed.stderr
    assert promised.claimed.left == []
    assert (promised.cwd / "refused" / "plan.log").exists()  # negative control: a folder the user named stays


@pytest.mark.slow
def test_plan_resume_plans_the_runs_own_config(after):
    run_dir = after.cwd / "run"
    result, default = after.resumed, after.default
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads((after.cwd / "resumed" / "plan.json").read_text())
    trained = json.loads((run_dir / "summary.json").read_text())["memory_plan"]["host"]
    steps = next(k for k in trained if k.startswith("compiled train and test steps"))
    assert plan["host"][steps] == trained[steps]  # the run's model (model.widths=[8,16]), not the default
    assert "1 worker processes" in result.stdout  # with the overrides a resumed train takes
    assert sorted(p.name for p in (after.cwd / "datasets" / "synthetic").iterdir()) == after.datasets
    # negative control: without resume it is the default config, whose 1000 images are not there
    assert default.returncode != 0 and "not generated yet" in default.stderr and "v2-n24-" not in default.stderr


@pytest.mark.slow
def test_plan_prints_the_parts_the_verdict_and_the_batch_size_table(after):
    result, roomy, capped = after.printed, after.roomy, after.capped
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "host memory (predicted peak):" in out and "TensorFlow and the app (this machine's probe)" in out
    assert "the ring (2 slot(s) of one uint8 batch)" in out and "2 worker processes" in out and "capped" not in out
    # a ring past what an epoch fills is planned as the loader makes it: TINY's training split is 5 batches of 4
    assert capped.returncode == 0 and "queue.max_size=100000 capped at 5 ring slot(s)" in capped.stdout
    assert "the ring (5 slot(s) of one uint8 batch)" in capped.stdout
    assert "device memory (on the CPU, counted above):" in out and "optimizer state" in out
    assert "does NOT fit queue.memory_budget_mb (1 MiB)" in out and "none of max_size, batch or workers" in out
    assert "| >4 |" in out and "*32×32" in out and "| 65536 |" in out
    plan = json.loads((after.cwd / "printed" / "plan.json").read_text())
    assert plan["limit"] == {"name": "queue.memory_budget_mb", "mib": 1.0} and plan["fixes"] == []
    assert plan["host_peak_mib"] > plan["probe"]["trainer_mib"] > 100 and plan["device_mib"] > 0
    assert plan["queue_auto"] is None and "(auto, from a probe" not in out
    # negative control: without a budget it is measured against the memory available, and fits;
    # with `auto` it runs train's probe and plans for what that chooses
    assert roomy.returncode == 0 and "fits the memory available now" in roomy.stdout
    chosen = json.loads((after.cwd / "roomy" / "plan.json").read_text())["queue_auto"]
    assert f"queue.workers={chosen['workers']} queue.max_size={chosen['max_size']} (auto, from a probe" in roomy.stdout
    assert f"the ring ({chosen['max_size']} slot(s)" in roomy.stdout and f"{chosen['workers']} worker" in roomy.stdout


@pytest.mark.slow
def test_train_refuses_a_config_predicted_above_its_budget(after):
    result, run = after.over_budget, after.cwd / "over_budget"
    assert result.returncode == 2
    assert "`queue.memory_budget_mb` = 300" in result.stderr and "the predicted host peak is" in result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["memory_plan"]["host_peak_mib"] > 300
    assert not list(run.rglob("checkpoints/step-*"))
