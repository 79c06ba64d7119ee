"""(image, mask) pairs through the real loader (build_loader: worker processes, the shared ring, the prefetch copy):
each batch's masks the files' own, in order, for any worker count, and moved with the images by a flip."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from loaders import assert_clean
from PIL import Image
from segmentation_data import IGNORE, write_texture_folder

from app.augment import augmenters
from app.config import conf_dir, load
from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.label_masks import read_mask
from app.loader.order import epoch_order
from app.loader.pipeline import Queue, build_loader, make_sample
from app.schema import register

N, SIZE, BATCH = 12, 32, 4
FLIP = {"_target_": "albumentations.HorizontalFlip", "p": 0.5}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """N 32×32 RGB PNGs and their palette-PNG masks (classes 0..2, 255 ignored), as a split, and what the files hold."""
    made = write_texture_folder(tmp_path_factory.mktemp("pairs"), train=N, val=0, size=SIZE, layout="flat")
    split = MaskedFileSplit([image for image, _, _ in made.samples], [mask for _, mask, _ in made.samples],
                            MaskRule(3, IGNORE))
    images = np.stack([np.asarray(Image.open(image)) for image, _, _ in made.samples])
    masks = np.stack([read_mask(mask, None) for _, mask, _ in made.samples])
    assert {0, 1, 2, IGNORE} <= set(np.unique(masks))  # every kind of value goes through
    return split, images, masks


def config():
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return load(compose("config", overrides=[f"data.image_size=[{SIZE},{SIZE}]", f"data.batch_size={BATCH}"]))


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_each_batchs_masks_are_the_files_in_order_and_a_flip_moves_them_with_the_images(workers, pairs, children):
    split, images, masks = pairs
    cfg = config()
    order = epoch_order(N, seed=cfg.seed, epoch=1, shuffle=True)
    queue = Queue(workers=workers, max_size=2, timeout_s=60)
    with build_loader(cfg, {"val": (split, []), "train": (split, [FLIP])}, queue=queue) as loader:
        slots = 2 if workers else 1  # in-process: one batch, built on demand
        assert loader.queue.max_size == slots
        assert loader.queue_bytes == slots * BATCH * SIZE * SIZE * (3 + 1)  # the masks' bytes beside the pixels'
        plain = list(loader.every_sample("val"))
        flipped = list(loader.batches("train", order, 1))
        # read with the ring still there, every slot since reused: a batch's masks left a view of it would show that
        assert [len(y) for _, y in plain] == [BATCH] * (N // BATCH)
        got_images, got_masks = np.concatenate([x for x, _ in plain]), np.concatenate([y for _, y in plain])
        assert got_masks.dtype == np.uint8 and got_masks.shape == (N, SIZE, SIZE)
        assert np.array_equal(got_masks, masks) and np.array_equal(got_images, images)
        assert not np.array_equal(got_masks[1:], masks[:-1])  # negative control: each mask is its own image's
    aug = augmenters(cfg.data, {"train": [FLIP]}, image_size=(SIZE, SIZE), masks=True)["train"]
    out_images, out_masks = np.concatenate([x for x, _ in flipped]), np.concatenate([y for _, y in flipped])
    seen = set()
    for position, index in enumerate(order):
        image, mask = out_images[position], out_masks[position]
        was_flipped = np.array_equal(image, np.fliplr(images[index]))
        assert was_flipped or np.array_equal(image, images[index]), index
        assert np.array_equal(mask, np.fliplr(masks[index]) if was_flipped else masks[index]), index
        alone = make_sample(split, aug, int(index), seed=cfg.seed, epoch=1)  # worker-free
        assert np.array_equal(alone[0], image) and np.array_equal(alone[1], mask), index
        seen.add(was_flipped)
    assert seen == {True, False}  # negative control: both cases were met, so each check above had teeth
    assert_clean(children)
