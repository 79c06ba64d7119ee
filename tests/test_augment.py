"""Augmentation: strict building, per-sample seeding, the draft-decode size rule."""

from __future__ import annotations

import pickle
import threading

import albumentations as A
import numpy as np
import pytest

from app.augment import Augmenter
from app.data.pixels.images import Decode, Pixels
from app.errors import ConfigError

CROP = {"_target_": "albumentations.RandomResizedCrop", "size": [32, 32], "scale": [0.25, 1.0]}
FLIP = {"_target_": "albumentations.HorizontalFlip", "p": 0.5}
JITTER = {"_target_": "albumentations.RandomBrightnessContrast", "p": 1.0}


@pytest.fixture(scope="module")
def image():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)


def test_output_is_uint8_at_image_size(image):
    out = Augmenter([CROP, FLIP, JITTER], [32, 40])(image, seed=0, epoch=0, index=0)
    assert out.dtype == np.uint8 and out.shape == (32, 40, 3)


def test_randomness_depends_on_seed_epoch_index_only(image):
    aug = Augmenter([CROP, FLIP, JITTER], [32, 32])
    a = aug(image, 1, 2, 3)
    aug(image, 9, 9, 9)  # whatever ran in between
    assert np.array_equal(a, aug(image, 1, 2, 3))
    assert np.array_equal(a, pickle.loads(pickle.dumps(aug))(image, 1, 2, 3))  # another process
    # negative controls: each of the three changes the result
    assert not np.array_equal(a, aug(image, 1, 3, 3))
    assert not np.array_equal(a, aug(image, 1, 2, 4))
    assert not np.array_equal(a, aug(image, 2, 2, 3))


def test_threads_each_get_their_own_compose(image):
    aug = Augmenter([CROP, FLIP, JITTER], [32, 32])
    expected = [aug(image, 0, 0, i) for i in range(40)]
    results: dict[int, list] = {}

    def work(k):
        results[k] = [aug(image, 0, 0, i) for i in range(40)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results.values():
        assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))


def _combinations(outputs, image) -> set[tuple[bool, bool]]:
    """(flipped, inverted) of each output of FLIP + INVERT on `image`."""
    seen = set()
    for out in outputs:
        for flipped in (False, True):
            for inverted in (False, True):
                want = image[:, ::-1] if flipped else image
                if np.array_equal(out, 255 - want if inverted else want):
                    seen.add((flipped, inverted))
    return seen


def test_transforms_draw_independently(image):
    """Two transforms at p=0.5 are applied in all four combinations over many samples."""
    invert = {"_target_": "albumentations.InvertImg", "p": 0.5}
    aug = Augmenter([FLIP, invert], image.shape[:2])
    assert _combinations([aug(image, 0, 0, i) for i in range(64)], image) == {
        (False, False), (True, False), (False, True), (True, True)}
    # negative control: albumentations' per-transform reseeding ties the two together
    compose = aug.compose()
    tied = []
    for i in range(64):
        compose.set_random_seed(i)
        tied.append(compose(image=image)["image"])
    assert _combinations(tied, image) == {(False, False), (True, True)}


def test_validation_is_a_deterministic_resize(image):
    aug = Augmenter([], [48, 64])
    a = aug(image, 0, 0, 0)
    assert a.shape == (48, 64, 3)
    assert np.array_equal(a, aug(image, 5, 7, 11))


def test_draft_rule_numbers():
    assert Augmenter([CROP], [32, 32]).decode.min_short_side == 74  # max(32·sqrt(4/3), 32/sqrt(3/4)) / sqrt(0.25)
    assert Augmenter([FLIP], [32, 48]).decode.min_short_side == 48  # no crop: the appended resize's need
    default_scale = {"_target_": "albumentations.RandomResizedCrop", "size": [32, 32]}  # scale from 0.08
    assert Augmenter([default_scale], [32, 32]).decode.min_short_side == 131
    assert Augmenter([CROP], [32, 32], draft=False).decode.min_short_side is None


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.fixture(scope="module")
def big_jpeg(tmp_path_factory):
    """1024² of smooth structure at several scales: what a reduced decode keeps, when it may."""
    from PIL import Image

    y, x = np.mgrid[0:1024, 0:1024] / 1024.0
    channels = [np.sin(2 * np.pi * (3 * x + 2 * y)), np.cos(2 * np.pi * (5 * y - x)), np.sin(2 * np.pi * 4 * x * y)]
    pixels = np.stack([(127.5 + 120 * c) for c in channels], axis=-1).astype(np.uint8)
    path = tmp_path_factory.mktemp("draft") / "big.jpg"
    Image.fromarray(pixels).save(path, quality=95)
    return path


