"""bench's tf_data mode: the pipeline a TensorFlow user writes does the same work a sample as
this loader (the same files, draft reduction, augmentation, seeds), and returns float32."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from app.augment import Augmenter
from app.bench.tf_data import dataset, ratios
from app.data.source import ArraySplit, FileSplit

TRANSFORMS = [{"_target_": "albumentations.RandomResizedCrop", "size": [32, 32], "scale": [0.3, 1.0]},
              {"_target_": "albumentations.HorizontalFlip"}]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    rng = np.random.default_rng(0)
    paths = []
    for i, (w, h, fmt) in enumerate([(256, 192, "JPEG"), (96, 128, "JPEG"), (64, 64, "PNG"), (200, 300, "JPEG")]):
        pixels = rng.integers(0, 256, (h // 8, w // 8, 3), np.uint8).repeat(8, 0).repeat(8, 1)  # some structure
        paths.append(root / f"{i}.{fmt.lower()}")
        Image.fromarray(pixels).save(paths[-1], fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return FileSplit(paths, [0, 1, 2, 0])


def test_each_file_is_reduced_as_the_draft_rule_says(split):
    # short sides 192, 96, (PNG), 200 against 40: 192/4 = 48 ≥ 40 > 192/8; 96/2; never a PNG
    assert ratios(split, 40).tolist() == [4, 2, 1, 4]
    assert ratios(split, None).tolist() == [1, 1, 1, 1]  # draft off: full decodes


def test_batches_are_the_augmented_samples_in_float32(split):
    augmenter = Augmenter(TRANSFORMS, (32, 32))
    pairs = np.array([(0, 3), (0, 1), (0, 2), (0, 0), (1, 3), (1, 1), (1, 2), (1, 0)])
    batches = list(dataset(split, augmenter, pairs, seed=7, batch_size=4).as_numpy_iterator())
    assert len(batches) == 2
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    assert images.dtype == np.float32 and images.shape == (8, 32, 32, 3) and 0 <= images.min() <= images.max() <= 1
    assert labels.tolist() == split.labels[pairs[:, 1]].tolist()
    for k, (epoch, index) in enumerate(pairs):  # what this loader's worker makes of the same sample
        expected = augmenter(split.read(int(index), augmenter.decode), 7, int(epoch), int(index))
        assert np.abs(images[k] * 255 - expected).mean() < 3, (epoch, index)
    # negative control: the next epoch's augmentation of a sample differs
    assert np.abs(images[0] - images[4]).mean() > 0.02


def test_an_array_source_is_refused():
    with pytest.raises(ValueError, match="data=cifar"):
        dataset(ArraySplit("unused.npy", [0], [0], "train"), Augmenter([], (32, 32)), np.zeros((1, 2), int),
                seed=0, batch_size=1)
