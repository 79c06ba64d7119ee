"""The compile recipe (optimizer, schedule, loss, metrics, XLA, steps a call) and the backbone's freezing."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import keras
import numpy as np

from app import model as models
from app.config import closed_target, instantiate_each
from app.errors import config_error
from app.rules import JIT_COMPILE
from app.runs import rundir
from app.schema import Config, TrainerConfig
from app.schema.data import Task as TaskName
from app.targets import Targets
from app.tasks import Task, task_of

log = logging.getLogger("app.train")


@dataclass(frozen=True)
class Head:
    """What the model predicts and its loss compares: the class names, by the run's task."""

    class_names: list[str]
    task: Task = task_of(TaskName.multiclass)
    pos_weight: np.ndarray | None = None  # the task's trainer.class_weight, where it weighs in the loss
    ignore_index: int | None = None  # data.ignore_index: a mask value no loss or metric counts

    def monitor(self, trainer: TrainerConfig) -> str:
        """trainer.monitor, `auto` being the task's (val_accuracy for one class an image, val_auc for several)."""
        return self.task.monitor if trainer.monitor == "auto" else trainer.monitor


def compile_new(net: keras.Model, config: Config, steps_per_epoch: int, head: Head) -> None:
    """A new model's optimizer built over every variable, then the backbone frozen as epoch 1 wants it, compiled."""
    trainer = config.trainer
    optimizer = build_optimizer(config, steps_per_epoch)
    optimizer.build(net.trainable_variables)  # all of them: an unfreeze later finds its slots
    backbone = models.backbone_of(net)
    if backbone is not None:
        backbone.trainable = not frozen_in(config, epoch=0)
    _compile(net, config.trainer, optimizer, head)
    trainable = sum(int(np.prod(v.shape)) for v in net.trainable_variables)  # no copy off the device
    log.info("model: %s parameters, %s trainable; XLA (trainer.jit_compile=%s): %s", f"{net.count_params():,}",
             f"{trainable:,}", trainer.jit_compile, "on" if net.jit_compile else "off")


def new_compiled_model(config: Config, head: Head, steps: int, pixels) -> keras.Model:
    """The run's model as its config and task describe it, compiled (train's, and plan's to measure)."""
    net = models.build(config.model, config.data.image_size, len(head.class_names), activation=head.task.activation,
                       pixels=pixels, output=head.task.output)
    compile_new(net, config, steps, head)
    return net


def build_optimizer(config: Config, steps_per_epoch: int) -> keras.optimizers.Optimizer:
    """conf/optimizer's `_target_` with its settings (null: Keras default), `kwargs`, the schedule as learning rate."""
    o = config.optimizer
    spec = {"_target_": o._target_, **{key: getattr(o, key) for key in ("weight_decay", "clipnorm", "global_clipnorm")
                                       if getattr(o, key) is not None}}
    if o.use_ema:
        spec.update(use_ema=True, ema_momentum=o.ema_momentum)
    if config.trainer.grad_accum_steps > 1:  # Keras averages them and counts one iteration an update
        spec["gradient_accumulation_steps"] = config.trainer.grad_accum_steps
    (optimizer,) = instantiate_each([{**spec, **o.kwargs}], "optimizer", keras.optimizers.Optimizer,
                                    "keras.optimizers.AdamW", learning_rate=learning_rate(config, steps_per_epoch))
    return optimizer