RESIZING = [
    {"_target_": "albumentations.RandomResizedCrop", "size": [64, 64], "scale": [0.5, 1.0]},
    {"_target_": "albumentations.Resize", "height": 64, "width": 64},
    {"_target_": "albumentations.SmallestMaxSize", "max_size": 64},
    {"_target_": "albumentations.LongestMaxSize", "max_size": 64},
]
SOURCE_PIXELS = [
    {"_target_": "albumentations.RandomCrop", "height": 64, "width": 64},
    {"_target_": "albumentations.CenterCrop", "height": 64, "width": 64},
    {"_target_": "albumentations.Crop", "x_min": 100, "y_min": 100, "x_max": 164, "y_max": 164},
    {"_target_": "albumentations.RandomSizedCrop", "min_max_height": [100, 200], "size": [64, 64]},
    {"_target_": "albumentations.PadIfNeeded", "min_height": 1100, "min_width": 1100},
]


@pytest.mark.parametrize("transform", RESIZING + SOURCE_PIXELS, ids=lambda t: t["_target_"].split(".")[-1])
def test_draft_keeps_what_each_transform_shows(transform, big_jpeg):
    """Draft on and off give the same shape and field of view; a transform in source
    pixels decodes at full size. Negative control: today's rule (a reduction to the output
    size for any transform but RandomResizedCrop) shows RandomCrop a different picture."""
    from app.data.source import FileSplit

    split = FileSplit([str(big_jpeg)], [0])
    on, off = Augmenter([transform], [64, 64]), Augmenter([transform], [64, 64], draft=False)
    drafted = on(split.read(0, on.decode), 0, 0, 0)
    full = off(split.read(0, off.decode), 0, 0, 0)
    assert drafted.shape == full.shape == (64, 64, 3)
    assert _psnr(drafted, full) > 30, on.draft_reason
    name = transform["_target_"].split(".")[-1]
    if transform in SOURCE_PIXELS:
        assert on.decode.min_short_side is None and split.read(0, on.decode).shape == (1024, 1024, 3)
        assert on.draft_reason == f"draft off: {name} works in source pixels"
        if name == "RandomCrop":
            todays = Decode(min_short_side=64)  # what the old rule allowed here: a 1/8 decode
            assert _psnr(on(split.read(0, todays), 0, 0, 0), full) < 20
    else:
        assert on.decode.min_short_side is not None and split.read(0, on.decode).shape[0] < 1024
        assert on.draft_reason.startswith("draft allowed") and name in on.draft_reason


def test_a_transform_the_rule_does_not_know_allows_no_draft():
    blur = {"_target_": "albumentations.GaussianBlur", "blur_limit": [3, 7]}
    aug = Augmenter([blur, CROP], [32, 32])
    assert aug.decode.min_short_side is None and "GaussianBlur is not known to the draft rule" in aug.draft_reason
    assert Augmenter([FLIP, CROP], [32, 32]).decode.min_short_side == 74  # flips are looked past


def test_evaluation_resizes_or_crops_the_centre():
    from types import SimpleNamespace

    from app.augment import Augmenter, eval_transforms

    image = np.zeros((100, 80, 3), np.uint8)
    image[:5], image[-5:], image[:, :5], image[:, -5:] = 255, 255, 255, 255  # a white frame
    resize = Augmenter(eval_transforms(SimpleNamespace(eval_transform="resize"), (32, 32)), (32, 32))
    crop = Augmenter(eval_transforms(SimpleNamespace(eval_transform="center_crop", eval_crop_fraction=0.875),
                                     (32, 32)), (32, 32))
    resized, cropped = resize(image, 0, 0, 0), crop(image, 0, 0, 0)
    assert resized.shape == cropped.shape == (32, 32, 3)
    assert resized[0, 16].min() > 200 and resized[16, 0].min() > 200  # the frame is still there
    # the short side (80) to 32 / 0.875 = 37, then the central 32: the frame's 5 px became 2.3, inside the
    # 2.5 px cut from each side (and 7 px from top and bottom)
    assert max(cropped[16, 0].max(), cropped[16, -1].max(), cropped[0, 16].max()) < 64  # a blur of it at most


