"""The recipe a model is compiled with (conf/optimizer by `_target_`, the learning rate over
the run from conf/scheduler as a stock Keras schedule, loss, metrics, XLA, steps a call), and
the backbone's freezing: frozen for the first epochs with `model.freeze_backbone`, trained from
`trainer.unfreeze_at_epoch` on, recompiled with the same optimizer when that changes.

Keras facts this follows: flipping `trainable` without recompiling leaves the traced step as it
was; recompiling with an optimizer built over fewer variables fails on the new ones ("Unknown
variable"), so the optimizer is built over every variable before anything is frozen. A frozen
BatchNormalization runs in inference mode (Keras 3), its statistics untouched.
Never imports the loader.
"""

from __future__ import annotations

import contextlib
import logging

import keras

from app import model as models
from app.config import JIT_COMPILE, instantiate_each
from app.schema import Config

log = logging.getLogger("app.train")


def compile_new(net: keras.Model, config: Config, steps_per_epoch: int) -> None:
    """A new model's optimizer, built over every variable, then the backbone frozen as epoch 1
    wants it, then compiled."""
    trainer = config.trainer
    optimizer = build_optimizer(config, steps_per_epoch)
    optimizer.build(net.trainable_variables)  # all of them: an unfreeze later finds its slots
    backbone = models.backbone_of(net)
    if backbone is not None:
        backbone.trainable = not frozen_in(config, epoch=0)
    _compile(net, config, optimizer)
    trainable = sum(int(v.numpy().size) for v in net.trainable_variables)
    log.info("model: %s parameters, %s trainable; XLA (trainer.jit_compile=%s): %s", f"{net.count_params():,}",
             f"{trainable:,}", trainer.jit_compile, "on" if net.jit_compile else "off")


def build_optimizer(config: Config, steps_per_epoch: int) -> keras.optimizers.Optimizer:
    """conf/optimizer's `_target_` with its settings (those left null are Keras's defaults) and
    `kwargs`, its learning rate the schedule."""
    o = config.optimizer
    spec = {"_target_": o._target_, **{key: getattr(o, key) for key in ("weight_decay", "clipnorm", "global_clipnorm")
                                       if getattr(o, key) is not None}}
    if o.use_ema:
        spec.update(use_ema=True, ema_momentum=o.ema_momentum)
    (optimizer,) = instantiate_each([{**spec, **o.kwargs}], "optimizer", keras.optimizers.Optimizer,
                                    "keras.optimizers.AdamW", learning_rate=learning_rate(config, steps_per_epoch))
    return optimizer


def learning_rate(config: Config, steps_per_epoch: int):
    """The peak (scheduler=constant), or a stock Keras schedule over epochs × steps_per_epoch
    steps: stock, so model.keras and the checkpoints load without this app. It is a function of
    the optimizer's step counter, which a checkpoint keeps: a resumed run's rates are the
    uninterrupted run's."""
    s, peak, total = config.scheduler, config.optimizer.learning_rate, config.trainer.epochs * steps_per_epoch
    schedules = keras.optimizers.schedules
    if s.name == "cosine":
        warmup = round(s.warmup_epochs * steps_per_epoch)
        return schedules.CosineDecay(0.0, max(total - warmup, 1), alpha=s.final_fraction, warmup_target=peak,
                                     warmup_steps=warmup)
    if s.name == "one_cycle":
        warmup = round(s.peak_at * total)
        return schedules.CosineDecay(s.start_fraction * peak, max(total - warmup, 1), alpha=s.final_fraction,
                                     warmup_target=peak, warmup_steps=warmup)
    if s.name in ("step", "multistep"):
        epochs = (range(s.every_epochs, config.trainer.epochs, s.every_epochs) if s.name == "step" else s.milestones)
        # Keras changes the value once the step counter passes a boundary: the first step of epoch
        # e + 1 runs at counter e × steps_per_epoch
        boundaries = [epoch * steps_per_epoch - 1 for epoch in epochs]
        if boundaries:
            return schedules.PiecewiseConstantDecay(boundaries, [peak * s.gamma**i for i in range(len(boundaries) + 1)])
    return peak


def _compile(net: keras.Model, config: Config, optimizer) -> None:
    trainer = config.trainer
    net.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                jit_compile=JIT_COMPILE[str(trainer.jit_compile).lower()],
                steps_per_execution=trainer.steps_per_execution)


def frozen_in(config: Config, epoch: int) -> bool:
    """Whether the backbone is frozen in `epoch` (0-based)."""
    if not getattr(config.model, "freeze_backbone", False):
        return False
    start = config.trainer.unfreeze_at_epoch
    return start is None or epoch + 1 < start


def follow(net: keras.Model, config: Config, epoch: int) -> None:
    """At an epoch's start: the backbone frozen or trained as the config says for this epoch,
    recompiled (the same optimizer, its state kept) when that changes."""
    backbone, trained = models.backbone_of(net), not frozen_in(config, epoch)
    if backbone is None:
        return
    if epoch > 0 and trained and frozen_in(config, epoch - 1):
        log.info("epoch %d: the backbone is trained too from now on (trainer.unfreeze_at_epoch=%d)", epoch + 1,
                 config.trainer.unfreeze_at_epoch)
    if backbone.trainable != trained:  # a checkpoint is saved, and so loaded, with the backbone trainable
        backbone.trainable = trained
        _compile(net, config, net.optimizer)


@contextlib.contextmanager
def all_trainable(net: keras.Model):
    """The backbone trainable while a checkpoint is written: a loaded model builds its optimizer
    over its trainable variables, and must find the slots of every one it was built over."""
    backbone = models.backbone_of(net)
    if backbone is None or backbone.trainable:
        yield
        return
    backbone.trainable = True
    try:
        yield
    finally:
        backbone.trainable = False
