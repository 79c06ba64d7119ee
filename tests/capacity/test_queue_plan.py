"""The run's queue before any worker starts (app/capacity/queue_plan.py), from plain facts: a
stored machine probe, the model's figures, real JPEG headers, made-up step timings. No model is
built and no probe process spawned."""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from hydra import compose, initialize_config_dir
from PIL import Image

from app.capacity import auto, queue_plan
from app.capacity import probe as machine_probe
from app.capacity.plan import MIB, ModelFacts, Probe, Workload, predict
from app.capacity.run_plan import RunPlan
from app.config import conf_dir, load
from app.data.source import FileSplit
from app.errors import ConfigError, MachineError
from app.loader.settings import Queue
from app.schema import register

PROBE = Probe(trainer_mib=500.0, worker_mib=100.0, forked_worker_mib=20.0, fork_server_mib=80.0,
              worker_bytes_per_decoded_byte=2.0, worker_region_mib=10.0, forked_worker_region_mib=30.0,
              activation_factor=1.5, step_mib_per_layer=1.0)
MODEL = ModelFacts(parameter_bytes=10 * MIB, optimizer_bytes=20 * MIB, activation_bytes_per_sample=4 * MIB, layers=20)


def composed(*overrides: str):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=["data.batch_size=4", "data.image_size=[32,32]", *overrides]))


