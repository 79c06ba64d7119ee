"""The Keras side of export (app/inference/exporting.py) in this process: a mixed-precision model
rebuilt in float32, and a keras.applications backbone (no weights downloaded) written as ONNX and
read back with onnxruntime."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from app.inference.exporting import float32_model, integer_model, named_layer, runtime, write_format
from app.model import build, classifier, small_resnet, write_model_keras
from app.schema import KerasAppConfig


def policies(net) -> set[str]:
    found = set()
    for layer in net.layers:
        found.add(layer.dtype_policy.name)
        if isinstance(layer, keras.Model):
            found |= policies(layer)
    return found


@pytest.mark.slow
def test_a_mixed_bfloat16_model_is_rebuilt_in_float32(tmp_path):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        trained = classifier(small_resnet((16, 16, 3), 3, widths=[8]), (16, 16))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    write_model_keras(trained, tmp_path / "model.keras", class_names=["a", "b", "c"], image_size=[16, 16])
    saved = keras.saving.load_model(tmp_path / "model.keras")
    assert "mixed_bfloat16" in policies(saved)  # negative control: model.keras keeps the mixed policy
    rebuilt = float32_model(saved)
    assert policies(rebuilt) == {"float32"} and rebuilt is not saved
    images = np.random.default_rng(0).integers(0, 256, (4, 16, 16, 3)).astype(np.float32)
    mixed, single = saved.predict(images, verbose=0), rebuilt.predict(images, verbose=0)
    assert single.dtype == np.float32 and np.abs(mixed - single).max() < 0.05  # the same weights
    assert float32_model(rebuilt) is rebuilt  # a float32 model is exported as it is


@pytest.mark.slow
def test_a_keras_app_backbone_exports_to_onnx(tmp_path):
    net = build(KerasAppConfig(name="MobileNetV3Small", weights=None), (32, 32), 3)
    wrapped = integer_model(net)
    assert wrapped.input.dtype == "uint8" and named_layer(wrapped, "no layer here") is None
    assert named_layer(wrapped, f"op in layer {net.layers[1].name}: unsupported") is net.layers[1]
    path = write_format(wrapped, tmp_path, "onnx")
    images = np.random.default_rng(1).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    ours = net.predict(images.astype(np.float32), verbose=0)
    theirs = runtime(path, "onnx")(images)
    assert np.abs(theirs - ours).max() < 1e-4
    # untrained, the backbone answers nearly alike for every image: the ONNX graph is checked against
    # Keras, and tests/cli/test_export_cli.py checks a trained model's varied answers
    assert theirs.shape == (3, 3) and np.allclose(theirs.sum(axis=1), 1, atol=1e-5)
