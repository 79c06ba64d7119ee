"""The optimizer group's rules (app/schema/training.py: OptimizerConfig)."""

from __future__ import annotations

from app.rules.common import require


def check(optimizer) -> None:
    o = optimizer
    require(o.learning_rate > 0, "optimizer.learning_rate", o.learning_rate, "a positive (peak) learning rate")
    for key in ("weight_decay", "clipnorm", "global_clipnorm"):
        value = getattr(o, key)
        require(value is None or value >= 0, f"optimizer.{key}", value, "null (Keras's default) or a number ≥ 0")
    require(o.clipnorm is None or o.global_clipnorm is None, "optimizer.global_clipnorm", o.global_clipnorm,
            "null when optimizer.clipnorm is set (one of the two)")
    require(0 < o.ema_momentum < 1, "optimizer.ema_momentum", o.ema_momentum, "strictly between 0 and 1")
