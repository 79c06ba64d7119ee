"""The config's rules, a module a group: `check` takes that group alone, `check_with_<other>` the two a rule reads."""

from __future__ import annotations

from app.rules import (
    augment,
    bench,
    data,
    logger,
    model,
    optimizer,
    predict,
    prepare,
    preview,
    queue,
    scheduler,
    trainer,
)
from app.rules.common import AUTO, SEEDS, check_seed
from app.rules.trainer import JIT_COMPILE, TOP_K, top_k

__all__ = ["AUTO", "JIT_COMPILE", "SEEDS", "TOP_K", "check", "top_k"]


def check(cfg) -> None:
    check_seed("seed", cfg.seed)
    data.check(cfg.data)
    data.check_with_trainer(cfg.data, cfg.trainer)
    augment.check(cfg.augment)
    queue.check(cfg.queue)
    trainer.check(cfg.trainer)
    optimizer.check(cfg.optimizer)
    scheduler.check(cfg.scheduler)
    logger.check(cfg.logger)
    scheduler.check_with_trainer(cfg.scheduler, cfg.trainer)
    model.check(cfg.model)
    model.check_with_data(cfg.model, cfg.data)
    model.check_with_trainer(cfg.model, cfg.trainer)
    if "bench" in cfg:
        bench.check(cfg.bench)
    if "preview" in cfg:
        preview.check(cfg.preview)
    if "predict" in cfg:
        predict.check(cfg.predict)
    if "prepare" in cfg:
        prepare.check(cfg.prepare)
        prepare.check_with_data(cfg.prepare, cfg.data)
