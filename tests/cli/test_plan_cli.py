"""`python -m app plan` and the plan's use in `train`: the real CLI in a subprocess."""

from __future__ import annotations

import json

from test_train_cli import TINY, app, only_run_dir


def test_plan_prints_the_parts_the_verdict_and_the_article_table(tmp_path):
    result = app("plan", *TINY, "queue.memory_budget_mb=1", "hydra.run.dir=plan", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "host memory (predicted peak):" in out and "TensorFlow and the app (this machine's probe)" in out
    assert "the ring (2 slot(s) of one uint8 batch)" in out and "2 worker processes" in out
    assert "device memory (on the CPU, counted above):" in out and "optimizer state" in out
    assert "does NOT fit queue.memory_budget_mb (1 MiB)" in out and "none of max_size, batch or workers" in out
    assert "| >4 |" in out and "*32×32" in out and "| 65536 |" in out
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["limit"] == {"name": "queue.memory_budget_mb", "mib": 1.0} and plan["fixes"] == []
    assert plan["host_peak_mib"] > plan["probe"]["trainer_mib"] > 100 and plan["device_mib"] > 0
    assert plan["queue_auto"] is None and "(auto, from a probe" not in out
    # negative control: without a budget it is measured against the memory available, and fits;
    # with `auto` (issue 14.3) it runs train's probe and plans for what that chooses
    roomy = app("plan", *TINY, "queue.workers=auto", "queue.max_size=auto", "hydra.run.dir=plan2", cwd=tmp_path)
    assert roomy.returncode == 0 and "fits the memory available now" in roomy.stdout
    chosen = json.loads((tmp_path / "plan2" / "plan.json").read_text())["queue_auto"]
    assert f"queue.workers={chosen['workers']} queue.max_size={chosen['max_size']} (auto, from a probe" in roomy.stdout
    assert f"the ring ({chosen['max_size']} slot(s)" in roomy.stdout and f"{chosen['workers']} worker" in roomy.stdout


def test_train_refuses_a_config_predicted_above_its_budget(tmp_path):
    result = app("train", *TINY, "queue.memory_budget_mb=300", cwd=tmp_path)
    assert result.returncode == 2
    assert "`queue.memory_budget_mb` = 300" in result.stderr and "the predicted host peak is" in result.stderr
    summary = json.loads((only_run_dir(tmp_path / "outputs") / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["memory_plan"]["host_peak_mib"] > 300
    assert not list((tmp_path / "outputs").rglob("checkpoints/step-*"))
