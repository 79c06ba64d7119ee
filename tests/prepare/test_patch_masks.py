"""A segmentation copy of patches (data.task=segmentation with data.patches): each stored patch keeps the mask the
slides' patch split reads there (`<key>.seg.png`, masks-<split>.npy) beside its slide and corner (patches-<split>.npy);
the copy's splits give pairs, through the loader too; a damaged mask member is named by it, a changed masks file
refused, the background class part of what the copy is of; `evaluate` scores a run on the copy over its stored
patches, a run on the slides slide by slide; `python -m app prepare` writes such a copy once."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from docs_runner import spawn_one_process_for
from hydra import compose, initialize_config_dir
from slides import ANNOTATED_CLASSES, write_annotated_slides
from test_masks import _flip, members, prepare

from app.config import conf_dir, load
from app.data.copies.prepared import prepared_source
from app.data.copies.shards import FORMAT_VERSION, read_manifest, sample_key
from app.data.slides.patches import PatchSplit
from app.data.sources.chosen import load_or_generate_source
from app.errors import BadSampleError, DataError
from app.loader.pipeline import Queue, build_loader
from app.prepare.patches import fixed_patches
from app.schema.data import PreparedDataConfig
from app.tasks.base import Evaluation
from app.tasks.segmentation import Segmentation

CLASSES = f"data.classes=[{','.join(ANNOTATED_CLASSES)}]"
SETTINGS = ["data.task=segmentation", CLASSES, "data.patches.size=[32,32]", "data.patches.level=0",
            "data.image_size=[32,32]"]


def copy_of(out: Path) -> PreparedDataConfig:
    return PreparedDataConfig(path=str(out), task="segmentation", classes=list(ANNOTATED_CLASSES))


def slides_of(root: Path, *more: str) -> list[str]:
    return ["data=folder", f"data.path={root / 'slides'}", f"data.masks={root / 'polygons'}", *SETTINGS, *more]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Two training slides and one validation slide (256²) annotated by polygons on glass, their copy (raw: the
    pixels exact), and the slides' own source as prepare read it (its training patches fixed: the grid)."""
    root = tmp_path_factory.mktemp("patch_masks")
    write_annotated_slides(root, train=2, val=1, side=256)
    config = prepare(root / "copy", *slides_of(root, "data.masks_background=glass", "prepare.format=raw"),
                     per_shard=20)
    slides = fixed_patches(load_or_generate_source(config.data), draws=None, seed=config.seed)
    return root, slides


def test_each_stored_patch_is_the_image_and_mask_the_slides_patch_split_reads_there(made):
    root, slides = made
    copy, seen = prepared_source(copy_of(root / "copy")), set()
    for name in ("train", "val"):
        own, stored = getattr(slides, name), getattr(copy, name)
        at = {own.where(i): i for i in range(len(own))}  # (image, top, left) → the slides' sample
        assert isinstance(own, PatchSplit) and own.mask_dtype == stored.mask_dtype == "uint8"
        assert len(stored) == len(own) == len(at) > 1
        for i, row in enumerate(stored.places):
            (image, mask), (own_image, own_mask) = stored.read(i), own.read(at[int(row["image"]), row["y"], row["x"]])
            np.testing.assert_array_equal(mask, own_mask)
            np.testing.assert_array_equal(image, own_image)  # raw: bit for bit the region
            seen |= set(np.unique(mask).tolist())
        assert not np.array_equal(stored.read(0)[1], stored.read(len(stored) - 1)[1])  # control: each its own
    assert seen == {0, 1, 2}  # glass (no polygon: data.masks_background), stripes and dots
    names = list(members(root / "copy", "val"))  # the mask member right after its image's, as a whole image's
    key = sample_key("val", 1)
    assert names[names.index(f"{key}.npy") + 1] == f"{key}.seg.png"


def test_the_manifest_keeps_the_task_the_masks_and_each_patchs_place(made):
    root, slides = made
    out = root / "copy"
    manifest, copy = read_manifest(out), prepared_source(copy_of(out))
    assert (manifest.version, manifest.task, manifest.ignore_index) == (FORMAT_VERSION, "segmentation", None)
    assert manifest.class_names == ANNOTATED_CLASSES and manifest.patches["settings"]["size"] == [32, 32]
    assert manifest.patches["images"] == {name: list(getattr(slides, name).images.paths) for name in ("train", "val")}
    for name, record in manifest.splits.items():
        assert record.masks_sha256 and record.places_sha256 and record.count == len(getattr(slides, name))
        assert (out / f"masks-{name}.npy").is_file() and (out / f"patches-{name}.npy").is_file()
    assert copy.split["patches"]["val"] == {"images": 1, "patches": len(slides.val)}
    assert list(copy.val.image_of) == [0] * len(copy.val) and copy.val.patches.size == [32, 32]


