"""What a run derives from its config (app/capacity/run_plan.py): this process's share of a batch,
the probe's queue, and the loader's Settings made of them; the config itself never rewritten."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from app.capacity import auto
from app.capacity.auto import Choice
from app.capacity.run_plan import RunPlan
from app.config import conf_dir, load
from app.loader.settings import Queue
from app.schema import register


def composed(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=["data.batch_size=8", *overrides]))


def test_a_process_plans_its_share_and_the_probes_queue_reaches_the_loader():
    config = composed("queue.workers=auto", "queue.max_size=auto", "queue.timeout_s=7")
    plan = RunPlan.of(config.data, processes=2, device_is_host=True)
    assert (plan.batch_size, plan.queue, plan.choice) == (4, None, None)  # no queue until it is chosen
    choice = Choice(workers=3, max_size=2, reason="probed", figures={})
    chosen = plan.chosen(auto.resolved(config.queue, choice), choice)
    assert chosen.queue == Queue(workers=3, max_size=2, timeout_s=7.0) and chosen.choice.reason == "probed"
    settings = chosen.loader_settings(config.data)
    assert (settings.batch_size, settings.queue) == (4, chosen.queue)  # the one Queue, taken as it is
    assert (config.data.batch_size, config.queue.workers, config.queue.max_size) == (8, "auto", "auto")  # as written
    with pytest.raises(ValueError, match="auto"):  # negative control: `auto` is never taken without the probe
        auto.resolved(config.queue)
    given = composed("queue.workers=1", "queue.max_size=5")
    unchanged = RunPlan.of(given.data, device_is_host=True).chosen(auto.resolved(given.queue))
    settings = unchanged.loader_settings(given.data)
    assert (settings.batch_size, settings.queue.workers, settings.queue.max_size) == (8, 1, 5)
    assert unchanged.choice is None


def test_a_command_that_only_loads_takes_auto_as_the_cap_of_workers_and_two_slots(monkeypatch):
    monkeypatch.setattr(auto, "usable_cores", lambda: 3)
    only = auto.loading_only(composed("queue.workers=auto", "queue.max_size=auto", "queue.worker_limit=8").queue)
    assert (only.workers, only.max_size) == (3, 2)
    given = auto.loading_only(composed("queue.workers=1", "queue.max_size=5").queue)  # negative control
    assert (given.workers, given.max_size) == (1, 5)
