"""The augment group's rules (app/schema/data.py: AugmentConfig)."""

from __future__ import annotations

from app.rules.common import require
from app.schema import EVAL_TRANSFORMS


def check(augment) -> None:
    require(augment.eval_transform in EVAL_TRANSFORMS, "augment.eval_transform", augment.eval_transform,
            f"one of {', '.join(EVAL_TRANSFORMS)}")
    require(0 < augment.eval_crop_fraction <= 1, "augment.eval_crop_fraction", augment.eval_crop_fraction,
            "above 0, at most 1")
