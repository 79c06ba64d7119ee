"""Where the uint8 → float32 cast runs: inside the compiled training step, on the device that
trains. Builds the app's classifier (its first layer takes the loader's uint8 batches), compiles
one training step on a uint8 batch and reports the cast ops of that step with their device:
TensorFlow's device placement log of the traced step, or the HLO JAX compiled for its device.
Usage: KERAS_BACKEND=tensorflow|jax python benchmarks/cast_placement.py  (gpu_check.sh runs it)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def model():
    import keras

    from app.model import classifier

    backbone = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3),
                                 keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2, activation="softmax")])
    net = classifier(backbone, (32, 32))
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return net


@contextlib.contextmanager
def captured(lines: list):
    """What TensorFlow's placement log writes (to both standard streams) while the block runs."""
    sys.stdout.flush()
    with tempfile.TemporaryFile() as log:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            log.seek(0)
            lines.extend(log.read().decode("utf-8", "replace").splitlines())


def tensorflow_casts(net, x, y) -> list[str]:
    """The casts TensorFlow placed while tracing and running the step, from its placement log
    (turned on before the model was built: `main`)."""
    lines: list[str] = []
    with captured(lines):
        net.train_on_batch(x, y)
    return sorted({line.split("] ", 1)[-1].strip() for line in lines
                   if "placer" in line and "(Cast)" in line and f"{net.name}_" in line})[:6]  # the model's own


def jax_casts(net, x, y) -> list[str]:
    """The fusions that take the u8 batch in the HLO JAX compiled for the training step (the
    cast, fused with the first layer's arithmetic), and the device it was compiled for."""
    import jax

    net.train_on_batch(x, y)  # builds what the step needs
    state = (net.trainable_variables, net.non_trainable_variables, net.optimizer.variables, net.metrics_variables)
    values = tuple([v.value for v in group] for group in state)
    compiled = jax.jit(net.train_step).lower(values, (x, y)).compile()
    device = jax.devices()[0]
    return [f"{line.strip().rstrip(' {')}  [compiled for {device.platform}:{device.id}, {device.device_kind}]"
            for line in compiled.as_text().splitlines() if re.match(r"%\S+ \(param\S*: u8\[[^]]*\]\) -> f32", line)][:6]


def main() -> None:
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.debugging.set_log_device_placement(True)
    with captured([]):  # building the model logs placements too: not the step's
        net = model()
    x, y = np.zeros((4, 32, 32, 3), np.uint8), np.zeros((4,), np.int64)
    found = (tensorflow_casts if backend == "tensorflow" else jax_casts)(net, x, y)
    print(f"{backend}: the step receives uint8; its casts to float32:" if found else
          f"{backend}: no uint8 cast found in the step")
    for line in found:
        print("  " + line)


if __name__ == "__main__":
    main()
