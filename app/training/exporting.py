"""The Keras side of `python -m app export`: a run's model rebuilt to compute in float32
(`float32_model`), put behind an input of uint8 pixels (`uint8_model`), written in one format by
Keras's own `Model.export` (`write_format`), and a written format loaded again with that format's
own runtime, not with Keras or this app (`runtime`): TensorFlow's SavedModel loader, onnxruntime,
LiteRT's interpreter. Imports Keras at its top: app/commands/export.py imports it once Keras is
loaded on TensorFlow. Never imports the loader or the commands."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np

from app.adapters import every_layer
from app.errors import DataError
from app.schema import EXPORT_WRITTEN

# what each format's exporter is and what limits it, for a refusal that says where to look
EXPORTER = {"tf_saved_model": "TensorFlow's SavedModel tracing (tf.function)",
            "onnx": "tf2onnx, which converts the traced TensorFlow graph op by op",
            "litert": "TensorFlow's LiteRT converter (builtin ops, else TF select ops)"}


def float32_model(net: keras.Model) -> keras.Model:
    """`net` with every layer computing in float32: a mixed_float16/mixed_bfloat16 run's model
    (whose layers keep their mixed policy in model.keras) rebuilt from its config under float32
    and given its weights, which mixed precision keeps in float32 already; `net` itself when no
    layer is mixed."""
    if not any(_policy(layer).startswith("mixed_") for layer in every_layer(net)):
        return net
    rebuilt = type(net).from_config(_in_float32(net.get_config()))
    rebuilt.set_weights(net.get_weights())
    return rebuilt


def _policy(layer) -> str:
    return getattr(layer.dtype_policy, "name", str(layer.dtype_policy))


def _in_float32(node):
    """A model config with each mixed dtype policy in it made float32."""
    if isinstance(node, dict):
        if node.get("class_name") == "DTypePolicy" and str(node["config"].get("name")).startswith("mixed_"):
            return {**node, "config": {**node["config"], "name": "float32"}}
        return {key: _in_float32(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_in_float32(value) for value in node]
    return node


def uint8_model(net: keras.Model) -> keras.Model:
    """`net` behind an input of uint8 pixels, cast to float32 inside the graph (the classifier's
    own input is float32; its first layer normalises), called once: Keras's ONNX exporter
    refuses a model never called."""
    shape = tuple(net.input_shape[1:])
    pixels = keras.Input(shape, dtype="uint8", name="image")
    wrapped = keras.Model(pixels, net(keras.ops.cast(pixels, "float32")), name=net.name)
    wrapped(np.zeros((1, *shape), np.uint8))
    return wrapped


def write_format(model: keras.Model, folder: Path, fmt: str) -> Path:
    """`model` written into `folder` as `fmt` (EXPORT_WRITTEN names the file); what the exporter cannot
    convert is a DataError naming the format, the layer where the message names one, and the
    exporter's own words."""
    path = Path(folder) / EXPORT_WRITTEN[fmt]
    logging.getLogger("tf2onnx").setLevel(logging.ERROR)  # its optimizer's retries print tracebacks it recovers from
    try:
        model.export(str(path), format=fmt, verbose=False)
    except Exception as error:  # noqa: BLE001 - any exporter's refusal is the same for the user
        words = " ".join(str(error).split())[:600] or type(error).__name__
        layer = named_layer(model, words)
        where = f" at layer {layer.name!r} ({type(layer).__name__})" if layer else ""
        raise DataError(f"export.format={fmt} cannot export this model{where}: {EXPORTER[fmt]} refused it "
                        f"({type(error).__name__}: {words}). This is a limit of that exporter, not of the run: "
                        "try another export.format, or a model whose layers it supports; nothing was written "
                        "into export.out.") from None
    return path


def named_layer(model: keras.Model, text: str):
    """The layer of `model` (nested models' too) whose name `text` mentions, the longest name
    first; None when it names none."""
    layers = sorted((layer for layer in every_layer(model) if layer is not model), key=lambda layer: -len(layer.name))
    return next((layer for layer in layers if layer.name in text), None)


def runtime(path: Path, fmt: str) -> Callable[[np.ndarray], np.ndarray]:
    """A function from a uint8 batch (N, H, W, 3) to probabilities, of the written `path` loaded
    with its format's own runtime."""
    if fmt == "tf_saved_model":
        import tensorflow as tf  # loaded already, under Keras

        loaded = tf.saved_model.load(str(path))
        return lambda batch: np.asarray(loaded.serve(tf.constant(batch)))
    if fmt == "onnx":
        import onnxruntime  # the export extra's, loaded only for this format

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda batch: session.run(None, {name: batch})[0]
    return _litert(path)


def _litert(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """LiteRT's interpreter over a .tflite file. Its graph comes with a batch of 1: the input
    is resized to each batch's size (the converter keeps the batch dimension resizable)."""
    from ai_edge_litert.interpreter import Interpreter  # the export extra's, loaded only for this format

    interpreter = Interpreter(model_path=str(path))
    given, taken = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    shape: list[tuple] = [()]

    def predict(batch: np.ndarray) -> np.ndarray:
        if shape[0] != batch.shape:
            interpreter.resize_tensor_input(given["index"], list(batch.shape))
            interpreter.allocate_tensors()
            shape[0] = batch.shape
        interpreter.set_tensor(given["index"], batch)
        interpreter.invoke()
        return interpreter.get_tensor(taken["index"]).copy()

    return predict
