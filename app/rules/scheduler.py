"""The scheduler group's rules; with the trainer's, what its epochs and callbacks allow of the schedule."""

from __future__ import annotations

from app.rules.common import require
from app.schema import SCHEDULER_TARGETS, option_of


def check(scheduler) -> None:
    s, target = scheduler, scheduler._target_
    require(target in SCHEDULER_TARGETS.values(), "scheduler._target_", target,
            f"one of {', '.join(SCHEDULER_TARGETS.values())}: choose it with scheduler=<{'|'.join(SCHEDULER_TARGETS)}>")
    require(0 <= s.final_fraction <= 1, "scheduler.final_fraction", s.final_fraction,
            "a fraction of the peak, 0 to 1")
    require(0 < s.start_fraction <= 1, "scheduler.start_fraction", s.start_fraction,
            "a fraction of the peak, above 0")
    require(0 < s.peak_at < 1, "scheduler.peak_at", s.peak_at, "a fraction of the run, strictly between 0 and 1")
    require(s.every_epochs >= 1, "scheduler.every_epochs", s.every_epochs, "an integer of at least 1")
    require(s.gamma > 0, "scheduler.gamma", s.gamma, "a positive factor")


def check_with_trainer(scheduler, trainer) -> None:
    s, epochs = scheduler, trainer.epochs
    require(0 <= s.warmup_epochs < epochs, "scheduler.warmup_epochs", s.warmup_epochs,
            f"from 0 to below trainer.epochs={epochs}")
    milestones = list(s.milestones)
    require(milestones == sorted(set(milestones)) and all(0 < m < epochs for m in milestones),
            "scheduler.milestones", milestones, f"increasing epochs between 0 and trainer.epochs={epochs}")
    for i, spec in enumerate(trainer.callbacks):
        plateau = str((spec or {}).get("_target_", "")).endswith("ReduceLROnPlateau")
        option = option_of("scheduler", s._target_) or s._target_
        require(not (plateau and option != "constant"), f"trainer.callbacks[{i}]", spec.get("_target_"),
                f"ReduceLROnPlateau cannot change the learning rate scheduler={option} sets: use it with "
                "scheduler=constant, or drop it")
