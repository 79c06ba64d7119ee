"""A model that counts the samples it trains on, for the strategy tests. Each image is filled
with its own index (`index_images`); a layer adds each trained image's index to a counter kept
as a weight, so every checkpoint and model.keras holds how often each sample was trained, and
the most rows one replica saw in a step. BatchNorm-free, so replicas and one device train the
same weights. Importable by the `train` CLI in a subprocess (tests/ on PYTHONPATH)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
from keras import layers, ops
from PIL import Image

INDICES = 256  # an image's index is its pixel value


@keras.saving.register_keras_serializable("probe")
class SampleCounter(layers.Layer):
    """Identity; while training, counts the indices it sees. Its variables are synchronised on
    read: each replica adds to its own copy, and reading (or saving) sums the counts and
    averages the rows."""

    def build(self, input_shape):
        self.trained = keras.Variable(initializer="zeros", shape=(INDICES,), dtype="float32", trainable=False,
                                      aggregation="sum", synchronization="on_read", name="trained")
        self.rows = keras.Variable(initializer="zeros", shape=(), dtype="float32", trainable=False,
                                   aggregation="mean", synchronization="on_read", name="rows")

    def call(self, x, training=None):
        if training:
            index = ops.cast(ops.round(x[:, 0, 0, 0] * 255), "int32")
            self.trained.assign_add(ops.sum(ops.one_hot(index, INDICES, dtype="float32"), axis=0))
            self.rows.assign(ops.maximum(self.rows, ops.cast(ops.shape(x)[0], "float32")))
        return x


def counting_model(input_shape, num_classes: int) -> keras.Model:
    """SampleCounter, then a Dense softmax on the flattened pixels (float32 whatever the policy:
    the counter reads indices off the first layer's float32 output exactly)."""
    inputs = keras.Input(tuple(input_shape))
    x = SampleCounter(name="counter", dtype="float32")(inputs)
    x = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="counting")


def index_images(root: Path, splits: dict[str, range], size: int = 8) -> None:
    """<root>/<split>/<class>/<index>.png, each image filled with its index; classes alternate."""
    for split, indices in splits.items():
        for index in indices:
            folder = root / split / f"class_{index % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((size, size, 3), index, np.uint8)).save(folder / f"{index:03d}.png")


def counts(net: keras.Model) -> tuple[np.ndarray, float]:
    """(how often each index was trained, the most rows one replica saw in a step)."""
    backbone = next(layer for layer in net.layers if isinstance(layer, keras.Model))  # behind the first layer
    counter = backbone.get_layer("counter")
    return np.asarray(counter.trained), float(counter.rows)
