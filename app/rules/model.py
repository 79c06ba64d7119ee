"""The model group's rules, by the schema type its node was typed by (`model_schema`), never by the keys it has."""

from __future__ import annotations

from pathlib import Path

from app.families import FAMILIES
from app.rules.common import require
from app.schema import KerasAppConfig, ResnetModelConfig, schema_of


def check(model) -> None:
    m, kind = model, schema_of(model)
    if issubclass(kind, ResnetModelConfig):
        widths = list(m.widths)
        require(len(widths) >= 1 and all(w >= 1 for w in widths), "model.widths", widths,
                "a non-empty list of positive channel counts")
        require(m.blocks_per_stage >= 1, "model.blocks_per_stage", m.blocks_per_stage, "an integer of at least 1")
    if issubclass(kind, (ResnetModelConfig, KerasAppConfig)):
        require(0.0 <= m.dropout < 1.0, "model.dropout", m.dropout, "a rate from 0 to below 1")
    if issubclass(kind, KerasAppConfig):
        require(m.name in FAMILIES, "model.name", m.name,
                f"one of the keras.applications classifiers: {', '.join(FAMILIES)}")
        require(m.pooling in ("avg", "max"), "model.pooling", m.pooling,
                "avg or max (global pooling of the last features)")
        weights = m.weights
        require(weights in (None, "imagenet") or Path(str(weights)).expanduser().is_file(), "model.weights", weights,
                "null (random), imagenet (downloaded once into $KERAS_HOME/models), or the path of a weights file; "
                "no file is there")


def check_with_data(model, data) -> None:
    if not issubclass(schema_of(model), KerasAppConfig):
        return
    size, least = list(data.image_size), FAMILIES[model.name].min_size
    require(min(size) >= least, "data.image_size", size,
            f"at least {least}×{least} for model.name={model.name} (Keras refuses smaller inputs to it)")


def check_with_trainer(model, trainer) -> None:
    if trainer.unfreeze_at_epoch is None:
        return
    frozen = issubclass(schema_of(model), KerasAppConfig) and model.freeze_backbone
    require(frozen, "trainer.unfreeze_at_epoch", trainer.unfreeze_at_epoch,
            "only with a frozen backbone to unfreeze: model=keras_app model.freeze_backbone=true")
    require(trainer.unfreeze_at_epoch >= 2, "trainer.unfreeze_at_epoch", trainer.unfreeze_at_epoch,
            "the first epoch (2 or later) that trains the backbone too; the epochs before train the head alone")
