"""A segmentation copy (data.task=segmentation): each sample's mask kept losslessly beside its image (`<key>.seg.png`,
masks-<split>.npy), nearest-resized where prepare shrinks the image, read back as (image, mask) pairs through a real
worker; a damaged mask member or masks file caught; a run of another task, other classes or another ignore index
refused; a copy of the format before masks still read."""

from __future__ import annotations

import io
import json
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from PIL import Image
from segmentation_data import IGNORE, TEXTURE_CLASSES, write_raster_set, write_texture_folder

from app.config import conf_dir, load
from app.data.copies.prepared import prepared_source
from app.data.copies.shards import FORMAT_VERSION, manifest_checksum, read_manifest, sample_key
from app.data.pixels.decode import Decode, Pixels
from app.data.pixels.label_masks import read_mask
from app.data.sources.chosen import load_or_generate_source
from app.errors import BadSampleError, DataError
from app.loader.pipeline import Queue, build_loader
from app.prepare.copy import write_prepared_copy
from app.prepare.encode import fit_short_side
from app.schema import register
from app.schema.data import PreparedDataConfig

register()
CLASSES = f"data.classes=[{','.join(TEXTURE_CLASSES)}]"


def prepare(out: Path, *overrides: str, per_shard: int = 5):
    """`python -m app prepare` in this process; the loaded config."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        config = load(compose("prepare", overrides=[*overrides, f"prepare.out={out}"]))
    write_prepared_copy(config, workers=0, per_shard=per_shard)
    return config


def textures(made, *more: str) -> list[str]:
    return ["data=folder", f"data.path={made.root / 'images'}", f"data.masks={made.root / 'masks'}",
            "data.task=segmentation", CLASSES, "data.image_size=[32,32]", *more]


def copy_of(out: Path, **keys) -> PreparedDataConfig:
    return PreparedDataConfig(path=str(out), task="segmentation", **keys)


def members(out: Path, split: str) -> dict[str, bytes]:
    """Every member of a split's shards, by name, in shard order."""
    found = {}
    for name in read_manifest(out).splits[split].shards:
        with tarfile.open(out / name) as tar:
            found |= {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    return found


def originals(out: Path, split: str, source) -> list[int]:
    """Each copied sample's index in its source split, from its .json member's path."""
    paths = getattr(source, split).paths
    metas = [json.loads(data) for name, data in members(out, split).items() if name.endswith(".json")]
    return [paths.index(meta["path"]) for meta in metas]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Texture images (64²), palette masks (classes 0..2, 255 an ignore band), their copy at a short side of 40."""
    root = tmp_path_factory.mktemp("masks")
    made = write_texture_folder(root / "textures", train=10, val=4, size=64)
    config = prepare(root / "copy", *textures(made, f"data.ignore_index={IGNORE}", "prepare.short_side=40"))
    return made, root / "copy", load_or_generate_source(config.data)


def test_each_mask_is_kept_losslessly_beside_its_image_and_nearest_resized_with_it(made):
    _, out, source = made
    copy = prepared_source(copy_of(out, classes=list(TEXTURE_CLASSES), ignore_index=IGNORE))
    manifest = read_manifest(out)
    assert (manifest.version, manifest.task, manifest.ignore_index) == (FORMAT_VERSION, "segmentation", IGNORE)
    assert manifest.class_names == TEXTURE_CLASSES and copy.train.mask_dtype == "uint8"
    for split in ("train", "val"):
        original, prepared = getattr(source, split), getattr(copy, split)
        for i, at in enumerate(originals(out, split, source)):
            image, mask = prepared.read(i)
            wanted = fit_short_side(read_mask(original.masks[at], None), 40, nearest=True)
            assert image.shape == (40, 40, 3) and mask.dtype == np.uint8 and np.array_equal(mask, wanted), (split, i)
            assert not np.array_equal(mask, fit_short_side(read_mask(original.masks[at - 1], None), 40, nearest=True))
    assert {0, 1, 2, IGNORE} <= set(np.unique(copy.val.read(0)[1])) | set(np.unique(copy.train.read(0)[1]))
    # each `<key>.seg.png` member is an 8-bit grey PNG of the indices, right after its image member (WebDataset's key)
    held = members(out, "val")
    names = list(held)
    key = sample_key("val", 2)
    assert names[names.index(f"{key}.jpg") + 1] == f"{key}.seg.png"
    with Image.open(io.BytesIO(held[f"{key}.seg.png"])) as png:
        assert png.mode == "L" and np.array_equal(np.asarray(png), copy.val.read(2)[1])


@pytest.mark.parametrize("kind", ["16-bit masks", "raw uint16 tiles from a table"])
def test_sixteen_bit_masks_and_raw_tiles_are_kept_exactly_at_full_size(kind, tmp_path):
    decode, ignore, dtype = Decode(), IGNORE, np.uint8
    if kind == "16-bit masks":  # the ignore index past 255
        made = write_texture_folder(tmp_path / "textures", train=6, val=3, size=48)
        for _, mask, _ in made.samples:
            values = read_mask(mask, None).astype(np.uint16)
            values[values == IGNORE] = ignore = 1000
            Image.fromarray(values).save(mask)
        data, dtype = textures(made, "data.ignore_index=1000"), np.uint16
    else:
        made = write_raster_set(tmp_path / "rasters", n=8, size=32)
        data = ["data=table", f"data.table={made.table}", "data.columns.path=image", "data.columns.mask=mask",
                "data.columns.split=split", "data.task=segmentation", f"data.classes=[{','.join(made.class_names)}]",
                f"data.ignore_index={IGNORE}", "data.channels=all", "data.dtype=uint16", "data.image_size=[32,32]",
                "augment=none", "prepare.format=raw"]
        decode = Decode(pixels=Pixels(channels="all", bands=6, dtype="uint16"))
    config = prepare(tmp_path / "copy", *data, "prepare.short_side=full")
    source, copy = load_or_generate_source(config.data), prepared_source(copy_of(tmp_path / "copy"))
    assert copy.train.mask_dtype == np.dtype(dtype).name
    seen = set()
    for i, at in enumerate(originals(tmp_path / "copy", "train", source)):
        (image, mask), (own_image, own_mask) = copy.train.read(i, decode), source.train.read(at, decode)
        assert mask.dtype == dtype and np.array_equal(mask, own_mask), i
        assert np.array_equal(image, own_image) or kind == "16-bit masks"  # raw: the pixels too (JPEG: lossy)
        assert not np.array_equal(mask, source.train.read((at + 1) % len(source.train), decode)[1])  # control
        seen |= set(np.unique(mask).tolist())
    assert ignore in seen
    png = next(data for name, data in members(tmp_path / "copy", "val").items() if name.endswith(".seg.png"))
    with Image.open(io.BytesIO(png)) as member:
        assert member.mode == ("I;16" if dtype == np.uint16 else "L")


def test_the_loaders_worker_reads_the_copys_pairs_as_the_split_does(made, children):
    _, out, _ = made
    copy = prepared_source(copy_of(out))
    val = pickle.loads(pickle.dumps(copy.val))  # as a spawn'ed worker gets it: the masks file mapped again
    assert val._masks is None and np.array_equal(val.read(1)[1], copy.val.read(1)[1])
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = load(compose("config", overrides=["data.image_size=[40,40]", "data.batch_size=2"]))
    with build_loader(cfg, {"val": (copy.val, [])}, queue=Queue(workers=1, max_size=2, timeout_s=60)) as loader:
        batches = list(loader.every_sample("val"))
    masks = np.concatenate([y for _, y in batches])
    assert masks.dtype == np.uint8 and masks.shape == (4, 40, 40)
    assert all(np.array_equal(masks[i], copy.val.read(i)[1]) for i in range(4))
    assert not np.array_equal(masks[0], masks[1])  # negative control: each its own sample's


def _flip(out: Path, split: str, i: int, column: str) -> None:
    """One byte inverted in the middle of sample i's mask data (`column`: "masks") or image data ("index")."""
    rows = np.load(out / f"{column}-{split}.npy")
    row, shard = rows[i], read_manifest(out).splits[split].shards[int(np.load(out / f"index-{split}.npy")[i]["shard"])]
    with open(out / shard, "r+b") as f:
        f.seek(int(row["offset"]) + int(row["length"]) // 2)
        byte = f.read(1)[0]
        f.seek(-1, io.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def test_a_damaged_mask_member_is_a_bad_sample_named_by_it_and_a_damaged_masks_file_is_refused(made, tmp_path):
    _, whole, _ = made
    out = tmp_path / "copy"
    out.mkdir()
    for path in whole.iterdir():
        if path.is_file():
            (out / path.name).write_bytes(path.read_bytes())
    _flip(out, "train", 3, "masks")
    train = prepared_source(copy_of(out)).train
    shard = read_manifest(out).splits["train"].shards[int(np.load(out / "index-train.npy")[3]["shard"])]
    with pytest.raises(BadSampleError, match=rf"{out}/{shard} member train-000000003\.seg\.png\) could not be loaded: "
                                             r"its bytes fail their CRC32 check \(\w+ where masks-train\.npy holds"):
        train.read(3)
    train.read(2)  # negative control: the other samples read
    _flip(out, "train", 3, "masks")  # flipped back: whole again
    _flip(out, "train", 3, "index")
    with pytest.raises(BadSampleError, match=r"member train-000000003\.jpg\) could not be loaded: its bytes fail"):
        train.read(3)  # the image's own CRC still names the image
    rows = np.load(out / "masks-val.npy")
    rows["length"][0] += 1
    np.save(out / "masks-val.npy", rows)
    with pytest.raises(DataError, match=rf"{out}/masks-val\.npy does not match the checksum .*the copy is damaged"):
        prepared_source(copy_of(out))


def test_prepare_writes_a_missing_masks_file_again_and_refuses_other_mask_values_into_the_copy(tmp_path):
    made = write_texture_folder(tmp_path / "textures", train=4, val=2, size=32)
    settings = textures(made, f"data.ignore_index={IGNORE}")
    prepare(tmp_path / "copy", *settings)
    written = (tmp_path / "copy" / "masks-train.npy").read_bytes()
    (tmp_path / "copy" / "masks-train.npy").unlink()
    prepare(tmp_path / "copy", *settings)
    assert (tmp_path / "copy" / "masks-train.npy").read_bytes() == written
    with pytest.raises(DataError, match=r"holds a prepared copy of other settings or another source \(masks differ"):
        prepare(tmp_path / "copy", *textures(made, "data.ignore_index=254"))  # the same files, other mask values
    (tmp_path / "copy" / "masks-train.npy").unlink()
    with pytest.raises(DataError, match="masks-train.npy cannot be read"):  # negative control: a reader needs it
        prepared_source(copy_of(tmp_path / "copy"))


def test_a_run_of_another_task_other_classes_or_another_ignore_index_is_refused(made, tmp_path):
    _, out, _ = made
    with pytest.raises(DataError, match=r"holds a class a pixel \(prepared with data.task=segmentation\).*add "
                                        "data.task=segmentation"):
        prepared_source(PreparedDataConfig(path=str(out)))
    shuffled = [TEXTURE_CLASSES[1], TEXTURE_CLASSES[0], TEXTURE_CLASSES[2]]
    with pytest.raises(DataError, match=r"classes \['background', 'stroma', 'tumour'\] with ignore index 255, and "
                                        r"this run has data.classes=\['stroma'.*give data.classes=\[background,"):
        prepared_source(copy_of(out, classes=shuffled, ignore_index=IGNORE))
    with pytest.raises(DataError, match="this run has data.ignore_index=None: give data.ignore_index=255"):
        prepared_source(copy_of(out, classes=list(TEXTURE_CLASSES)))
    assert prepared_source(copy_of(out)).class_names == TEXTURE_CLASSES  # naming none (predict): the copy's
    prepare(tmp_path / "plain", "data.num_images=12", "data.source_size=32", "data.num_classes=3",
            "data.image_size=[16,16]", f"data.path={tmp_path / 'synthetic'}")
    with pytest.raises(DataError, match=r"holds one label an image .*add data.task=multiclass"):
        prepared_source(copy_of(tmp_path / "plain", classes=list(TEXTURE_CLASSES), ignore_index=IGNORE))


def test_a_copy_of_the_format_before_masks_still_reads(tmp_path):
    out = tmp_path / "copy"
    prepare(out, "data.num_images=12", "data.source_size=32", "data.num_classes=3", "data.image_size=[16,16]",
            f"data.path={tmp_path / 'synthetic'}")
    written = json.loads((out / "manifest.json").read_text())
    five = {**{k: v for k, v in written.items() if k not in ("ignore_index", "checksum")}, "version": 5,
            "splits": {name: {k: v for k, v in record.items() if k != "masks_sha256"}
                       for name, record in written["splits"].items()}}
    (out / "manifest.json").write_text(json.dumps({**five, "checksum": manifest_checksum(five)}))
    copy = prepared_source(PreparedDataConfig(path=str(out)))
    assert copy.train.mask_dtype is None and copy.train.read(0).shape[2] == 3
    (out / "manifest.json").write_text(json.dumps({**five, "version": FORMAT_VERSION + 1, "checksum": ""}))
    with pytest.raises(DataError, match="newer than this app reads"):  # negative control: the version is read
        prepared_source(PreparedDataConfig(path=str(out)))
