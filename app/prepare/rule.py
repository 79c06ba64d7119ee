"""prepare.short_side: `auto` (what the train and eval transforms need: `short_side_rule`), an integer, or `full`."""

from __future__ import annotations

from app.augment import build_compose, eval_transforms, short_side_rule
from app.errors import ConfigError


def stored_short_side(config) -> tuple[int | None, str]:
    """(the short side to store, None for full size; why, for the log); a ConfigError where `auto` cannot tell."""
    side = config.prepare.short_side
    if side == "full":
        return None, "prepare.short_side=full: every image at its own size"
    if side != "auto":
        return int(side), f"prepare.short_side={int(side)}"
    return needed_short_side(config.augment, config.data)


def needed_short_side(augment, data) -> tuple[int, str]:
    # prepare.short_side=auto's side for the augment and data groups, and why; a ConfigError where it cannot tell
    needs = []
    for split, transforms in (("train", augment.transforms), ("eval", eval_transforms(augment, data.image_size))):
        need, why = short_side_rule(build_compose(transforms, data.image_size), "resize rule")
        if need is None:
            raise ConfigError(
                f"config key `prepare.short_side` = 'auto' cannot tell the short side the {split} transforms need: "
                f"{why}, so a smaller stored image could change what it does. Set the short side by hand, e.g. "
                f"prepare.short_side={2 * max(data.image_size)}, or store full-size images with "
                "prepare.short_side=full.")
        needs.append((need, f"{split}: {why}"))
    need = max(side for side, _ in needs)
    return need, f"prepare.short_side=auto: {need} px, the larger of {' and '.join(why for _, why in needs)}"
