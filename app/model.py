"""The models (the small ResNet, keras.applications backbones, or any builder by `_target_`), the float32 boundary
that is their first layer (uint8 in, on the device), and the self-contained model.keras exported from them."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import keras
import numpy as np
from hydra.utils import instantiate
from keras import layers

from app.decoders import BN_MOMENTUM, check_divisible, conv_bn, unet_decoder
from app.errors import ConfigError, config_error
from app.families import FAMILIES, KERAS_APP

# The float32 boundary: the classifier's first layer turns RGB values 0..255 (the loader's uint8
# batches) into what the backbone expects, on the device that trains. "unit": x·SCALE + OFFSET,
# for the small ResNet and any builder of the user's; keras.applications families each have
# theirs (app/backbones.py). model.keras's metadata names it.
SCALE = 1.0 / 255.0
OFFSET = 0.0
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)  # keras.applications.imagenet_utils, mode="caffe"
TORCH_MEAN, TORCH_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # mode="torch", on [0, 1]

log = logging.getLogger(__name__)
METADATA_FILE = "app_metadata.json"  # inside model.keras; Keras ignores files it does not know
# TensorFlow's CPU kernels (oneDNN) compute the kernel gradient of a strided 1×1 convolution over
# fewer input channels than oneDNN's block (16 with AVX-512, 8 with AVX2) past the end of a work
# buffer: the training step segfaults or aborts ("double free or corruption"), e.g. model.widths=
# [8,16] at 128². The small ResNet keeps such a shortcut off that kernel (`_projection`).
ONEDNN_BLOCK = 16


def small_resnet(input_shape: Sequence[int], num_classes: int, widths: Sequence[int] = (32, 64, 128),
                 blocks_per_stage: int = 1, **head) -> keras.Model:
    """A small ResNet: a stride-2 stem, stages halving H and W, a Dropout-Dense head; output="pixels": a U-Net on it."""
    dropout, activation = head.pop("dropout", 0.2), head.pop("activation", "softmax")
    output = head.pop("output", "image")
    if head:
        raise TypeError(f"small_resnet() got unexpected keyword arguments: {', '.join(head)}")
    if output == "pixels":
        check_divisible(input_shape[:2], 2 ** len(widths))
    inputs = keras.Input(tuple(input_shape), name="pixels")
    x = conv_bn(inputs, widths[0], stride=2)
    skips = []
    for stage, width in enumerate(widths):
        for block in range(blocks_per_stage):
            x = _residual(x, width, stride=2 if stage > 0 and block == 0 else 1)
        skips.append(x)
    if output == "pixels":  # the input's own size is a level too: one conv_bn on it
        outputs = unet_decoder([conv_bn(inputs, widths[0]), *skips], num_classes, [widths[0], *widths[:-1]],
                               activation=activation, dropout=dropout)
        return keras.Model(inputs, outputs, name="small_unet")
    x = layers.GlobalAveragePooling2D()(x)
    if dropout:
        x = layers.Dropout(dropout)(x)
    # float32 output even under mixed precision: softmax in float16 loses small probabilities.
    outputs = layers.Dense(num_classes, activation=activation, dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="small_resnet")


def _residual(x, width: int, stride: int):
    shortcut = x
    if stride != 1 or x.shape[-1] != width:
        shortcut = _projection(x, width, stride)
    y = conv_bn(x, width, stride)
    y = conv_bn(y, width, relu=False)
    return layers.ReLU()(layers.Add()([shortcut, y]))


def _projection(x, width: int, stride: int):
    """The shortcut's 1×1 convolution, kept off oneDNN's faulty kernel gradient (ONEDNN_BLOCK)."""
    # over fewer channels than the block, a strided one takes every `stride`-th pixel first, then convolves with
    # stride 1: the same arithmetic
    if stride != 1 and x.shape[-1] < ONEDNN_BLOCK:
        x = layers.MaxPooling2D(pool_size=1, strides=stride)(x)
        stride = 1
    x = layers.Conv2D(width, 1, strides=stride, use_bias=False)(x)
    return layers.BatchNormalization(momentum=BN_MOMENTUM)(x)


def normalise(batch: np.ndarray) -> np.ndarray:
    """The "unit" first layer's arithmetic in numpy, for code that feeds a model without it (bench's PyDataset)."""
    out = np.multiply(batch, np.float32(SCALE), dtype=np.float32)
    if OFFSET:
        out += np.float32(OFFSET)
    return out


def normaliser(mode: str | dict, dtype: str = "uint8") -> layers.Layer:
    """The first layer: integers in, float32 out as `mode` says under any policy; stock layers, so plain Keras loads."""
    # RGB 0..255 (unit, tf, torch, caffe), or {"mean", "std"} a band (any bands, in `dtype`'s units); float32 so that
    # caffe's mean keeps its decimals
    if isinstance(mode, dict):  # (x − mean) / std a band: constants, not weights, so an export holds them
        scale = [1.0 / s for s in mode["std"]]
        return layers.Rescaling(scale, [-m * k for m, k in zip(mode["mean"], scale, strict=True)], name="normalise",
                                dtype="float32")
    if mode == "unit":
        return layers.Rescaling(1.0 / np.iinfo(dtype).max, OFFSET, name="normalise", dtype="float32")
    if mode == "tf":
        return layers.Rescaling(1.0 / 127.5, -1.0, name="normalise", dtype="float32")
    if mode == "torch":
        return layers.Normalization(mean=[255 * m for m in TORCH_MEAN], variance=[(255 * s) ** 2 for s in TORCH_STD],
                                    name="normalise", dtype="float32")
    if mode == "caffe":  # RGB → BGR and minus the mean, as one fixed 1×1 convolution
        swap = np.eye(3, dtype=np.float32)[::-1].reshape(1, 1, 3, 3)
        return layers.Conv2D(3, 1, name="normalise", dtype="float32", trainable=False,
                             kernel_initializer=keras.initializers.Constant(swap),
                             bias_initializer=keras.initializers.Constant(-np.array(CAFFE_MEAN_BGR, np.float32)))
    if mode == "none":
        return layers.Identity(name="normalise", dtype="float32")
    raise ValueError(f"unknown normalisation {mode!r}")


def classifier(backbone: keras.Model, image_size: Sequence[int], normalisation: str | dict = "unit", *, bands: int = 3,
               dtype: str = "uint8") -> keras.Model:
    """What `train` fits: integers in, normalised on the device (no float32 batch in host memory), probabilities out."""
    # uint16 declared, so a feed's signature and an export know it; 8-bit stays Keras's float input, as before
    pixels = keras.Input((*image_size, bands), name="image", dtype="uint16" if dtype == "uint16" else None)
    return keras.Model(pixels, backbone(normaliser(normalisation, dtype)(pixels)), name="classifier")


def build(model_config, image_size: Sequence[int], num_classes: int, pixels=None, **head) -> keras.Model:
    """The classifier a model config describes, behind the backbone's normalisation; else a ConfigError."""
    # its `_target_` called with the input shape, class count, other keys, `kwargs` and the task's `head`: activation,
    # output ("image": one prediction an image; "pixels": one a pixel at the input's size, data.task=segmentation)
    activation, output = head.pop("activation", "softmax"), head.pop("output", "image")
    if head or output not in ("image", "pixels"):
        raise TypeError(f"build() takes activation and output (image or pixels), not {head or output!r}")
    spec = dataclasses.asdict(model_config)
    # softmax and image are every builder's own defaults: a user's builder without them still builds a one-label head
    extra = {**(spec.pop("kwargs", None) or {}), **({} if activation == "softmax" else {"activation": activation}),
             **({} if output == "image" else {"output": output})}
    bands, dtype = (3, "uint8") if pixels is None else (pixels.bands, pixels.dtype)
    standard = None if pixels is None or pixels.mean is None else {"mean": pixels.mean, "std": pixels.std}
    own_preprocessing = spec["_target_"] == KERAS_APP and (bands, dtype) == (3, "uint8")
    if own_preprocessing and standard:
        raise config_error("data.normalize", standard, "null with a keras.applications backbone on 8-bit RGB: it "
                           "normalises them as its family does (other bands or types take data.normalize)")
    try:
        backbone = instantiate(spec, input_shape=(*image_size, bands), num_classes=num_classes, _convert_="all",
                               **extra)
    except Exception as error:  # instantiate wraps the target's own error (a Keras ValueError, say)
        cause = error.__cause__ or error
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"config key `model` ({spec['_target_']}) cannot be built: "
                          f"{' '.join(str(cause).split())}") from None
    if not isinstance(backbone, keras.Model):
        raise config_error("model._target_", spec["_target_"], f"it returned a {type(backbone).__name__}; a model "
                           "builder is called as f(input_shape=(H, W, 3), num_classes=N, **model.kwargs) and returns "
                           "a keras.Model")
    wanted = (None, *image_size, num_classes)
    if output == "pixels" and tuple(backbone.output_shape) != wanted:
        raise config_error("model._target_", spec["_target_"], f"it gave outputs of shape {backbone.output_shape}, "
                           f"not {wanted}: a model builder for data.task=segmentation returns one softmax a pixel, "
                           "shape (batch, H, W, classes)")
    normalisation = FAMILIES[spec["name"]].normalisation if own_preprocessing else (standard or "unit")
    return classifier(backbone, image_size, normalisation, bands=bands, dtype=dtype)


