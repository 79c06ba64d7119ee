"""What a run derives from its config (app/capacity/run_plan.py): this process's share of a batch,
the probe's queue, and the loader's Settings made of them; the config itself never rewritten."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from app.capacity.auto import Choice
from app.capacity.run_plan import RunPlan
from app.config import conf_dir, load
from app.schema import register


def composed(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=["data.batch_size=8", *overrides]))


def test_a_process_plans_its_share_and_the_probes_queue_reaches_the_loader():
    config = composed("queue.workers=auto", "queue.max_size=auto")
    plan = RunPlan.of(config, processes=2, device_is_host=True)
    assert (plan.batch_size, plan.workers, plan.max_size, plan.choice) == (4, "auto", "auto", None)
    chosen = plan.chosen(Choice(workers=3, max_size=2, reason="probed", figures={}))
    assert (chosen.workers, chosen.max_size, chosen.choice.reason) == (3, 2, "probed")
    settings = chosen.loader_settings(config)
    assert (settings.batch_size, settings.workers, settings.max_size) == (4, 3, 2)
    assert (config.data.batch_size, config.queue.workers, config.queue.max_size) == (8, "auto", "auto")  # as written
    # negative control: no choice, the config's own numbers (and no share with one process)
    given = composed("queue.workers=1", "queue.max_size=5")
    unchanged = RunPlan.of(given, device_is_host=True)
    assert unchanged.chosen(None) is unchanged
    settings = unchanged.loader_settings(given)
    assert (settings.batch_size, settings.workers, settings.max_size) == (8, 1, 5)
