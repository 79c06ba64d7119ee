"""Backbones from `keras.applications` (`model=keras_app model.name=...`, the families in
app/families.py): the model built on one, no top, global pooling, a new head (dropout, a float32
softmax), with ImageNet weights, a weights file, or none; a failed download said plainly.
Keras is imported inside the functions, so `cache_dir` needs none. Never imports the loader.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from app.errors import config_error


def keras_app(input_shape, num_classes: int, name: str, weights: str | None = None, **settings):
    """The `keras.applications` model `name` without its top, pooled (`pooling`: avg or max),
    then `dropout` and a Dense softmax over `num_classes` in float32. Its input is what the
    family's preprocess_input returns (the classifier's first layer does that). `weights`:
    None, "imagenet" (Keras downloads once into $KERAS_HOME/models) or a weights file.
    Other `settings` go to the application (`alpha` for MobileNet, say)."""
    import keras

    pooling, dropout = settings.pop("pooling", "avg"), settings.pop("dropout", 0.2)
    settings.pop("freeze_backbone", None)  # the trainer freezes, after building the optimizer over everything
    with _downloads_named(name, weights):
        base = getattr(keras.applications, name)(include_top=False, weights=weights, input_shape=tuple(input_shape),
                                                 pooling=pooling, **settings)
    inputs = keras.Input(tuple(input_shape), name="pixels")
    x = base(inputs)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    # float32 output even under mixed precision: softmax in float16 loses small probabilities.
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"keras_app_{name.lower()}")


def cache_dir() -> Path:
    """Where Keras keeps downloaded weights: $KERAS_HOME/models, ~/.keras/models by default."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras") / "models"


@contextlib.contextmanager
def _downloads_named(name: str, weights: str | None):
    """A failed download of ImageNet weights (no network, say) as a config error that names the
    file Keras wanted and where to put it."""
    if weights != "imagenet":
        yield
        return
    from keras.src.utils import file_utils  # where keras.applications fetch their weights

    real, wanted = file_utils.get_file, []

    def get_file(fname=None, origin=None, *args, **kwargs):
        wanted.append((fname, origin))
        return real(fname, origin, *args, **kwargs)

    file_utils.get_file = get_file
    try:
        yield
    except Exception as error:
        if not wanted:
            raise
        fname, origin = wanted[-1]
        raise config_error("model.weights", weights, f"Keras could not fetch {fname} for {name} from {origin} "
                           f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}). "
                           f"Download it where there is a network and put it in {cache_dir()} (the cache "
                           f"folder, $KERAS_HOME/models), or give its path: model.weights=/path/to/{fname}") from None
    finally:
        file_utils.get_file = real
