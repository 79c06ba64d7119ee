"""`bench`'s tf.data baseline as users write it (decode_jpeg at draft `ratio`, AUTOTUNE); like theirs, ignores EXIF."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from app.data.pixels.headers import header_draft
from app.data.pixels.label_masks import read_mask
from app.data.source import FileSplit
from app.model import OFFSET, SCALE

RATIOS = (1, 2, 4, 8)  # what decode_jpeg's `ratio` takes


def ratios(split: FileSplit, min_short_side: int | None) -> np.ndarray:
    """Each file's decode_jpeg ratio by the draft rule (`min_short_side`, None: off); 1 for a non-JPEG."""
    return np.array([(header_draft(path, min_short_side) or (0, 0, 1))[2] for path in split.paths], np.int64)


def dataset(split: FileSplit, augmenter, pairs: np.ndarray, *, seed: int, batch_size: int) -> tf.data.Dataset:
    """Batches of (float32 images, targets) over `pairs`, each row a sample's (epoch, index); the targets are the
    split's labels, or the masks (read_mask, augmented with their images) where a sample is an (image, mask) pair."""
    if not isinstance(split, FileSplit):
        raise ValueError("the tf_data mode reads image files (tf.io.read_file); this data source holds an "
                         "array (data=cifar) or a prepared copy's shards (data=prepared): use data=synthetic or "
                         "data=folder, or leave tf_data out of bench.modes")
    indices = pairs[:, 1]
    branch = np.searchsorted(RATIOS, ratios(split, augmenter.decode.min_short_side)[indices]).astype(np.int32)
    height, width = augmenter.image_size

    def decoded(path, branch):
        raw = tf.io.read_file(path)
        decoders = [lambda r=r: tf.io.decode_jpeg(raw, channels=3, ratio=r) for r in RATIOS[1:]]
        return tf.switch_case(branch, [lambda: tf.io.decode_image(raw, channels=3, expand_animations=False),
                                       *decoders])

    def augment(image, epoch, index):
        return augmenter(image, seed, int(epoch), int(index))

    def augment_pair(image, mask, epoch, index):
        return augmenter((image, mask), seed, int(epoch), int(index))

    def floats(image):
        image.set_shape((height, width, 3))
        return tf.cast(image, tf.float32) * SCALE + OFFSET

    def load(path, label, epoch, index, branch):
        image = tf.numpy_function(augment, [decoded(path, branch), epoch, index], tf.uint8, stateful=False)
        return floats(image), label

    def load_pair(path, mask_path, epoch, index, branch):
        mask = tf.numpy_function(lambda p: read_mask(p.decode(), None), [mask_path], split.mask_dtype, stateful=False)
        image, mask = tf.numpy_function(augment_pair, [decoded(path, branch), mask, epoch, index],
                                        (tf.uint8, split.mask_dtype), stateful=False)
        mask.set_shape((height, width))
        return floats(image), mask

    # a sample's target: its label, or its mask's path where a sample is an (image, mask) pair
    targets, load_one = ((split.labels[indices], load) if split.mask_dtype is None
                         else (np.asarray(split.masks)[indices], load_pair))
    slices = (np.asarray(split.paths)[indices], targets, pairs[:, 0], indices, branch)
    return (tf.data.Dataset.from_tensor_slices(slices)
            .map(load_one, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))
