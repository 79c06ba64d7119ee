"""data=folder with data.task=segmentation: images under data.path, each one's mask under data.masks at the same
relative path and stem (any extension the app reads, or a .geojson of polygons: with data.patches):
    <path>/<image>, <masks>/<image's stem>.<ext>                   split by data.val_fraction (and test_fraction)
    <path>/{train,val,test}/<image>, <masks>/{train,val,test}/...  split given"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.images import EXTENSIONS
from app.data.source import Source
from app.data.sources.folder import Files, fingerprint, images_under, split_by_fraction
from app.errors import DataError

SPLITS = ("train", "val", "test")


def masked_folder_source(data_cfg) -> Source:
    """The images of data.path and their masks under data.masks, the classes data.classes names in index order."""
    images, masks = (Path(str(p)).expanduser().absolute() for p in (data_cfg.path, data_cfg.masks))
    for key, folder in (("data.path", images), ("data.masks", masks)):
        if not folder.is_dir():
            raise DataError(f"{key} {folder} does not exist or is not a folder: data.task=segmentation reads the "
                            "images under data.path and each one's mask under data.masks, at the same relative path "
                            "and stem.")
    parts, given = _parts(images, data_cfg, masks)
    found, stems = images_under(masks, masks, (*EXTENSIONS, ".geojson")), {}  # polygons: QuPath's export
    for rel, *_ in found:
        stem = str(PurePosixPath(rel).with_suffix(""))
        if stem in stems:
            raise DataError(f"{masks / stems[stem]} and {masks / rel} are two masks of one image (the same stem): keep "
                            "one.")
        stems[stem] = rel
    rule = MaskRule.of(data_cfg)
    split_of = {name: _split(images, masks, stems, files=files, rule=rule) for name, files in parts.items() if files}
    used = {stems[s] for files in parts.values() for s in _stems(files) if s in stems}
    every = [f for files in parts.values() for f in files] + [(f"masks/{rel}", size, t) for rel, size, t in found
                                                              if rel in used]
    digest, names_sizes = fingerprint(every, times=True), fingerprint(every, times=False)
    split = {"source": "folder", "fingerprint": digest, "fingerprint_covers": "relative paths, sizes and "
             "modification times (to the second) of the images and their masks", "names_sizes_fingerprint":
             names_sizes, "class_names": list(data_cfg.classes), "root": str(images), "masks": str(masks),
             **{name: [rel for rel, *_ in files] for name, files in parts.items()},
             "val_fraction": None if given else data_cfg.val_fraction}
    return Source(name="folder", class_names=list(data_cfg.classes), train=split_of["train"], val=split_of["val"],
                  fingerprint=digest, split=split, names_sizes_fingerprint=names_sizes, test=split_of.get("test"))


def _parts(images: Path, data_cfg, masks: Path) -> tuple[dict[str, Files], bool]:
    """(split name → its images, whether the folder gives the split); data.masks inside data.path holds no image."""
    def under(folder: Path) -> Files:
        return [f for f in images_under(folder, images) if not (images / f[0]).is_relative_to(masks)]

    if (images / "train").is_dir() and (images / "val").is_dir():
        parts = {name: under(images / name) for name in SPLITS if (images / name).is_dir()}
        given = True
    else:
        every = under(images)
        rest, test = split_by_fraction(every, data_cfg.test_fraction) if data_cfg.test_fraction else (every, [])
        train, val = split_by_fraction(rest, data_cfg.val_fraction / (1 - data_cfg.test_fraction))
        parts, given = {"train": train, "val": val, "test": test}, False
    for name in ("train", "val"):
        if not parts.get(name):
            raise DataError(f"data.path {images} leaves no {name} image: give at least 2 images (split by "
                            f"data.val_fraction), or the split as {images}/train/ and {images}/val/.")
    return parts, given


def _stems(files: Files) -> list[str]:
    return [str(PurePosixPath(rel).with_suffix("")) for rel, *_ in files]


def _split(images: Path, masks: Path, stems: dict[str, str], *, files: Files, rule: MaskRule) -> MaskedFileSplit:
    """Each image's mask, or (none found) the pattern looked for, which its read reports as a bad sample."""
    paths = [str(images / rel) for rel, *_ in files]
    return MaskedFileSplit(paths, [str(masks / stems[s]) if s in stems else f"{masks / s}.*" for s in _stems(files)],
                           rule)