@pytest.fixture
def jpegs(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate([(40, 48), (120, 160), (60, 60), (50, 70), (40, 40)]):
        paths.append(tmp_path / f"{i}.jpg")
        Image.fromarray(rng.integers(0, 255, (h, w, 3), np.uint8)).save(paths[-1], quality=90)
    return FileSplit([str(p) for p in paths], [0, 1, 0, 1, 0])


@pytest.fixture
def stored_probe(tmp_path, monkeypatch):
    """This machine's probe as if measured before; measuring again is an error."""
    monkeypatch.setenv("APP_CACHE_DIR", str(tmp_path))
    machine_probe.cache_file().write_text(json.dumps({**PROBE.__dict__, "machine": machine_probe.machine()}))

    def spawning(*_):
        raise AssertionError("the probe was spawned")

    monkeypatch.setattr(machine_probe, "_spawn_trainer_probes", spawning)


def no_trainer() -> dict:
    raise AssertionError("the training process was measured")


def run_plan(config, processes: int = 1) -> RunPlan:
    return RunPlan.of(config.data, processes=processes, device_is_host=True)


def given_run(config) -> RunPlan:
    """The run plan of a config with no `auto`, its queue as given."""
    return run_plan(config).chosen(auto.resolved(config.queue))


def planned(config, splits: tuple, processes: int = 1) -> queue_plan.Planner:
    return queue_plan.planner(config, run_plan(config, processes), splits, facts=MODEL, trainer_measures=no_trainer)


def test_the_plan_counts_the_validation_files_the_same_workers_decode(jpegs, stored_probe, tmp_path):
    grey = tmp_path / "grey.png"  # through Pillow: its image and the RGB conversion beside the array
    Image.new("L", (200, 100)).save(grey)
    config = composed("data.decode.draft=false")
    val = FileSplit([str(grey)], [0])
    with_val = planned(config, (jpegs, val))
    assert with_val.plan.workload.largest_decode_bytes == 200 * 100 * 3
    assert with_val.plan.workload.largest_pillow_bytes == 200 * 100 * 5  # Pillow's greyscale image and its RGB copy
    alone = planned(config, (jpegs,))  # negative control
    assert (alone.plan.workload.largest_decode_bytes, alone.plan.workload.largest_pillow_bytes) == (120 * 160 * 3, 0)


def test_the_plan_of_any_queue_from_the_files_headers_and_the_stored_probe(jpegs, stored_probe):
    config = composed("queue.workers=auto", "queue.max_size=2", "data.decode.draft=false")
    plans = planned(config, (jpegs,))
    assert plans.probe == dataclasses.replace(PROBE, machine=machine_probe.machine())  # read, not measured
    assert (plans.plan.workload.workers, plans.plan.workload.max_size) == (1, 2)  # `auto` planned as 1
    assert plans.plan.workload.largest_decode_bytes == 120 * 160 * 3  # the largest file, off its header
    work = Workload(batch_size=4, image_size=(32, 32), max_size=2, workers=5, processes=True, forked=True,
                    largest_decode_bytes=120 * 160 * 3, device_is_host=True)
    assert plans.for_queue(5, 2) == predict(work, plans.probe, MODEL)
    assert "the fork server (the workers' modules, shared with them)" in dict(plans.for_queue(5, 2).host)
    fits = plans.fits()
    available = psutil.virtual_memory().available / MIB
    too_many = math.ceil(available / PROBE.forked_worker_mib) + 10  # each forked worker alone is 20 MiB
    assert fits(1, 1) and not fits(too_many, 1)  # negative control: the limit does bind


def test_the_plan_counts_the_ring_as_the_loader_caps_it(jpegs, stored_probe):
    """queue.max_size past the batches of the largest split is planned as the slots the loader
    will make (app/loader/settings.py: ring_slots): 5 files in batches of 4 fill 2."""
    config = composed("queue.max_size=100000")
    plans = planned(config, (jpegs, FileSplit(jpegs.paths[:1], [0])))
    assert plans.plan.workload.max_size == 2 and plans.for_queue(2, 100000) == plans.for_queue(2, 2)
    text, record = queue_plan.report(given_run(config), plans)
    assert text.startswith("queue.max_size=100000 capped at 2 ring slot(s): a pass over the train split (5 samples")
    assert "the ring (2 slot(s) of one uint8 batch)" in text
    assert record["host"]["the ring (2 slot(s) of one uint8 batch)"] == round(2 * 4 * 32 * 32 * 3 / MIB, 1)
    # negative control: under the cap, as given, and nothing said
    assert plans.for_queue(2, 1).workload.max_size == 1
    assert "capped" not in queue_plan.report(given_run(composed("queue.max_size=2")), plans)[0]


def test_a_failed_probe_gives_no_plan_without_a_budget_and_stops_a_run_with_one(jpegs, monkeypatch):
    def failing(_):
        raise RuntimeError("memory probe of a training process failed: no")

    monkeypatch.setattr(queue_plan, "measured_or_spawn_probe", failing)
    plans = planned(composed(), (jpegs,))
    assert plans.plan is None and plans.fits()(10**6, 10**6)  # every queue fits what nothing measures
    assert queue_plan.check_and_write_plan(plans.run, plans, summary=None) is None
    with pytest.raises(RuntimeError, match="probe"):  # negative control: a budget needs the plan
        planned(composed("queue.memory_budget_mb=4000"), (jpegs,))


def test_the_step_is_timed_only_for_an_auto_queue(jpegs):
    def never(batch):
        raise AssertionError("the step was timed")

    given = composed("queue.workers=2", "queue.max_size=2")
    plans = queue_plan.Planner(config=given, run=run_plan(given))
    assert queue_plan.probed(plans, jpegs, never) == plans.run.chosen(Queue(workers=2, max_size=2))  # as given
    timed = []

    def step(batch):  # a 100 ms step, no CPU to speak of
        timed.append(batch)
        return [0.1] * 3, [0.001] * 3

    auto = composed("queue.workers=auto", "queue.max_size=2", "data.batch_size=8")
    run = queue_plan.probed(queue_plan.Planner(config=auto, run=run_plan(auto, processes=2)), jpegs, step)
    images, labels = timed[0]
    # one real batch, this process's share of the global 8
    assert images.shape == (4, 32, 32, 3) and images.dtype == np.uint8 and len(labels) == 4
    assert run.queue.max_size == 2 and run.queue.workers == run.choice.workers >= 1
    assert run.choice.figures["step_ms"] == 100.0
    assert auto.queue.workers == "auto" and auto.data.batch_size == 8  # the config as written


@pytest.mark.parametrize("budget", [None, 10**9], ids=["no budget", "a budget above the machine"])
def test_a_queue_over_the_memory_available_is_refused_with_the_workers_that_fit(budget, monkeypatch):
    """No budget, or one above what the machine has: the memory available now is the limit, and a
    plan above it stops the run before any worker starts (train checks it before the loader
    starts), naming the figure and the fix."""
    now = psutil.virtual_memory()
    # the machine's figure, held still: the named fix is within the margin by a few MiB, and the
    # rest of the suite moves the real figure by more than that between the two checks
    monkeypatch.setattr(psutil, "virtual_memory", lambda: now)
    available = now.available / MIB
    many = math.ceil(available / PROBE.forked_worker_mib) + 10  # a forked worker alone is 20 MiB: these pass it
    config = SimpleNamespace(queue=SimpleNamespace(workers=many, max_size=2, memory_budget_mb=budget),
                             model=SimpleNamespace(), trainer=SimpleNamespace(unfreeze_at_epoch=None),
                             data=SimpleNamespace(batch_size=4))
    small = Workload(batch_size=4, image_size=(32, 32), max_size=4, workers=2, processes=True,
                     largest_decode_bytes=0, device_is_host=True)
    run = RunPlan(batch_size=4, queue=Queue(workers=many, max_size=2), device_is_host=True)
    plans = queue_plan.Planner(config=config, run=run, plan=predict(small, PROBE, MODEL), probe=PROBE, facts=MODEL)
    recorded = {}
    summary = SimpleNamespace(update=lambda **values: recorded.update(values))
    with pytest.raises(MachineError) as refused:
        queue_plan.check_and_write_plan(run, plans, summary)
    text = str(refused.value)
    assert "refused before any worker started" in text and "the memory available now" in text
    assert budget is None or f"over queue.memory_budget_mb={budget} capped at the memory available now (" in text
    assert recorded["memory_plan"]["host_peak_mib"] > available  # the figure is in summary.json too
    fix = next(part for part in text.split("within it: ")[1].split("; or ") if part.startswith("queue.workers="))
    workers = int(fix.split("=")[1].split(":")[0])
    assert 0 < workers < many
    # negative control: the named fix is admitted
    fixed = run.chosen(Queue(workers=workers, max_size=2))
    assert queue_plan.check_and_write_plan(fixed, plans, summary) == pytest.approx(
        plans.for_queue(workers, 2).host_mib)


def test_a_budget_under_the_plan_is_a_config_error_naming_the_key():
    config = SimpleNamespace(queue=SimpleNamespace(workers=2, max_size=2, memory_budget_mb=100),
                             model=SimpleNamespace(), trainer=SimpleNamespace(unfreeze_at_epoch=None),
                             data=SimpleNamespace(batch_size=4))
    small = Workload(batch_size=4, image_size=(32, 32), max_size=2, workers=2, processes=True,
                     largest_decode_bytes=0, device_is_host=True)
    run = RunPlan(batch_size=4, queue=Queue(workers=2, max_size=2), device_is_host=True)
    plans = queue_plan.Planner(config=config, run=run, plan=predict(small, PROBE, MODEL), probe=PROBE, facts=MODEL)
    with pytest.raises(ConfigError, match="queue.memory_budget_mb"):
        queue_plan.check_and_write_plan(run, plans, SimpleNamespace(update=lambda **_: None))
    host = plans.for_queue(2, 2).host_mib
    config.queue.memory_budget_mb = math.ceil(host * 1.2)  # negative control: a budget that holds it passes
    assert queue_plan.check_and_write_plan(run, plans, SimpleNamespace(update=lambda **_: None)) == host


def test_a_process_of_several_plans_its_own_share_of_the_batch(jpegs, stored_probe):
    """Each of a data_parallel run's processes fills batches of its share: its ring and its plan hold that."""
    config = composed("data.batch_size=4", "queue.max_size=2")
    whole, half = planned(config, (jpegs,)), planned(config, (jpegs,), processes=2)
    assert (whole.plan.workload.batch_size, half.plan.workload.batch_size) == (4, 2)
    assert half.for_queue(1, 2).host_mib < whole.for_queue(1, 2).host_mib
    assert config.data.batch_size == 4  # the config as written
