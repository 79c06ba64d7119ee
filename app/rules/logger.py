"""The logger group's rules (app/schema/training.py: LoggerConfig): each chosen node builds its own writer."""

from __future__ import annotations

from app.rules.common import require
from app.schema import LOGGER_TARGETS


def check(logger) -> None:
    for option, node in logger.items():
        require(node is None or node._target_ == LOGGER_TARGETS[option], f"logger.{option}._target_",
                node and node._target_, f"{LOGGER_TARGETS[option]}: choose loggers with logger=[tensorboard,mlflow]")
