"""The rules of data.patches (app/data/patches.py), beside app/rules.py's: sizes, one resolution, the grid's step, the
draw, the mask, prepare's draws, and what a patch run does not do yet (several labels an image)."""

from __future__ import annotations

from app.errors import config_error


def check_patches(data) -> None:
    """data.patches's rules on the data group typed by its schema, where the source has them and they are on."""
    p, columns = getattr(data, "patches", None), getattr(data, "columns", None)
    if columns is not None and (columns.x is None) != (columns.y is None):
        missing = "x" if columns.x is None else "y"
        raise config_error(f"data.columns.{missing}", None, "the column of a patch's other coordinate: a patch's "
                           "corner takes both data.columns.x and data.columns.y")
    if p is None or p.size is None:
        if columns is not None and columns.x is not None:
            raise config_error("data.patches.size", None, "a patch's [height, width] with data.columns.x and y: "
                               "each row is then a patch of its image")
        return
    pairs = {"data.patches.size": p.size, "data.patches.stride": p.stride}
    for key, value in pairs.items():
        if value is not None and not (len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)):
            raise config_error(key, list(value), "two positive integers, [height, width] in the patch's pixels")
    given = [k for k in ("level", "downsample", "mpp") if getattr(p, k) is not None]
    if len(given) > 1:
        raise config_error(f"data.patches.{given[1]}", getattr(p, given[1]), f"null beside data.patches.{given[0]}: "
                           "one resolution, a pyramid level, a downsample or µm a pixel")
    for key, ok, allowed in (("level", p.level is None or p.level >= 0, "a level of the pyramid, 0 the largest"),
                             ("downsample", p.downsample is None or p.downsample >= 1, "1 or more"),
                             ("mpp", p.mpp is None or p.mpp > 0, "µm a pixel, above 0 (0.5 is a 20× scan)"),
                             ("per_image", p.per_image >= 1, "1 or more patches an image an epoch"),
                             ("min_foreground", 0 <= p.min_foreground <= 1, "a share, 0 (every patch) to 1"),
                             ("top_k", p.top_k >= 1, "1 or more"),
                             ("max_chunk_pixels", p.max_chunk_pixels >= 1, "1 or more")):
        if not ok:
            raise config_error(f"data.patches.{key}", getattr(p, key), allowed)
    if str(getattr(data.task, "value", data.task)) == "multilabel":
        raise config_error("data.task", "multilabel", "multiclass with data.patches: an image's result from its "
                           "patches' is one class's for now")


def check_patch_draws(draws: int | None, data) -> None:
    """prepare.patch_draws: 1 or more random patches an image, and only for a source with data.patches."""
    if draws is None:
        return
    if draws < 1:
        raise config_error("prepare.patch_draws", draws, "1 or more random patches an image (null: every patch of "
                           "the grid)")
    if getattr(data, "patches", None) is None or data.patches.size is None:
        raise config_error("prepare.patch_draws", draws, "null without data.patches.size: it is how many patches "
                           "of each image a patch copy stores for training")
    columns = getattr(data, "columns", None)
    if columns is not None and columns.x is not None:
        raise config_error("prepare.patch_draws", draws, "null with data.columns.x and y: a table's own patches are "
                           "stored as it lists them")
