"""data.task=segmentation's loss and scores (a class a pixel), registered with Keras so checkpoints load."""

from __future__ import annotations

import keras
from keras import ops

from app.measures import EPSILON

KINDS = ("crossentropy", "dice", "crossentropy+dice")
DICE_SMOOTHING = 1.0  # a class absent from a sample's truth and prediction scores Dice 1, not 0/0


def _labels(y_true, y_pred):
    # (B, H, W) class indices as int32, a trailing axis of 1 dropped
    labels = ops.cast(y_true, "int32")
    return ops.squeeze(labels, -1) if len(labels.shape) == len(y_pred.shape) else labels


def _kept(labels, ignore_index, classes: int):
    # 1.0 where a pixel counts: a class, not `ignore_index` (any other value outside the classes counts nowhere either:
    # a segment id out of range fails on TensorFlow)
    kept = ops.logical_and(labels >= 0, labels < classes)
    if ignore_index is not None:
        kept = ops.logical_and(kept, labels != ignore_index)
    return ops.cast(kept, "float32")


@keras.saving.register_keras_serializable(package="app")
class PixelLoss(keras.losses.Loss):
    """One loss a sample (Keras weighs and reduces): crossentropy, Dice or their sum; ignored pixels weigh nothing."""

    def __init__(self, classes: int, kind: str = "crossentropy", ignore_index: int | None = None,
                 class_weights=None, **kwargs):
        if kind not in KINDS:
            raise ValueError(f"PixelLoss kind {kind!r} is none of {', '.join(KINDS)}")
        if class_weights is not None and len(class_weights) != classes:
            raise ValueError(f"{len(class_weights)} class weights for {classes} classes")
        super().__init__(**{"name": "pixel_loss", **kwargs})
        self.classes, self.kind, self.ignore_index = int(classes), kind, ignore_index
        self.class_weights = None if class_weights is None else [float(w) for w in class_weights]

    def call(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        labels = _labels(y_true, y_pred)
        kept = _kept(labels, self.ignore_index, self.classes)
        truth = ops.one_hot(ops.where(kept > 0, labels, 0), self.classes) * ops.expand_dims(kept, -1)
        weights = ops.ones((self.classes,)) if self.class_weights is None else ops.convert_to_tensor(
            self.class_weights, "float32")
        loss = 0.0
        if self.kind != "dice":  # PyTorch's weighted mean: Σ w[y]·−log p_y / Σ w[y] over the sample's kept pixels
            log_p = ops.log(ops.clip(y_pred, EPSILON, 1.0 - EPSILON))
            weight = ops.sum(truth * weights, axis=-1)
            nll = -ops.sum(truth * log_p, axis=-1) * weight
            loss = ops.divide_no_nan(ops.sum(nll, axis=(1, 2)), ops.sum(weight, axis=(1, 2)))
        if self.kind != "crossentropy":
            guess = y_pred * ops.expand_dims(kept, -1)
            overlap = ops.sum(guess * truth, axis=(1, 2))
            dice = (2.0 * overlap + DICE_SMOOTHING) / (
                ops.sum(guess, axis=(1, 2)) + ops.sum(truth, axis=(1, 2)) + DICE_SMOOTHING)
            loss = loss + 1.0 - ops.sum(dice * weights, axis=-1) / ops.sum(weights)
        return loss

    def get_config(self):
        return {**super().get_config(), "classes": self.classes, "kind": self.kind,
                "ignore_index": self.ignore_index, "class_weights": self.class_weights}


@keras.saving.register_keras_serializable(package="app")
class PixelScores(keras.metrics.Metric):
    """Pixels counted by (true, argmax) class; `miou`, `iou_<class>`, `dice`, `pixel_accuracy` as app/measures.py's."""

    def __init__(self, class_names, ignore_index: int | None = None, **kwargs):
        super().__init__(**{"name": "pixel_scores", **kwargs})
        self.class_names, self.ignore_index = [str(c) for c in class_names], ignore_index
        classes = len(self.class_names)
        self.confusion = self.add_variable(shape=(classes * classes,), initializer="zeros", name="confusion")

    def update_state(self, y_true, y_pred, sample_weight=None):
        classes = len(self.class_names)
        labels = _labels(y_true, y_pred)
        weight = _kept(labels, self.ignore_index, classes)
        if sample_weight is not None:  # weight 0: a padding row counts nowhere
            row = ops.cast(ops.reshape(sample_weight, (-1,)), "float32")
            weight = weight * ops.reshape(row, (-1,) + (1,) * (len(weight.shape) - 1))
        cell = ops.where(weight > 0, labels, 0) * classes + ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        self.confusion.assign_add(ops.segment_sum(ops.reshape(weight, (-1,)), ops.reshape(cell, (-1,)),
                                                  classes * classes))

    def result(self):
        classes = len(self.class_names)
        confusion = ops.reshape(self.confusion, (classes, classes))
        hits = ops.diagonal(confusion)
        both = ops.sum(confusion, axis=1) + ops.sum(confusion, axis=0)  # a class's true and predicted pixels
        defined = ops.cast(both > 0, "float32")  # seen as true or predicted: else IoU and Dice are 0/0
        iou = ops.divide_no_nan(hits, both - hits)
        dice = ops.divide_no_nan(2.0 * hits, both)
        return {"miou": ops.divide_no_nan(ops.sum(iou * defined), ops.sum(defined)),
                **{f"iou_{name}": iou[i] for i, name in enumerate(self.class_names)},
                "dice": ops.divide_no_nan(ops.sum(dice * defined), ops.sum(defined)),
                "pixel_accuracy": ops.divide_no_nan(ops.sum(hits), ops.sum(confusion))}

    def reset_state(self):
        self.confusion.assign(ops.zeros(self.confusion.shape, self.confusion.dtype))

    def get_config(self):
        return {**super().get_config(), "class_names": self.class_names, "ignore_index": self.ignore_index}
