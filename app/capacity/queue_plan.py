"""The queue before workers start: `auto` chosen, the plan logged, recorded, held to the limit; shown by `app plan`."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from app.capacity import auto
from app.capacity import plan as memory_plan
from app.capacity.plan import ModelFacts, Probe
from app.capacity.probe import measured_or_spawn_probe
from app.capacity.run_plan import RunPlan
from app.errors import AppError, MachineError, config_error
from app.loader.pipeline import ring_slots

log = logging.getLogger("app.train")


@dataclasses.dataclass(kw_only=True)
class Planner:
    """The config and run plan's memory plan for any (workers, max_size); `plan` is None without the machine's probe."""

    config: object
    run: RunPlan  # before the probe's choice: no queue yet
    plan: memory_plan.Plan | None = None  # of the run plan's provisional queue (auto.provisional: `auto` as 1)
    probe: Probe | None = None
    facts: ModelFacts | None = None
    splits: dict[str, int] = dataclasses.field(default_factory=dict)  # name → samples the loader will serve

    def slots(self, max_size: int) -> tuple[int, str | None]:
        """The ring's slots for `max_size` as the run's loader will cap them, and why when it does."""
        return ring_slots(max_size, self.splits, self.run.batch_size)

    def for_queue(self, workers: int, max_size: int) -> memory_plan.Plan:
        work = dataclasses.replace(self.plan.workload, workers=workers, max_size=self.slots(max_size)[0])
        return memory_plan.predict(work, self.probe, self.facts)

    def fits(self) -> Callable[[int, int], bool]:
        """Whether a (workers, max_size) pair's predicted host peak is within the limit; always, without a plan."""
        if self.plan is None:
            return lambda workers, max_size: True
        limit = memory_plan.limit(self.config.queue)[1]
        return lambda workers, max_size: memory_plan.fits(self.for_queue(workers, max_size), limit)


def planner(config, run: RunPlan, splits: tuple, *, facts: ModelFacts,
            trainer_measures: Callable[[], dict]) -> Planner:
    """A config's Planner, probing the machine if unstored; a failed probe warns, or raises with a budget set."""
    try:
        probe = measured_or_spawn_probe(trainer_measures)
    except (RuntimeError, AppError, OSError) as error:  # the plan informs; it must not stop a run without a budget
        if config.queue.memory_budget_mb is not None:
            raise
        log.warning("no memory plan: this machine's probe failed (%s)", error)
        return Planner(config=config, run=run)
    sizes = {name: len(split) for name, split in zip(("train", "val"), splits, strict=False)}  # val: when given
    served = Planner(config=config, run=run, splits=sizes)
    first = auto.provisional(config.queue, run.asked)  # each `auto` as 1, its slots as the loader will cap them
    first = first.with_slots(served.slots(first.max_size)[0])
    plan = memory_plan.plan_for(config, splits, facts, probe, run=run.chosen(first))
    return dataclasses.replace(served, plan=plan, probe=probe, facts=facts)


def probed(plans: Planner, split, time_step: auto.StepTimer) -> RunPlan:
    """The run plan with its queue, each `auto` value chosen by the probe at this process's batch share."""
    queue, given = plans.config.queue, plans.run.asked
    if not auto.wanted(queue, given):
        return plans.run.chosen(auto.resolved(queue, given=given))
    choice = auto.probe_and_choose(plans.config, plans.run, split, time_step=time_step, fits=plans.fits())
    return plans.run.chosen(auto.resolved(queue, choice, given), choice)


def check_and_write_plan(run: RunPlan, plans: Planner, summary) -> float | None:
    """Predicted host peak (MiB) into `summary`; None without a plan; over limit + margin, raises before any worker."""
    if plans.plan is None:
        return None
    config = plans.config
    plan = plans.for_queue(run.queue.workers, run.queue.max_size)
    summary.update(memory_plan=plan.record())
    log.info("memory plan: host peak %.0f MiB predicted, device %.0f MiB (python -m app plan: part by part)",
             plan.host_mib, plan.device_mib)
    if getattr(config.model, "freeze_backbone", False) and config.trainer.unfreeze_at_epoch:
        log.warning("the plan is the frozen model's: from epoch %d (trainer.unfreeze_at_epoch) a second, larger "
                    "train step is compiled and the peak grows past it (10-16 %% on small runs here): leave room",
                    config.trainer.unfreeze_at_epoch)
    name, limit = memory_plan.limit(config.queue)
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


def report(run: RunPlan, plans: Planner) -> tuple[str, dict]:
    """What `python -m app plan` prints of the run plan's final queue, and what plan.json records."""
    config = plans.config
    plan = plans.for_queue(run.queue.workers, run.queue.max_size)
    name, limit = memory_plan.limit(config.queue)
    fixed = memory_plan.fixes(plan, plans.probe, plans.facts, limit) if plan.host_mib > limit else []
    capped = plans.slots(run.queue.max_size)[1]
    text = (f"{capped}\n\n" if capped else "") + (memory_plan.render(plan, (name, limit), fixed) + "\n\n"
            + memory_plan.batch_size_table(config.data.batch_size, tuple(config.data.image_size), run.pixels.bands,
                                           run.pixels.dtype))
    return text, {**plan.record(), "limit": {"name": name, "mib": round(limit, 1)}, "fixes": fixed}