def as_float(image, **_):
    return image.astype(np.float32)


def halved(image, **_):
    return image // 2


def test_a_users_compose_is_shipped_whole_read_by_the_draft_rule_and_held_to_uint8():
    image = np.full((40, 60, 3), 200, np.uint8)
    own = Augmenter(A.Compose([A.HorizontalFlip(p=1.0), A.Lambda(image=halved)]), (20, 30))
    copy = pickle.loads(pickle.dumps(own))  # as a worker process gets it
    assert copy(image, 0, 0, 0).shape == (20, 30, 3) and copy(image, 0, 0, 0).max() == 100
    assert not own.needs_main  # its function lives in an importable module, not the script being run
    assert Augmenter(A.Compose([A.HorizontalFlip()]), (20, 30)).draft_reason.startswith("draft allowed")
    assert Augmenter(A.Compose([A.Lambda(image=halved)]), (20, 30)).draft_reason.startswith("draft off")
    floating = Augmenter(A.Compose([A.Lambda(image=as_float)]), (20, 30))
    with pytest.raises(TypeError, match="made a float32 image, not uint8"):
        floating(image, 0, 0, 0)


def test_a_transform_that_fails_on_the_runs_bands_or_changes_their_type_is_refused_by_name():
    six = Pixels(channels="all", bands=6, dtype="uint16")
    for transform, why in ((A.RandomGamma(), "RandomGamma turns 6-band uint16 images into float64"),
                           (A.GaussNoise(), "GaussNoise fails on 6-band uint16"),
                           (A.ColorJitter(), "ColorJitter fails on 6-band uint16")):
        with pytest.raises(ConfigError, match=why):
            Augmenter(A.Compose([A.HorizontalFlip(), transform]), (16, 16), pixels=six)
    # negative controls: what keeps any bands and type passes; a crop of the source's pixels is the size's, not theirs
    Augmenter(A.Compose([A.HorizontalFlip(), A.Rotate(), A.RandomBrightnessContrast(), A.Crop(0, 0, 100, 100)]),
              (16, 16), pixels=six)
    Augmenter(A.Compose([A.RandomGamma()]), (16, 16))  # 8-bit RGB: as before, unchecked


# -- (image, mask) pairs: data.task=segmentation ------------------------------------------------------------------

HFLIP = {"_target_": "albumentations.HorizontalFlip", "p": 1.0}
ROTATE = {"_target_": "albumentations.Affine", "rotate": [20, 40], "p": 1.0}


@pytest.fixture(scope="module")
def pair_in():
    """An RGB image and its mask of classes 0..2 and 255 (the ignore index), 24×32: not square."""
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    mask = np.zeros((24, 32), np.uint8)
    mask[4:14, 3:20], mask[10:22, 15:30], mask[0] = 1, 2, 255
    return image, mask


def test_a_flip_moves_the_mask_with_the_image(pair_in):
    from app.augment import PairAugmenter

    image, mask = pair_in
    flipped_image, flipped_mask = PairAugmenter([HFLIP], image.shape[:2])(pair_in, 0, 0, 0)
    assert np.array_equal(flipped_image, np.fliplr(image)) and np.array_equal(flipped_mask, np.fliplr(mask))
    assert flipped_mask.dtype == np.uint8 and flipped_mask.shape == mask.shape
    assert not np.array_equal(flipped_mask, mask)  # negative control: the flip shows on this mask


def test_a_pixel_transform_changes_the_image_and_leaves_the_mask_exactly(pair_in):
    from app.augment import PairAugmenter

    image, mask = pair_in
    out_image, out_mask = PairAugmenter([JITTER], image.shape[:2])(pair_in, 0, 0, 0)
    assert not np.array_equal(out_image, image)  # the negative control: it did fire
    assert np.array_equal(out_mask, mask) and out_mask.dtype == mask.dtype


