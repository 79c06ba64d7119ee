"""What the replicas of a TensorFlow strategy (trainer.strategy=mirrored) each keep apart.
Keras's metric variables count each replica's share: a checkpoint inside an epoch keeps each
replica's copy, so a resumed epoch's figures are an unbroken one's to the last digit.
BatchNormalization's moving statistics are updated by each replica from its own share (Keras
gives them no aggregation), so the replicas drift apart, and validation, which runs on every
replica, would score other statistics than the checkpoint keeps (the first replica's): they are
averaged before validation and before a checkpoint. Never imports the loader."""

from __future__ import annotations

import keras
import numpy as np

from app.adapters import every_layer
from app.training.steps import build_metrics


def restore_metrics(net: keras.Model, saved: dict) -> None:
    """Keras's metric variables as a checkpoint inside an epoch saved them (a loaded model has
    not built them yet); under a strategy each replica's own counts, as they were (their sum
    split evenly would round otherwise, and a resumed run's figures differ in the last digit)."""
    build_metrics(net)
    for variable in net.metrics_variables:
        copies, kept = _replica_copies(variable), saved.get(variable.path + REPLICAS)
        if copies and kept and len(kept) == len(copies):
            for copy, value in zip(copies, kept, strict=True):
                copy.assign(np.asarray(value, variable.dtype))
        else:
            variable.assign(np.asarray(saved[variable.path], variable.dtype))


REPLICAS = "@replicas"  # a metric variable's key + this: its value on each replica


def metric_state(net: keras.Model) -> dict:
    """Keras's metric variables (summed over the replicas), and under a strategy each replica's."""
    state = {}
    for variable in net.metrics_variables:
        state[variable.path] = np.asarray(variable).tolist()
        if copies := _replica_copies(variable):
            state[variable.path + REPLICAS] = [np.asarray(copy).tolist() for copy in copies]
    return state


def _replica_copies(variable) -> list:
    """A metric variable's copy on each replica of a TensorFlow strategy (each replica counts its
    own share; read, they are summed); none elsewhere."""
    if keras.backend.backend() != "tensorflow":
        return []
    import tensorflow as tf  # not at the top: the JAX backend runs without it

    value = variable.value
    return list(value.values) if isinstance(value, tf.distribute.DistributedValues) else []


def average_moving_statistics(net: keras.Model) -> None:
    """Every BatchNormalization layer's moving mean and variance set, on every replica, to their
    mean over the replicas. Both are running means of batch figures, linear in them: the mean of
    the replicas' is the running mean of their shares' means (with equal shares, one device's
    moving mean exactly), whenever it is taken."""
    for layer in every_layer(net):
        if isinstance(layer, keras.layers.BatchNormalization) and layer.built:
            for variable in (layer.moving_mean, layer.moving_variance):
                copies = _replica_copies(variable)
                if len(copies) > 1:
                    mean = np.mean([np.asarray(copy) for copy in copies], axis=0)
                    for copy in copies:
                        copy.assign(mean.astype(variable.dtype))