def learning_rate(config: Config, steps_per_epoch: int):
    """The schedule `scheduler._target_` names over the run's optimizer updates (steps ÷ trainer.grad_accum_steps)."""
    def updates(epochs: float) -> int:  # the optimizer's counter after that many epochs
        return int(epochs * steps_per_epoch // config.trainer.grad_accum_steps)

    schedule = closed_target("scheduler", config.scheduler._target_)
    return schedule(config.scheduler, peak=config.optimizer.learning_rate, updates=updates,
                    epochs=config.trainer.epochs)


def metric_names(trainer: TrainerConfig, head: Head) -> list[str]:
    """The names Keras logs for the compiled metrics, besides the loss."""
    return head.task.metric_names(trainer, head.class_names)


def check_monitor(trainer: TrainerConfig, head: Head) -> None:
    """trainer.monitor names a figure that will exist, before any training."""
    names = ["loss", *metric_names(trainer, head)]
    allowed = [*names, *(f"val_{n}" for n in names)]
    if head.monitor(trainer) not in allowed:
        raise config_error("trainer.monitor", trainer.monitor, f"auto or one of {', '.join(allowed)}")


def monitor_mode(trainer: TrainerConfig, monitor: str) -> str:
    """min or max for `monitor` (trainer.monitor_mode's `auto`: min for a loss, max otherwise)."""
    return rundir.monitor_mode(monitor, trainer.monitor_mode)


def better(mode: str, value: float, best: float | None) -> bool:
    """Whether `value` beats `best` (None: nothing yet) when `mode` (min or max) says which way is better."""
    return best is None or (value < best if mode == "min" else value > best)


def class_weights(trainer: TrainerConfig, labels: np.ndarray, class_names: list[str], *,
                  targets: Targets) -> np.ndarray | None:
    """trainer.class_weight a class: balanced, as the task's targets weigh them in train; a mapping: by name, rest 1."""
    wanted = trainer.class_weight
    if wanted is None:
        return None
    if wanted == "balanced":
        weights = targets.balanced_weights(labels, len(class_names))
    else:
        unknown = sorted(set(wanted) - set(class_names))
        if unknown:
            raise config_error("trainer.class_weight", dict(wanted),
                               f"classes of this data only ({', '.join(class_names)}); not {', '.join(unknown)}")
        weights = np.array([float(wanted.get(name, 1.0)) for name in class_names])
    log.info("class weights (trainer.class_weight=%s): %s", wanted if wanted == "balanced" else "mapping",
             ", ".join(f"{name} {w:.3f}" for name, w in zip(class_names, weights, strict=True)))
    return weights.astype(np.float32)


def _compile(net: keras.Model, trainer: TrainerConfig, optimizer, head: Head) -> None:
    loss, metrics = head.task.objectives(trainer, head.class_names, head.pos_weight, head.ignore_index)
    net.compile(optimizer=optimizer, loss=loss, metrics=metrics,
                jit_compile=JIT_COMPILE[str(trainer.jit_compile).lower()],
                steps_per_execution=trainer.steps_per_execution)


def frozen_in(config: Config, epoch: int) -> bool:
    """Whether the backbone is frozen in `epoch` (0-based)."""
    if not getattr(config.model, "freeze_backbone", False):
        return False
    start = config.trainer.unfreeze_at_epoch
    return start is None or epoch + 1 < start


def freeze_or_unfreeze_recompiling(net: keras.Model, config: Config, epoch: int, head: Head) -> None:
    """At an epoch's start, the backbone frozen or trained as configured; recompiled (same optimizer) on a change."""
    backbone, trained = models.backbone_of(net), not frozen_in(config, epoch)
    if backbone is None:
        return
    if epoch > 0 and trained and frozen_in(config, epoch - 1):
        log.info("epoch %d: the backbone is trained too from now on (trainer.unfreeze_at_epoch=%d)", epoch + 1,
                 config.trainer.unfreeze_at_epoch)
    if backbone.trainable != trained:  # a checkpoint is saved, and so loaded, with the backbone trainable
        backbone.trainable = trained
        _compile(net, config.trainer, net.optimizer, head)


@contextlib.contextmanager
def all_trainable(net: keras.Model):
    """The backbone trainable while a checkpoint is written, so a loaded model's optimizer finds every slot."""
    backbone = models.backbone_of(net)
    if backbone is None or backbone.trainable:
        yield
        return
    backbone.trainable = True
    try:
        yield
    finally:
        backbone.trainable = False