def test_the_copys_training_split_gives_pairs_in_a_worker_as_it_reads_them(made):
    root, _ = made
    copy = prepared_source(copy_of(root / "copy"))
    train = pickle.loads(pickle.dumps(copy.train))  # as a spawn'ed worker gets it: its files mapped again
    assert train._masks is None and np.array_equal(train.read(3)[1], copy.train.read(3)[1])
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = load(compose("config", overrides=["data.image_size=[32,32]", "data.batch_size=4"]))
    with build_loader(cfg, {"train": (train, [])}, queue=Queue(workers=0, max_size=2, timeout_s=60)) as loader:
        images, masks = next(iter(loader.every_sample("train")))
    assert images.shape == (4, 32, 32, 3) and masks.shape == (4, 32, 32) and masks.dtype == np.uint8
    assert all(np.array_equal(masks[i], copy.train.read(i)[1]) for i in range(4))


def test_a_damaged_mask_member_is_named_by_it_and_a_changed_masks_file_is_refused(made, tmp_path):
    root, _ = made
    out = tmp_path / "copy"
    out.mkdir()
    for path in (root / "copy").iterdir():
        if path.is_file():
            (out / path.name).write_bytes(path.read_bytes())
    _flip(out, "train", 2, "masks")
    train = prepared_source(copy_of(out)).train
    with pytest.raises(BadSampleError, match=r"member train-000000002\.seg\.png\) could not be loaded: its bytes "
                                             r"fail their CRC32 check \(\w+ where masks-train\.npy holds"):
        train.read(2)
    train.read(1)  # negative control: the other samples read
    rows = np.load(out / "masks-val.npy")
    rows["crc"][0] ^= 1
    np.save(out / "masks-val.npy", rows)
    with pytest.raises(DataError, match=rf"{out}/masks-val\.npy does not match the checksum .*the copy is damaged"):
        prepared_source(copy_of(out))


def test_prepare_writes_a_missing_masks_file_again_and_a_copy_is_of_its_background_class(made):
    root, _ = made
    settings, out = slides_of(root, "data.masks_background=glass", "prepare.format=raw"), root / "copy"
    written = (out / "masks-train.npy").read_bytes()
    (out / "masks-train.npy").unlink()
    prepare(out, *settings, per_shard=20)
    assert (out / "masks-train.npy").read_bytes() == written
    with pytest.raises(DataError, match=r"holds a prepared copy of other settings or another source \(masks differ"):
        prepare(out, *slides_of(root, "data.masks_background=dots", "prepare.format=raw"), per_shard=20)


class Glass:
    """A model that calls every pixel glass (class 0)."""

    def predict_on_batch(self, x: np.ndarray) -> np.ndarray:
        return np.eye(len(ANNOTATED_CLASSES), dtype=np.float32)[np.zeros(x.shape[:3], np.int64)]


def test_evaluate_scores_a_copys_stored_patches_and_sends_the_slides_own_to_be_scored_whole(made, tmp_path,
                                                                                              monkeypatch):
    root, slides = made
    copy = prepared_source(copy_of(root / "copy"))
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("config", overrides=["data=prepared", f"data.path={root / 'copy'}", *SETTINGS[:2],
                                                   "data.image_size=[32,32]", "queue.workers=0"]))
    job = {"config": config, "split_name": "val", "net": Glass(), "checkpoint": tmp_path / "last.keras",
           "run_dir": tmp_path, "out": tmp_path}
    Segmentation().evaluate(Evaluation(source=copy, **job))
    result = json.loads((tmp_path / "evaluation.json").read_text())
    held = np.bincount(np.concatenate([copy.val.read(i)[1].ravel() for i in range(len(copy.val))]), minlength=3)
    assert result["samples"] == len(copy.val) and "slides" not in result
    assert [row[0] for row in result["confusion"]] == held.tolist() and held[1:].sum() > 0  # the copy's masks
    monkeypatch.setattr(Segmentation, "_evaluate_slides", lambda self, job: "each slide whole")
    assert Segmentation().evaluate(Evaluation(source=slides, **job)) == "each slide whole"


@pytest.mark.slow
def test_the_cli_prepares_polygon_patches_with_their_masks_once(tmp_path):
    write_annotated_slides(tmp_path, train=2, val=1, side=256)
    argv = ["prepare", *slides_of(tmp_path, "data.masks_background=glass"), "prepare.out=copy", "hydra.run.dir=log"]
    # the second keeps no decoded chunk: how a run reads, not what the copy holds, so the copy is the same
    first, again = spawn_one_process_for(argv, [*argv, "data.patches.chunk_cache_mib=0"], cwd=tmp_path)
    assert first.returncode == 0 and "prepared " in first.stdout and "0 bad" in first.stdout, first.stdout[-2000:]
    assert again.returncode == 0 and "is up to date" in again.stdout, again.stdout[-2000:]
    settings = json.loads((tmp_path / "copy" / "manifest.json").read_text())["patches"]["settings"]
    assert "chunk_cache_mib" not in settings and settings["size"] == [32, 32]
    copy = prepared_source(copy_of(tmp_path / "copy"))
    assert copy.val.read(0)[1].shape == (32, 32) and copy.train.mask_dtype == "uint8"
