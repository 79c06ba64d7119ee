"""Backbones from `keras.applications` (`model=keras_app model.name=...`, families in app/families.py): no top, global
pooling, a new head, with ImageNet weights, a weights file or none; a failed download said plainly."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from app.adapters import weight_downloads_recorded
from app.errors import config_error

log = logging.getLogger(__name__)


def keras_app(input_shape, num_classes: int, name: str, weights: str | None = None, **settings):
    """The `keras.applications` model `name` (given `settings`) without its top, pooled, then `dropout` and a float32
    Dense softmax (or sigmoid: multilabel) on preprocess_input's output; `weights`: None, "imagenet" or a file."""
    import keras

    pooling, dropout = settings.pop("pooling", "avg"), settings.pop("dropout", 0.2)
    activation = settings.pop("activation", "softmax")
    settings.pop("freeze_backbone", None)  # the trainer freezes, after building the optimizer over everything
    bands, build = input_shape[-1], getattr(keras.applications, name)
    with _downloads_named(name, weights):
        base = build(include_top=False, weights=weights, input_shape=(*input_shape[:2], 3), pooling=pooling, **settings)
    if bands != 3:
        wide = build(include_top=False, weights=None, input_shape=tuple(input_shape), pooling=pooling, **settings)
        base = _given_weights(wide, base, name, weights)
    inputs = keras.Input(tuple(input_shape), name="pixels")
    x = base(inputs)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    # float32 output even under mixed precision: softmax in float16 loses small probabilities.
    outputs = keras.layers.Dense(num_classes, activation=activation, dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"keras_app_{name.lower()}")


def _given_weights(wide, base, name: str, weights: str | None):
    """`wide` (built for N bands) with its 3-band twin `base`'s weights: the first convolution's RGB kernel averaged and
    repeated for each band; a weight of another shape (a family's 3-band normalisation) left as built."""
    import numpy as np

    bands = wide.input_shape[-1]
    for mine, given in zip(wide.layers, base.layers, strict=True):
        values = []
        for own, theirs in zip(mine.get_weights(), given.get_weights(), strict=True):
            if own.shape == theirs.shape:
                values.append(theirs)
            elif own.ndim == 4 and theirs.shape[2] == 3 and own.shape[2] == bands:
                values.append(np.repeat(theirs.mean(axis=2, keepdims=True), bands, axis=2))
            else:
                values.append(own)
        mine.set_weights(values)
    if weights is not None:
        log.info("model.name=%s for %d bands: its first convolution rebuilt for %d inputs, the %s RGB kernel's mean "
                 "over R, G and B repeated for each band", name, bands, bands, weights)
    return wide


def cache_dir() -> Path:
    """Where Keras keeps downloaded weights: $KERAS_HOME/models, ~/.keras/models by default."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras") / "models"


@contextlib.contextmanager
def _downloads_named(name: str, weights: str | None):
    """A failed ImageNet weights download as a config error naming the file Keras wanted and where to put it."""
    if weights != "imagenet":
        yield
        return
    with weight_downloads_recorded() as wanted:
        try:
            yield
        except Exception as error:
            if not wanted:
                raise
            fname, origin = wanted[-1]
            first = str(error).splitlines()[0] if str(error) else ""
            raise config_error("model.weights", weights, f"Keras could not fetch {fname} for {name} from {origin} "
                               f"({type(error).__name__}: {first}). Download it where there is a network and put "
                               f"it in {cache_dir()} (the cache folder, $KERAS_HOME/models), or give its path: "
                               f"model.weights=/path/to/{fname}") from None