def import_builder(model_config) -> None:
    """Import `model._target_`'s module so the custom layers it registers load (from a checkpoint or model.keras)."""
    module = model_config._target_.rpartition(".")[0]
    try:
        importlib.import_module(module)
    except ImportError as error:  # the load then names the class it misses
        log.warning("model._target_'s module %s does not import (%s); custom layers in it will not load", module,
                    error)


def memory_facts(net: keras.Model, precision: str) -> dict[str, int]:
    """What `net` holds on its device (plan.ModelFacts' fields): variables, optimizer state, a sample's activations."""
    # the optimizer built if not yet; every layer's output in `precision`'s compute dtype, nested models' included,
    # the first layer's not
    def nbytes(variables) -> int:
        return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)

    optimizer = getattr(net, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        optimizer.build(net.trainable_variables)
    per_value = 2 if precision.startswith("mixed") else 4
    computing = [layer for layer in _all_layers(net)
                 if not isinstance(layer, (keras.Model, layers.InputLayer)) and layer.name != "normalise"]
    outputs = sum(int(np.prod(value.shape[1:])) for layer in computing for value in keras.tree.flatten(layer.output))
    return dict(parameter_bytes=nbytes(net.weights),
                optimizer_bytes=nbytes(optimizer.variables) if optimizer else 0,
                activation_bytes_per_sample=outputs * per_value, layers=len(computing))


def _all_layers(net: keras.Model):
    for layer in net.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _all_layers(layer)


def backbone_of(net: keras.Model) -> keras.Model | None:
    """The keras.applications model inside a keras_app classifier (what freeze_backbone freezes)."""
    inner = next((layer for layer in net.layers if isinstance(layer, keras.Model)), None)
    return next((layer for layer in inner.layers if isinstance(layer, keras.Model)), None) if inner else None


def write_model_keras(model: keras.Model, path: Path, *, class_names: Sequence[str], image_size: Sequence[int]) -> None:
    """Save a `classifier` atomically with its class names, input size and normalisation, loadable by plain Keras."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp.keras")
    bands, dtype = model.input_shape[-1], pixel_dtype(model)
    metadata = {"class_names": list(class_names), "image_size": list(image_size), "bands": bands, "dtype": dtype,
                "input": ("RGB pixel values 0..255, shape (batch, H, W, 3)" if (bands, dtype) == (3, "uint8") else
                          f"{dtype} values of {bands} bands, shape (batch, H, W, {bands})"),
                "normalisation": first_layer(model)}
    try:
        # uncompiled: the recipe's own loss and metrics stay out, so plain Keras loads it
        keras.Model(model.inputs, model.outputs, name=model.name).save(tmp)
        with zipfile.ZipFile(tmp, "a") as archive:
            archive.writestr(METADATA_FILE, json.dumps(metadata, indent=2))
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: the previous model.keras stays whole
        tmp.unlink(missing_ok=True)
        raise


def read_metadata(path: Path) -> dict:
    """Class names, image size and normalisation stored in a model.keras (plain zipfile + json)."""
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read(METADATA_FILE))


def model_keras_problem(path: Path) -> str | None:
    """What is wrong with a model.keras `export` wrote (missing, damaged, no metadata), or None when it is whole."""
    if Path(path).is_dir():
        return "it is a folder, not the model's file: move the folder away"
    if not Path(path).is_file():
        return "it is missing"
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
            json.loads(archive.read(METADATA_FILE))
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as error:
        return f"it is damaged ({type(error).__name__}: {error})"
    return f"it is damaged ({broken} inside fails its CRC check)" if broken else None


def pixel_dtype(net: keras.Model) -> str:
    """The integer type of the images `net` takes: uint16 where its input says so (`classifier`), else uint8."""
    return "uint16" if str(getattr(net.inputs[0], "dtype", "")) == "uint16" else "uint8"


def first_layer(model: keras.Model) -> dict:
    """A classifier's first-layer normalisation, read back from the layer: its mode, a Rescaling's scale and offset."""
    layer = model.get_layer("normalise")
    if not isinstance(layer, layers.Rescaling):
        return {"mode": {layers.Normalization: "torch", layers.Conv2D: "caffe", layers.Identity: "none"}[type(layer)]}
    if np.ndim(layer.scale):
        return {"mode": "standard", "scale": list(layer.scale), "offset": list(layer.offset)}
    if np.isclose(layer.scale, 1 / 127.5) and np.isclose(layer.offset, -1.0):
        return {"mode": "tf"}
    return {"mode": "unit", "scale": float(layer.scale), "offset": float(layer.offset)}
