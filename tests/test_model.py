"""The Keras CNN and model.keras, loaded in a fresh Python process that never imports the app."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from app.model import (
    OFFSET,
    SCALE,
    classifier,
    model_keras_problem,
    normalise,
    read_metadata,
    small_resnet,
    write_model_keras,
)


def test_shapes():
    net = small_resnet((40, 32, 3), num_classes=5, widths=[8, 16], blocks_per_stage=2)
    assert net.output_shape == (None, 5)
    assert sum(1 for layer in net.layers if layer.__class__.__name__ == "Add") == 4


def test_several_labels_an_image_end_in_a_sigmoid_and_an_unknown_key_is_named():
    x = np.random.default_rng(0).normal(size=(4, 16, 16, 3)).astype(np.float32)
    several = np.asarray(small_resnet((16, 16, 3), 3, widths=[4], activation="sigmoid")(x))
    one = np.asarray(small_resnet((16, 16, 3), 3, widths=[4])(x))  # negative control: softmax sums to 1
    assert ((several > 0) & (several < 1)).all() and not np.allclose(several.sum(axis=1), 1.0)
    assert np.allclose(one.sum(axis=1), 1.0, atol=1e-5)
    with pytest.raises(TypeError, match="unexpected keyword arguments: actvation"):
        small_resnet((16, 16, 3), 3, widths=[4], actvation="sigmoid")


@pytest.mark.slow
def test_model_keras_loads_without_the_app(tmp_path):
    backbone = small_resnet((24, 24, 3), num_classes=3, widths=[8, 16])
    net = classifier(backbone, (24, 24))
    pixels = np.random.default_rng(0).integers(0, 256, (6, 24, 24, 3), dtype=np.uint8)
    expected = net.predict(pixels, verbose=0)  # what training feeds: the loader's uint8 batches
    path = tmp_path / "model.keras"
    write_model_keras(net, path, class_names=["ant", "bee", "cat"], image_size=[24, 24])
    np.save(tmp_path / "pixels.npy", pixels)
    script = f"""
import json, sys, zipfile
import numpy as np, keras
model = keras.saving.load_model({str(path)!r})
meta = json.loads(zipfile.ZipFile({str(path)!r}).read("app_metadata.json"))
probs = model.predict(np.load({str(tmp_path / 'pixels.npy')!r}).astype("float32"), verbose=0)
assert not any(m == "app" or m.startswith("app.") for m in sys.modules), "the app was imported"
print(json.dumps({{"probs": probs.tolist(), "meta": meta, "input_shape": list(model.input_shape)}}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    probs = np.array(out["probs"])
    assert np.allclose(probs, expected, atol=1e-5)
    assert list(probs.argmax(1)) == list(expected.argmax(1))
    assert out["meta"]["class_names"] == ["ant", "bee", "cat"] and out["meta"]["image_size"] == [24, 24]
    assert out["input_shape"] == [None, 24, 24, 3]
    assert read_metadata(path)["normalisation"] == {"mode": "unit", "scale": SCALE, "offset": OFFSET}
    # negative control: without the normalising layer the same pixels give other outputs
    assert not np.allclose(backbone.predict(pixels.astype("float32"), verbose=0), expected, atol=1e-3)
    assert np.allclose(backbone.predict(pixels * np.float32(SCALE) + OFFSET, verbose=0), expected, atol=1e-5)
    assert not list(tmp_path.glob(".*tmp*"))  # written under a temporary name, then renamed
    assert model_keras_problem(path) is None  # negative control for what follows
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    assert "damaged (BadZipFile" in model_keras_problem(path)
    middle = whole.index(b"app_metadata.json") - 200  # a byte of a member's data, the archive's index whole
    path.write_bytes(whole[:middle] + bytes([whole[middle] ^ 0xFF]) + whole[middle + 1:])
    assert "damaged" in model_keras_problem(path)
    path.unlink()
    assert model_keras_problem(path) == "it is missing"


def test_mixed_precision_trains_with_a_float32_output():
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        net = small_resnet((16, 16, 3), num_classes=2, widths=[8])
        net.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        x = np.random.default_rng(0).random((4, 16, 16, 3), dtype=np.float32)
        logs = net.train_on_batch(x, np.array([0, 1, 0, 1]), return_dict=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(logs["loss"])
    assert net.layers[1].compute_dtype == "float16" and net.output.dtype == "float32"
    assert isinstance(net.optimizer, keras.optimizers.LossScaleOptimizer)


def test_normalise_matches_the_constants():
    batch = np.array([[[[0, 128, 255]]]], np.uint8)
    out = normalise(batch)
    assert out.dtype == np.float32 and np.allclose(out, batch.astype(np.float64) * SCALE)
    assert out.max() == np.float32(1.0)


@pytest.mark.slow
def test_a_narrow_stage_trains_at_128_pixels():
    """A shortcut's strided 1×1 convolution over 8 channels crashed TensorFlow's CPU training
    step (oneDNN's kernel gradient) from about 48² on: one step, in a process of its own."""
    script = """
import numpy as np
from app.model import classifier, small_resnet
net = classifier(small_resnet((128, 128, 3), num_classes=2, widths=[8, 16]), (128, 128))
net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=False)
pixels = np.random.default_rng(0).integers(0, 256, (1, 128, 128, 3), dtype=np.uint8)
print(float(net.train_on_batch(pixels, np.array([1]))))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert np.isfinite(float(result.stdout.split()[-1]))


def test_a_narrow_shortcut_is_a_strided_one_by_one_convolution():
    """What the shortcut computes over fewer than 16 channels: a 1×1 convolution of stride 2."""
    import keras

    net = small_resnet((10, 10, 3), num_classes=2, widths=[8, 16, 32])
    pool = next(layer for layer in net.layers if isinstance(layer, keras.layers.MaxPooling2D))
    convolution = next(layer for layer in net.layers if isinstance(layer, keras.layers.Conv2D)
                       and tuple(layer.kernel.shape) == (1, 1, 8, 16))
    x = np.random.default_rng(0).standard_normal((2, 5, 5, 8)).astype(np.float32)
    expected = keras.ops.conv(x, convolution.kernel, strides=2)
    assert np.allclose(convolution(pool(x)), expected, atol=1e-6) and expected.shape == (2, 3, 3, 16)
    # negative control: the convolution without the pooling is another function
    assert convolution(x).shape == (2, 5, 5, 16)
    # 16 channels and more: the strided convolution itself, as in the default model
    assert sum(isinstance(layer, keras.layers.MaxPooling2D) for layer in net.layers) == 1
