"""`model=keras_app`: a keras.applications family (app/families.py) without its top, a new head, its weights."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import keras
import numpy as np

from app.adapters import weight_downloads_recorded
from app.decoders import check_divisible, conv_bn, unet_decoder
from app.errors import config_error

log = logging.getLogger(__name__)
# output="pixels": the decoder's width at the input's size, 1/2, 1/4, 1/8, 1/16 (model.kwargs.decoder_widths)
DECODER_WIDTHS = (16, 32, 64, 128, 256)


def keras_app(input_shape, num_classes: int, name: str, weights: str | None = None, **settings):
    """The application `name` (given `settings`) without its top, pooled, a float32 Dense head; or a U-Net on it."""
    # output="image": pooled, `dropout`, Dense softmax (sigmoid: multilabel); "pixels": app/decoders.py's U-Net on its
    # features (`_features`). `weights`: None, "imagenet" (a failed download said plainly) or a file
    pooling, dropout = settings.pop("pooling", "avg"), settings.pop("dropout", 0.2)
    activation, output = settings.pop("activation", "softmax"), settings.pop("output", "image")
    widths = settings.pop("decoder_widths", DECODER_WIDTHS)
    settings.pop("freeze_backbone", None)  # the trainer freezes, after building the optimizer over everything
    if output == "pixels":
        check_divisible(input_shape[:2], 32)
        pooling = None
    bands, build = input_shape[-1], getattr(keras.applications, name)
    with _downloads_named(name, weights):
        base = build(include_top=False, weights=weights, input_shape=(*input_shape[:2], 3), pooling=pooling, **settings)
    if bands != 3:
        wide = build(include_top=False, weights=None, input_shape=tuple(input_shape), pooling=pooling, **settings)
        base = _given_weights(wide, base, name, weights)
    inputs = keras.Input(tuple(input_shape), name="pixels")
    if output == "pixels":
        features, strides = _features(base, name)
        outputs = unet_decoder([conv_bn(inputs, widths[0]), *keras.tree.flatten(features(inputs))], num_classes,
                               [widths[s.bit_length() - 1] for s in strides[:-1]], activation=activation,
                               dropout=dropout)
        return keras.Model(inputs, outputs, name=f"keras_app_{name.lower()}_unet")
    x = base(inputs)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    # float32 output even under mixed precision: softmax in float16 loses small probabilities.
    outputs = keras.layers.Dense(num_classes, activation=activation, dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"keras_app_{name.lower()}")


def _features(base, name: str) -> tuple[keras.Model, list[int]]:
    """`base` (sharing its layers) out at each stride 2..32 the last layer of that size has, and the strides found."""
    height, width = base.inputs[0].shape[1:3]
    found = {}
    for layer in base.layers:  # in the order they compute: a later layer of a size replaces an earlier one
        shape = tuple(layer.output.shape)
        stride = height // shape[1] if len(shape) == 4 and shape[1] else 0
        if stride in (2, 4, 8, 16, 32) and shape[1:3] == (height // stride, width // stride):
            found[stride] = layer.output
    if 32 not in found or tuple(base.output.shape[1:3]) != (height // 32, width // 32):
        raise config_error("model.name", name, "a family whose feature maps are the input's size halved, down to 1/32 "
                           "(no 'valid' padding) for data.task=segmentation")
    strides = sorted(found)
    return keras.Model(base.inputs, [found[s] for s in strides], name=base.name), [1, *strides]


def _given_weights(wide, base, name: str, weights: str | None):
    """`wide` (built for N bands) with its 3-band twin `base`'s weights, the first kernel's RGB mean for each band."""
    # a weight of another shape (a family's 3-band normalisation) left as built
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
