"""The U-Net decoder of a model for data.task=segmentation (app/model.py's, app/backbones.py's) and its conv block."""

from __future__ import annotations

from collections.abc import Sequence

from keras import layers

from app.errors import config_error

# Keras's 0.99 leaves the moving statistics far from the data after a few hundred steps, and
# validation (which uses them) then sits near chance while training accuracy is high.
BN_MOMENTUM = 0.9


def conv_bn(x, width: int, stride: int = 1, relu: bool = True):
    x = layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization(momentum=BN_MOMENTUM)(x)
    return layers.ReLU()(x) if relu else x


def check_divisible(image_size: Sequence[int], divisor: int) -> None:
    if any(side % divisor for side in image_size):
        raise config_error("data.image_size", list(image_size), f"sides divisible by {divisor} for data.task="
                           f"segmentation with this model (it halves them down to 1/{divisor} and back)")


def unet_decoder(skips: Sequence, num_classes: int, widths: Sequence[int], activation: str = "softmax",
                 dropout: float = 0.0):
    """A float32 1×1 `activation` a pixel on `skips` (finest first) decoded from the coarsest up, a level at a time."""
    # each level: upsampled (bilinear) to the next's size, concatenated with it, two conv_bn of `widths[level]`
    x = skips[-1]
    for skip, width in zip(skips[-2::-1], widths[::-1], strict=True):
        factor = (skip.shape[1] // x.shape[1], skip.shape[2] // x.shape[2])
        x = layers.UpSampling2D(factor, interpolation="bilinear")(x)
        x = conv_bn(conv_bn(layers.Concatenate()([x, skip]), width), width)
    if dropout:
        x = layers.Dropout(dropout)(x)
    # float32 output even under mixed precision: softmax in float16 loses small probabilities.
    return layers.Conv2D(num_classes, 1, activation=activation, dtype="float32", name="probabilities")(x)
