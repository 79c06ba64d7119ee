"""Models for data.task=segmentation: one softmax a pixel at the input's size, from the small ResNet, a
keras.applications family or a builder of the user's."""

from __future__ import annotations

import sys
import types

import keras
import numpy as np
import pytest

from app.backbones import keras_app
from app.data.pixels.decode import Pixels
from app.errors import ConfigError
from app.model import backbone_of, build, small_resnet
from app.pixel_objectives import PixelLoss
from app.schema import CustomModelConfig, KerasAppConfig

SMALL_APP = {"name": "MobileNetV2", "alpha": 0.35}


@pytest.mark.slow
def test_the_small_unet_learns_a_pixel_task_at_the_inputs_size():
    net = small_resnet((64, 64, 3), 3, widths=[16, 32, 64], output="pixels", dropout=0.0)
    assert net.name == "small_unet" and net.output_shape == (None, 64, 64, 3)
    assert net.get_layer("probabilities").dtype_policy.name == "float32"
    rng = np.random.default_rng(0)
    x = rng.random((8, 64, 64, 3), dtype=np.float32)
    y = np.digitize(x[..., 0], [1 / 3, 2 / 3]).astype(np.uint8)  # the class: the red value's third, a pixel
    net.compile(optimizer=keras.optimizers.Adam(0.01), loss=PixelLoss(3), jit_compile=False)
    losses = [float(net.train_on_batch(x, y)) for _ in range(10)]
    assert losses[-1] < 0.6 * losses[0], losses
    # the top skip: a convolution at the input's full size feeds the last level
    assert any(isinstance(layer, keras.layers.Concatenate) and layer.output.shape[1] == 64 for layer in net.layers)


def test_a_size_the_model_cannot_halve_down_and_back_is_refused_naming_the_key_and_divisor():
    with pytest.raises(ConfigError, match=r"`data.image_size` = \[60, 64\].*divisible by 8"):
        small_resnet((60, 64, 3), 2, widths=[8, 16, 32], output="pixels")
    with pytest.raises(ConfigError, match=r"divisible by 32"):
        keras_app((48, 48, 3), 2, output="pixels", **SMALL_APP)
    assert small_resnet((60, 64, 3), 2, widths=[8, 16, 32]).output_shape == (None, 2)  # classification takes it


@pytest.mark.parametrize("bands", [3, 6])
def test_a_keras_application_decodes_its_features_to_the_inputs_size(bands):
    spec = KerasAppConfig(name="MobileNetV2", weights=None, dropout=0.0, kwargs={"alpha": 0.35})
    wide = Pixels(channels="all", bands=bands, dtype="uint16")
    net = build(spec, (64, 64), 5, pixels=None if bands == 3 else wide, output="pixels")
    assert net.input_shape == (None, 64, 64, bands) and net.output_shape == (None, 64, 64, 5)
    features = backbone_of(net)  # what freeze_backbone freezes: the application's layers
    assert [tuple(o.shape[1:3]) for o in features.outputs] == [(32, 32), (16, 16), (8, 8), (4, 4), (2, 2)]
    assert features.get_layer("Conv1").kernel.shape[2] == bands
    features.trainable = False  # as the trainer freezes it: the decoder and head still train
    head = net.get_layer(index=-1).get_layer("probabilities")
    assert 0 < len(net.trainable_weights) < len(net.weights) and head.trainable
    image = np.random.default_rng(0).integers(0, 255, (2, 64, 64, bands)).astype("float32")
    assert np.allclose(np.asarray(net(image)).sum(-1), 1.0, atol=1e-5)


def test_build_refuses_a_builder_without_one_softmax_a_pixel_naming_its_target(monkeypatch):
    def image_builder(input_shape, num_classes, output="image"):
        return small_resnet(input_shape, num_classes, widths=[4])  # the output asked for, not given

    module = types.ModuleType("user_builders")
    module.image_builder = image_builder
    monkeypatch.setitem(sys.modules, "user_builders", module)
    with pytest.raises(ConfigError, match=r"user_builders.image_builder.*\(None, 3\).*\(None, 16, 16, 3\).*one "
                                          r"softmax a pixel"):
        build(CustomModelConfig(_target_="user_builders.image_builder"), (16, 16), 3, output="pixels")
    # negative controls: the same builder for classification, and the small ResNet's U-Net, pass
    assert build(CustomModelConfig(_target_="user_builders.image_builder"), (16, 16), 3).output_shape == (None, 3)
    right = build(CustomModelConfig(_target_="app.model.small_resnet", kwargs={"widths": [4]}), (16, 16), 3,
                  output="pixels")
    assert right.output_shape == (None, 16, 16, 3) and right.get_layer("normalise") is right.layers[1]
