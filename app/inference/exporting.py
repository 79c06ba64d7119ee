"""The Keras side of export: the float32 model behind an integer input, written, then run by its format's runtime."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np

from app.adapters import every_layer
from app.errors import DataError
from app.model import first_layer, pixel_dtype
from app.schema import EXPORT_WRITTEN

# what each format's exporter is and what limits it, for a refusal that says where to look
EXPORTER = {"tf_saved_model": "TensorFlow's SavedModel tracing (tf.function)",
            "onnx": "tf2onnx, which converts the traced TensorFlow graph op by op",
            "litert": "TensorFlow's LiteRT converter (builtin ops, else TF select ops)"}


def float32_model(net: keras.Model) -> keras.Model:
    """`net` rebuilt from its config with every layer in float32, given its weights; `net` itself when none is mixed."""
    if not any(_policy(layer).startswith("mixed_") for layer in every_layer(net)):
        return net
    rebuilt = type(net).from_config(_in_float32(net.get_config()))
    rebuilt.set_weights(net.get_weights())
    return rebuilt


def _policy(layer) -> str:
    return getattr(layer.dtype_policy, "name", str(layer.dtype_policy))


def _in_float32(node):
    if isinstance(node, dict):
        if node.get("class_name") == "DTypePolicy" and str(node["config"].get("name")).startswith("mixed_"):
            return {**node, "config": {**node["config"], "name": "float32"}}
        return {key: _in_float32(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_in_float32(value) for value in node]
    return node


def integer_model(net: keras.Model) -> keras.Model:
    """`net` behind its images' integer input, cast in the graph, called once (Keras's ONNX exporter needs it)."""
    shape, dtype = tuple(net.input_shape[1:]), pixel_dtype(net)
    pixels = keras.Input(shape, dtype=dtype, name="image")
    taken = "uint16" if pixel_dtype(net) == "uint16" else "float32"  # app/model.py declares uint16 only
    wrapped = keras.Model(pixels, net(keras.ops.cast(pixels, taken)), name=net.name)
    wrapped(np.zeros((1, *shape), dtype))
    return wrapped


def integer_input(net: keras.Model) -> dict:
    """preprocessing.json's word on the input and its normalisation, where `net` does not take 8-bit RGB."""
    bands, dtype = int(net.input_shape[-1]), pixel_dtype(net)
    if (bands, dtype) == (3, "uint8"):
        return {}
    return {"input": {"dtype": dtype, "bands": bands, "range": [0, int(np.iinfo(dtype).max)],
                      "layout": f"NHWC (batch, height, width, {bands}), the bands as the run read them (data.channels)",
                      "batch": "any size"},
            "normalisation": {"where": f"inside the graph: feed the {dtype} values as they are", **first_layer(net)}}


def write_format(model: keras.Model, folder: Path, fmt: str) -> Path:
    """`model` written into `folder` as `fmt`; an exporter's refusal is a DataError naming the format (and layer)."""
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
    """The layer of `model` (nested ones' too) whose name `text` mentions, longest first; None if none."""
    layers = sorted((layer for layer in every_layer(model) if layer is not model), key=lambda layer: -len(layer.name))
    return next((layer for layer in layers if layer.name in text), None)


def runtime(path: Path, fmt: str) -> Callable[[np.ndarray], np.ndarray]:
    """A function from an integer batch (N, H, W, bands) to probabilities: `path` run by its format's own runtime."""
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
    """LiteRT's interpreter over a .tflite file, its batch-of-1 input resized to each batch."""
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
