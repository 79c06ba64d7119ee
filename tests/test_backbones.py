"""keras.applications backbones: weights from a file, ImageNet weights without a network, and
the first layer of every family against that family's own preprocess_input."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from app.backbones import keras_app
from app.data.pixels.decode import Pixels
from app.errors import ConfigError
from app.families import FAMILIES
from app.model import build, classifier, normaliser
from app.schema import KerasAppConfig

SMALL = {"minimalistic": True}  # MobileNetV3Small's smallest form: the cheapest real application to build


def inner(net: keras.Model) -> keras.Model:
    return next(layer for layer in net.layers if isinstance(layer, keras.Model))


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory) -> tuple[keras.Model, Path]:
    """A random MobileNetV3Small (no top) and the weights file it saved."""
    saved = keras.applications.MobileNetV3Small(include_top=False, weights=None, input_shape=(32, 32, 3),
                                                pooling="avg", **SMALL)
    path = tmp_path_factory.mktemp("weights") / "random.weights.h5"
    saved.save_weights(path)
    return saved, path


def test_weights_from_a_file_load_equal(weights_file):
    saved, path = weights_file
    loaded = inner(keras_app((32, 32, 3), 3, "MobileNetV3Small", weights=str(path), **SMALL))
    assert all(np.array_equal(a, b) for a, b in zip(saved.get_weights(), loaded.get_weights(), strict=True))
    # negative control: without the file, other (random) weights
    fresh = inner(keras_app((32, 32, 3), 3, "MobileNetV3Small", **SMALL))
    assert not all(np.array_equal(a, b) for a, b in zip(saved.get_weights(), fresh.get_weights(), strict=True))


def test_imagenet_without_a_network_names_the_file_and_the_cache(monkeypatch, tmp_path):
    from keras.src.utils import file_utils

    asked = []

    def offline(fname=None, origin=None, *args, **kwargs):
        asked.append(fname)
        raise Exception(f"URL fetch failure on {origin}: None -- [Errno -3] Temporary failure in name resolution")

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(file_utils, "get_file", offline)
    with pytest.raises(ConfigError) as caught:
        keras_app((32, 32, 3), 3, "MobileNetV3Small", weights="imagenet", **SMALL)
    message = str(caught.value)
    assert asked and asked[-1] in message and str(tmp_path / "models") in message
    assert "`model.weights`" in message and "model.weights=/path/to/" in message
    assert file_utils.get_file is offline  # the wrapper is gone again


def test_the_first_layer_equals_each_familys_preprocess_input():
    """Exactly one normalisation: what keras.applications.<family>.preprocess_input does to RGB
    0..255, the classifier's first layer does (nothing, where the backbone normalises itself)."""
    pixels = np.random.default_rng(0).integers(0, 256, (2, 4, 5, 3)).astype(np.float32)
    for module in sorted({f.module for f in FAMILIES.values()}):
        mode = next(f.normalisation for f in FAMILIES.values() if f.module == module)
        theirs = getattr(keras.applications, module).preprocess_input(pixels.copy())
        ours = keras.ops.convert_to_numpy(normaliser(mode)(pixels))
        assert ours.dtype == np.float32 and np.allclose(ours, theirs, rtol=1e-5, atol=1e-4), module
        # negative control: the families differ, so matching one is not matching any
        assert np.array_equal(theirs, pixels) == (mode == "none"), module
        assert not np.allclose(keras.ops.convert_to_numpy(normaliser("unit")(pixels)), theirs, atol=1e-2), module


def test_keras_app_sits_behind_its_familys_layer_and_loads_in_plain_keras(tmp_path):
    net = build(KerasAppConfig(name="MobileNetV3Small", kwargs=SMALL), (32, 32), 4)
    assert isinstance(net.get_layer("normalise"), keras.layers.Identity) and net.output_shape == (None, 4)
    assert net.layers[-1].output.dtype == "float32"
    for mode in ("caffe", "torch", "tf"):  # stock layers only: a plain load gives the same outputs
        tiny = classifier(keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2)]),
                          (8, 8), mode)
        tiny.save(tmp_path / f"{mode}.keras")
        pixels = np.random.default_rng(1).integers(0, 256, (3, 8, 8, 3)).astype(np.float32)
        again = keras.saving.load_model(tmp_path / f"{mode}.keras")
        assert np.allclose(again.predict(pixels, verbose=0), tiny.predict(pixels, verbose=0), atol=1e-5), mode


def test_any_builder_by_target_with_its_kwargs():
    from app.schema import CustomModelConfig

    spec = CustomModelConfig(_target_="app.model.small_resnet", kwargs={"widths": [8], "dropout": 0.0})
    net = build(spec, (16, 16), 2)
    assert net.output_shape == (None, 2) and isinstance(net.get_layer("normalise"), keras.layers.Rescaling)
    assert not any(isinstance(layer, keras.layers.Dropout) for layer in net.layers[-1].layers)  # kwargs reached it
    with pytest.raises(ConfigError, match=r"`model._target_`.*returned a dict"):
        build(CustomModelConfig(_target_="builtins.dict"), (16, 16), 2)
    with pytest.raises(ConfigError, match=r"`model` \(app.model.small_resnet\) cannot be built.*nope"):
        build(CustomModelConfig(_target_="app.model.small_resnet", kwargs={"nope": 1}), (16, 16), 2)


def test_a_backbone_for_six_bands_takes_the_rgb_weights_with_its_first_kernel_averaged_over_the_bands(weights_file):
    saved, path = weights_file
    wide = inner(keras_app((32, 32, 6), 3, "MobileNetV3Small", weights=str(path), **SMALL))
    assert wide.input_shape[-1] == 6
    first = next(i for i, w in enumerate(saved.get_weights()) if w.ndim == 4)
    rgb, six = saved.get_weights()[first], wide.get_weights()[first]
    assert six.shape == (*rgb.shape[:2], 6, rgb.shape[3])
    assert np.allclose(six, np.repeat(rgb.mean(axis=2, keepdims=True), 6, axis=2))
    rest = [(a, b) for i, (a, b) in enumerate(zip(saved.get_weights(), wide.get_weights(), strict=True)) if i != first]
    assert all(np.array_equal(a, b) for a, b in rest)  # every other weight as the file holds it
    # through the app's build: 6-band uint16 takes the unit scaling, never the family's RGB preprocessing
    net = build(KerasAppConfig(name="MobileNetV3Small", weights=None, kwargs=SMALL), (32, 32), 3,
                pixels=Pixels(channels="all", bands=6, dtype="uint16"))
    assert net.input_shape == (None, 32, 32, 6) and net.get_layer("normalise").get_config()["scale"] == 1 / 65535
    with pytest.raises(ConfigError, match="data.normalize"):  # negative control: 8-bit RGB keeps the family's own
        build(KerasAppConfig(name="MobileNetV3Small", weights=None, kwargs=SMALL), (32, 32), 3,
              pixels=Pixels(mean=(1.0, 1.0, 1.0), std=(2.0, 2.0, 2.0)))
