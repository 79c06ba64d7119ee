"""The Keras CNN and model.keras, loaded in a fresh Python process that never imports the app."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from app.loader.boundary import OFFSET, SCALE, to_float32
from app.model import export, optimizer, read_metadata, small_resnet


def test_shapes_and_optimizers():
    net = small_resnet((40, 32, 3), num_classes=5, widths=[8, 16], blocks_per_stage=2)
    assert net.output_shape == (None, 5)
    assert sum(1 for layer in net.layers if layer.__class__.__name__ == "Add") == 4
    for name in ("adam", "adamw", "sgd", "rmsprop"):
        assert optimizer(name, 0.01).learning_rate.numpy() == np.float32(0.01)


def test_model_keras_loads_without_the_app(tmp_path):
    net = small_resnet((24, 24, 3), num_classes=3, widths=[8, 16])
    pixels = np.random.default_rng(0).integers(0, 256, (6, 24, 24, 3), dtype=np.uint8)
    expected = net.predict(to_float32(pixels), verbose=0)  # what training sees: the boundary's output
    path = tmp_path / "model.keras"
    export(net, path, class_names=["ant", "bee", "cat"], image_size=[24, 24], scale=SCALE, offset=OFFSET)
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
    assert read_metadata(path)["normalisation"] == {"scale": SCALE, "offset": OFFSET}
    # negative control: without the normalisation layer the same pixels give other outputs
    assert not np.allclose(net.predict(pixels.astype("float32"), verbose=0), expected, atol=1e-3)
    assert not list(tmp_path.glob(".*tmp*"))  # written under a temporary name, then renamed
