"""The Keras 3 CNN (conf/model), the float32 boundary that is its first layer (uint8 pixels in,
normalised float32 out, on the device), and the self-contained model.keras exported from it.
Never imports the loader: batches reach it as plain uint8 arrays."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import keras
import numpy as np
from keras import layers

# The float32 boundary: the classifier's first layer turns RGB values 0..255 (the loader's uint8
# batches) into x·SCALE + OFFSET on the device that trains; model.keras's metadata carries both.
SCALE = 1.0 / 255.0
OFFSET = 0.0

METADATA_FILE = "app_metadata.json"  # inside model.keras; Keras ignores files it does not know
# Keras's 0.99 leaves the moving statistics far from the data after a few hundred steps, and
# validation (which uses them) then sits near chance while training accuracy is high.
BN_MOMENTUM = 0.9


def small_resnet(input_shape: Sequence[int], num_classes: int, widths: Sequence[int] = (32, 64, 128),
                 blocks_per_stage: int = 1, dropout: float = 0.2) -> keras.Model:
    """A small ResNet: a stride-2 stem, then stages of residual blocks, each stage after the
    first halving H and W. Input: normalised float images (`classifier` puts it behind the
    normalising layer)."""
    inputs = keras.Input(tuple(input_shape), name="pixels")
    x = _conv_bn(inputs, widths[0], stride=2)
    for stage, width in enumerate(widths):
        for block in range(blocks_per_stage):
            x = _residual(x, width, stride=2 if stage > 0 and block == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    if dropout:
        x = layers.Dropout(dropout)(x)
    # float32 output even under mixed precision: softmax in float16 loses small probabilities.
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="small_resnet")


def _conv_bn(x, width: int, stride: int = 1, relu: bool = True):
    x = layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization(momentum=BN_MOMENTUM)(x)
    return layers.ReLU()(x) if relu else x


def _residual(x, width: int, stride: int):
    shortcut = x
    if stride != 1 or x.shape[-1] != width:
        shortcut = layers.Conv2D(width, 1, strides=stride, use_bias=False)(x)
        shortcut = layers.BatchNormalization(momentum=BN_MOMENTUM)(shortcut)
    y = _conv_bn(x, width, stride)
    y = _conv_bn(y, width, relu=False)
    return layers.ReLU()(layers.Add()([shortcut, y]))


def optimizer(name: str, lr: float) -> keras.optimizers.Optimizer:
    return {
        "adam": keras.optimizers.Adam,
        "adamw": keras.optimizers.AdamW,
        "sgd": lambda learning_rate: keras.optimizers.SGD(learning_rate, momentum=0.9, nesterov=True),
        "rmsprop": keras.optimizers.RMSprop,
    }[name](learning_rate=lr)


def normalise(batch: np.ndarray) -> np.ndarray:
    """The first layer's arithmetic in numpy, for code that feeds a model without that layer
    (bench's hand-rolled PyDataset, which returns float32 as such code does)."""
    out = np.multiply(batch, np.float32(SCALE), dtype=np.float32)
    if OFFSET:
        out += np.float32(OFFSET)
    return out


def classifier(backbone: keras.Model, image_size: Sequence[int]) -> keras.Model:
    """What `train` fits and model.keras holds: RGB pixel values 0..255 in (the loader's uint8
    batches, or floats), normalised by the first layer, the backbone's probabilities out.
    The cast to float happens inside the step, so no float32 batch waits in host memory."""
    pixels = keras.Input((*image_size, 3), name="image")
    normalised = layers.Rescaling(SCALE, OFFSET, name="normalise")(pixels)
    return keras.Model(pixels, backbone(normalised), name="classifier")


def export(model: keras.Model, path: Path, *, class_names: Sequence[str], image_size: Sequence[int]) -> None:
    """Save `model` (a `classifier`) with its class names, input size and normalisation, loadable
    with plain `keras.saving.load_model`. Written under a temporary name and renamed, so a crash
    never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp.keras")
    metadata = {"class_names": list(class_names), "image_size": list(image_size),
                "input": "RGB pixel values 0..255, shape (batch, H, W, 3)",
                "normalisation": {"scale": SCALE, "offset": OFFSET}}
    try:
        model.save(tmp)
        with zipfile.ZipFile(tmp, "a") as archive:
            archive.writestr(METADATA_FILE, json.dumps(metadata, indent=2))
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: the previous model.keras stays whole
        tmp.unlink(missing_ok=True)
        raise


def read_metadata(path: Path) -> dict:
    """Class names, image size and normalisation stored in a model.keras (plain zipfile + json)."""
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read(METADATA_FILE))
