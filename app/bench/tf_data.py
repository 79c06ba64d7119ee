"""`bench`'s tf.data baseline as users write it (decode_jpeg at draft `ratio`, AUTOTUNE); like theirs, ignores EXIF."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from app.data.pixels.headers import header_draft
from app.data.source import FileSplit
from app.model import OFFSET, SCALE

RATIOS = (1, 2, 4, 8)  # what decode_jpeg's `ratio` takes


def ratios(split: FileSplit, min_short_side: int | None) -> np.ndarray:
    """Each file's decode_jpeg ratio by the draft rule (`min_short_side`, None: off); 1 for a non-JPEG."""
    return np.array([(header_draft(path, min_short_side) or (0, 0, 1))[2] for path in split.paths], np.int64)


def dataset(split: FileSplit, augmenter, pairs: np.ndarray, *, seed: int, batch_size: int) -> tf.data.Dataset:
    """Batches of (float32 images, labels) over `pairs`, each row a sample's (epoch, index)."""
    if not isinstance(split, FileSplit):
        raise ValueError("the tf_data mode reads image files (tf.io.read_file); this data source holds an "
                         "array (data=cifar) or a prepared copy's shards (data=prepared): use data=synthetic or "
                         "data=folder, or leave tf_data out of bench.modes")
    indices = pairs[:, 1]
    branch = np.searchsorted(RATIOS, ratios(split, augmenter.decode.min_short_side)[indices]).astype(np.int32)
    height, width = augmenter.image_size

    def augment(image, epoch, index):
        return augmenter(image, seed, int(epoch), int(index))

    def load(path, label, epoch, index, branch):
        raw = tf.io.read_file(path)
        decoders = [lambda r=r: tf.io.decode_jpeg(raw, channels=3, ratio=r) for r in RATIOS[1:]]
        image = tf.switch_case(branch, [lambda: tf.io.decode_image(raw, channels=3, expand_animations=False),
                                        *decoders])
        image = tf.numpy_function(augment, [image, epoch, index], tf.uint8, stateful=False)
        image.set_shape((height, width, 3))
        return tf.cast(image, tf.float32) * SCALE + OFFSET, label

    slices = (np.asarray(split.paths)[indices], split.labels[indices], pairs[:, 0], indices, branch)
    return (tf.data.Dataset.from_tensor_slices(slices)
            .map(load, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))
