"""The predict group's rules (app/schema/__init__.py: SlidePredictConfig; `predict` and `evaluate` only)."""

from __future__ import annotations

from app.rules.common import require

BLENDS = ("gaussian", "mean")


def check(predict) -> None:
    require(0 <= predict.overlap <= 0.75, "predict.overlap", predict.overlap, "from 0 to 0.75 of a tile")
    require(predict.blend in BLENDS, "predict.blend", predict.blend, " or ".join(BLENDS))