def test_a_rotation_moves_the_mask_by_nearest_neighbour_inventing_no_value(pair_in):
    import cv2

    from app.augment import PairAugmenter

    image, mask = pair_in
    aug = PairAugmenter([ROTATE], image.shape[:2])
    for index in range(4):
        _, rotated = aug(pair_in, 0, 0, index)
        assert not np.array_equal(rotated, mask)  # it turned
        assert set(np.unique(rotated)) <= set(np.unique(mask)), index
    # negative control: the same rotation with a linear mask interpolation invents values between classes
    linear = A.Affine(rotate=(20, 40), p=1.0, mask_interpolation=cv2.INTER_LINEAR)
    assert set(np.unique(linear(image=image, mask=mask)["mask"])) - set(np.unique(mask))


def test_a_transform_that_would_blend_class_indices_is_refused_at_construction_by_name():
    import cv2

    from app.augment import PairAugmenter

    linear = {**ROTATE, "mask_interpolation": cv2.INTER_LINEAR}
    with pytest.raises(ConfigError, match="Affine resizes masks with mask_interpolation=1"):
        PairAugmenter([HFLIP, linear], (16, 16))
    PairAugmenter([HFLIP, ROTATE], (16, 16))  # negative control: nearest, the default, passes
    Augmenter([linear], (16, 16))  # and an image alone has no mask to blend


def mask_fails(mask, **_):
    raise ValueError("no masks here")


def mask_widened(mask, **_):
    return mask.astype(np.int32)


def test_a_transform_that_fails_on_the_pair_or_changes_the_masks_type_is_refused_by_name():
    from app.augment import PairAugmenter

    with pytest.raises(ConfigError, match="Lambda fails on an image with its mask .ValueError: no masks here"):
        PairAugmenter(A.Compose([A.HorizontalFlip(), A.Lambda(mask=mask_fails)]), (16, 16))
    with pytest.raises(ConfigError, match="Lambda turns the image or its mask into another type"):
        PairAugmenter(A.Compose([A.Lambda(mask=mask_widened)]), (16, 16))
    Augmenter(A.Compose([A.Lambda(mask=mask_fails)]), (16, 16))  # negative control: images alone never call it


def test_a_pair_depends_on_seed_epoch_and_index_only(pair_in):
    from app.augment import PairAugmenter, augmenters
    from app.schema import Task
    from app.schema.data import FolderDataConfig

    data = FolderDataConfig(task=Task.segmentation, classes=["a", "b", "c"], ignore_index=255)
    aug = augmenters(data, {"train": [ROTATE, FLIP, JITTER]}, image_size=(24, 32), masks=True)["train"]
    assert isinstance(aug, PairAugmenter) and aug.decode.min_short_side is None  # a mask has no draft decode
    image, mask = aug(pair_in, 1, 2, 3)
    aug(pair_in, 9, 9, 9)  # whatever ran in between
    for again in (aug(pair_in, 1, 2, 3), pickle.loads(pickle.dumps(aug))(pair_in, 1, 2, 3)):
        assert np.array_equal(again[0], image) and np.array_equal(again[1], mask)
    other_image, other_mask = aug(pair_in, 1, 3, 3)  # negative control: another epoch, another pair
    assert not np.array_equal(other_image, image) and not np.array_equal(other_mask, mask)


def test_what_a_rotation_brings_in_is_the_ignore_index_not_a_class(pair_in):
    from app.augment import augmenters
    from app.schema import Task
    from app.schema.data import FolderDataConfig

    image, mask = pair_in
    no_zero = np.where(mask == 0, 1, mask).astype(np.uint8)  # classes 1, 2 and the ignore index: no 0 anywhere
    data = FolderDataConfig(task=Task.segmentation, classes=["a", "b", "c"], ignore_index=255)
    aug = augmenters(data, {"train": [ROTATE]}, image_size=(24, 32), masks=True)["train"]
    _, rotated = aug((image, no_zero), 0, 0, 0)
    assert 0 not in np.unique(rotated) and 255 in np.unique(rotated), "the rotation's corners were labelled class 0"
    bare = FolderDataConfig(task=Task.segmentation, classes=["a", "b", "c"])  # negative control: no ignore index
    _, filled = augmenters(bare, {"train": [ROTATE]}, image_size=(24, 32), masks=True)["train"]((image, no_zero), 0,
                                                                                               0, 0)
    assert 0 in np.unique(filled)
