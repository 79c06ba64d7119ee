"""The run's queue before any worker starts: `auto` values chosen by the probe
(app/training/autotune.py) within the memory limit, then the memory plan (app/memory_plan.py)
of the final settings logged, kept in summary.json and held to `queue.memory_budget_mb`.
Used by `train` and `plan`; never imports the loader's internals.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from app.errors import AppError, MachineError, config_error
from app.rules import AUTO

log = logging.getLogger("app.train")


@dataclasses.dataclass
class Planner:
    """The memory plan of the run's config for any (workers, max_size): the largest decode read
    off the files' headers once. `plan` is None when this machine's probe cannot be taken."""

    config: object
    plan: object | None = None  # memory_plan.Plan of the config, `auto` values taken as 1
    probe: object | None = None
    facts: object | None = None

    def for_queue(self, workers: int, max_size: int):
        from app import memory_plan

        work = dataclasses.replace(self.plan.workload, workers=workers, max_size=max_size)
        return memory_plan.predict(work, self.probe, self.facts)

    def fits(self) -> Callable[[int, int], bool]:
        """Whether a (workers, max_size) pair's predicted host peak is within the limit: always,
        without a plan."""
        if self.plan is None:
            return lambda workers, max_size: True
        from app import memory_plan

        limit = memory_plan.limit(self.config)[1]
        return lambda workers, max_size: memory_plan.fits(self.for_queue(workers, max_size), limit)


def planner(config, split, net, device_is_host: bool) -> Planner:
    """The Planner of a loaded config training `net` on `split`. Without a budget, a machine
    whose probe fails gets none, with a warning; with one, the failure stops the run."""
    from app import memory_plan
    from app.machine_probe import measured
    from app.model import memory_facts

    try:
        probe = measured()
    except (RuntimeError, AppError, OSError) as error:  # the plan informs; it must not stop a run without a budget
        if config.queue.memory_budget_mb is not None:
            raise
        log.warning("no memory plan: this machine's probe failed (%s)", error)
        return Planner(config)
    facts = memory_facts(net, config.trainer.precision.value)
    q = config.queue
    ones = dataclasses.replace(q, workers=1 if q.workers == AUTO else q.workers,
                               max_size=1 if q.max_size == AUTO else q.max_size)
    plan = memory_plan.plan_for(dataclasses.replace(config, queue=ones), split, facts, probe,
                                device_is_host=device_is_host)
    return Planner(config, plan, probe, facts)


def probed(config, split, net, plans: Planner, class_weights=None):
    """The choice of the probe (app/training/autotune.py) for `config`'s `auto` queue values, or
    None when it has none. `config.data.batch_size`: the rows this process loads of each batch."""
    from app.training import autotune

    if not autotune.wanted(config.queue):
        return None
    return autotune.probe_and_choose(config, split, net, plans.fits(), class_weights)


def checked(config, plans: Planner, summary) -> float | None:
    """The predicted host peak (MiB) of `config`'s final queue, logged and kept in summary.json;
    above `queue.memory_budget_mb`, or the memory available without one or below one (with the plan's
    margin), the run is refused before any worker starts. None without a plan."""
    from app import memory_plan

    if plans.plan is None:
        return None
    plan = plans.for_queue(config.queue.workers, config.queue.max_size)
    summary.update(memory_plan=plan.record())
    log.info("memory plan: host peak %.0f MiB predicted, device %.0f MiB (python -m app plan: part by part)",
             plan.host_mib, plan.device_mib)
    if getattr(config.model, "freeze_backbone", False) and config.trainer.unfreeze_at_epoch:
        log.warning("the plan is the frozen model's: from epoch %d (trainer.unfreeze_at_epoch) a second, larger "
                    "train step is compiled and the peak grows past it (10-16 %% on small runs here): leave room",
                    config.trainer.unfreeze_at_epoch)
    name, limit = memory_plan.limit(config)
    if memory_plan.fits(plan, limit):
        return plan.host_mib
    fixed = memory_plan.fixes(plan, plans.probe, plans.facts, limit)
    budget = config.queue.memory_budget_mb if name == memory_plan.BUDGET else None
    text = (f"the predicted host peak is {plan.host_mib:.0f} MiB, {plan.host_mib * (1 + memory_plan.MARGIN):.0f} "
            f"MiB with the plan's {memory_plan.MARGIN:.0%} margin (python -m app plan shows its parts), over "
            f"{name} ({limit:.0f} MiB); "
            + (f"within it: {'; or '.join(fixed)}" if fixed else
               "no smaller queue.max_size, data.batch_size or queue.workers alone fits: "
               + ("raise the budget or use smaller images" if budget is not None else
                  "use smaller images or free memory")))
    if budget is not None:
        raise config_error("queue.memory_budget_mb", budget, text)
    raise MachineError(f"refused before any worker started: {text}")
