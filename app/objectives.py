"""The recipe's own Keras objects, registered so checkpoints load: sparse crossentropy with label smoothing (Keras's
sparse loss has none) and the recall of each class; model.keras is exported uncompiled, so plain Keras loads it."""

from __future__ import annotations

import keras
from keras import ops

EPSILON = 1e-7  # keras.backend.epsilon(): Keras's crossentropy clips probabilities to [ε, 1 − ε]


@keras.saving.register_keras_serializable(package="app")
class SmoothedSparseCrossentropy(keras.losses.Loss):
    """Crossentropy of probabilities against integer labels smoothed by `smoothing` ε, as Keras scores one-hot labels:
    (1 − ε) × −log p(y) + ε × the mean over classes of −log p."""

    def __init__(self, smoothing: float = 0.0, name: str = "smoothed_sparse_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.smoothing = smoothing

    def call(self, y_true, y_pred):
        log_p = ops.log(ops.clip(y_pred, EPSILON, 1.0 - EPSILON))
        labels = ops.expand_dims(ops.cast(ops.reshape(y_true, (-1,)), "int32"), -1)
        picked = ops.squeeze(ops.take_along_axis(log_p, labels, axis=-1), -1)
        return -(1.0 - self.smoothing) * picked - self.smoothing * ops.mean(log_p, axis=-1)

    def get_config(self):
        return {**super().get_config(), "smoothing": self.smoothing}


@keras.saving.register_keras_serializable(package="app")
class PerClassRecall(keras.metrics.Metric):
    """Of each class's samples, the share predicted as that class (argmax): one value a class, `recall_<class name>`."""

    def __init__(self, class_names, name: str = "per_class_recall", **kwargs):
        super().__init__(name=name, **kwargs)
        self.class_names = [str(c) for c in class_names]
        shape = (len(self.class_names),)
        self.hits = self.add_variable(shape=shape, initializer="zeros", name="hits")
        self.seen = self.add_variable(shape=shape, initializer="zeros", name="seen")

    def update_state(self, y_true, y_pred, sample_weight=None):
        classes = len(self.class_names)
        truth = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), classes)
        if sample_weight is not None:  # weight 0: a padding row (app/training/shares.py) counts nowhere
            truth = truth * ops.expand_dims(ops.cast(ops.reshape(sample_weight, (-1,)), truth.dtype), -1)
        guess = ops.one_hot(ops.argmax(y_pred, axis=-1), classes)
        self.seen.assign_add(ops.sum(truth, axis=0))
        self.hits.assign_add(ops.sum(truth * guess, axis=0))

    def result(self):
        recall = ops.divide_no_nan(self.hits, self.seen)
        return {f"recall_{name}": recall[i] for i, name in enumerate(self.class_names)}

    def reset_state(self):
        self.hits.assign(ops.zeros(self.hits.shape, self.hits.dtype))
        self.seen.assign(ops.zeros(self.seen.shape, self.seen.dtype))

    def get_config(self):
        return {**super().get_config(), "class_names": self.class_names}
