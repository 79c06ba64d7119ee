"""The prepare group's rules (`python -m app prepare` only); with the data's, what prepare.patch_draws asks of it."""

from __future__ import annotations

from app.rules.common import require
from app.schema.data import columns_of, patches_of


def check(prepare) -> None:
    p, side = prepare, prepare.short_side
    require(side in ("auto", "full") or (isinstance(side, int) and not isinstance(side, bool) and side >= 1),
            "prepare.short_side", side, "auto (what the train and eval transforms need), full, or an integer ≥ 1")
    require(p.format in ("jpeg", "raw"), "prepare.format", p.format, "jpeg or raw")
    require(1 <= p.quality <= 100, "prepare.quality", p.quality, "an integer from 1 to 100 (95: the default)")
    require(p.shard_mb >= 1, "prepare.shard_mb", p.shard_mb, "at least 1 (MiB a shard)")


def check_with_data(prepare, data) -> None:
    draws = prepare.patch_draws
    if draws is None:
        return
    require(draws >= 1, "prepare.patch_draws", draws, "1 or more random patches an image (null: every patch of "
            "the grid)")
    require(patches_of(data) is not None, "prepare.patch_draws", draws, "null without data.patches.size: it is how "
            "many patches of each image a patch copy stores for training")
    columns = columns_of(data)
    require(columns is None or columns.x is None, "prepare.patch_draws", draws, "null with data.columns.x and y: a "
            "table's own patches are stored as it lists them")
