"""The data side's contracts: each split class keeps app/data/split.py's `Split`, called for real on real files; and
nothing in app/ probes a split, a source, a copy or a data config with hasattr or getattr (read off the ast)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from marked import MarkedSplit
from PIL import Image
from prepared_copies import write_copy
from slides import slide_pixels, write_slide

from app.data.copies.prepared import PreparedPatches, PreparedSplit
from app.data.copies.shards import PLACE_DTYPE, index_digest, places_name, read_manifest, write_manifest
from app.data.masked import MaskedFileSplit, MaskRule
from app.data.pixels.images import Decode
from app.data.slides.patches import GridPatches, ListedPatches, RandomPatches, grid_split, layout_of
from app.data.source import ArraySplit, FileSplit
from app.data.sources.chosen import load_or_generate_source
from app.data.split import Split
from app.prepare.patches import manifest_patches
from app.schema.data import PatchesConfig, PreparedDataConfig

APP = Path(__file__).resolve().parent.parent / "app"
# What a probe's object is named when it is a split, a source, a copy or a data config: its name, or its last attribute.
PROBED = re.compile(r"^(\w*(split|source|copy)\w*|root|data_cfg|data|train|val|test)$")
OWNERS = re.compile(r"(Split|Patches|Copy)$")  # classes whose `self` is a split or a copy


def probes(text: str) -> list[str]:
    """Each hasattr/getattr in `text` whose object is named as a split, source, copy or data config is, or is the
    `self` of a split or copy class."""
    found: list[str] = []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.args \
                    and child.func.id in ("hasattr", "getattr"):
                target = child.args[0]
                name = target.id if isinstance(target, ast.Name) else \
                    target.attr if isinstance(target, ast.Attribute) else ""
                if PROBED.match(name) or (name == "self" and OWNERS.search(owner)):
                    found.append(f"{child.lineno}: {ast.unparse(child)}")
            visit(child, child.name if isinstance(child, ast.ClassDef) else owner)

    visit(ast.parse(text), "")
    return found


def test_nothing_in_app_probes_a_split_source_copy_or_data_config():
    modules = list(APP.rglob("*.py"))
    found = {str(p.relative_to(APP)): lines for p in modules if (lines := probes(p.read_text()))}
    assert len(modules) > 100 and found == {}, found


def test_the_probe_rule_sees_each_kind_of_probe_and_passes_the_rest():
    planted = ('if hasattr(split, "layouts"):\n    pass\n'
               'where = getattr(self.source.train, "place_of", None)\n'
               'patches = getattr(config.data, "patches", None)\n'
               'tests = getattr(data_cfg, "num_test_images", 0)\n'
               'splits = [getattr(copy, name) for name in names]\n'
               'class PreparedSplit:\n    def __del__(self):\n        fds = getattr(self, "_fds", {})\n')
    assert [line.split(":")[0] for line in probes(planted)] == ["1", "3", "4", "5", "6", "9"]
    others = ('status = getattr(error, "status", None)\ntask = getattr(data_cfg.task, "value", "multiclass")\n'
              'class Loader:\n    def close(self):\n        handle = getattr(self, "handle", None)\n'
              'paths = split.files()\n')
    assert probes(others) == []  # other objects' attributes, and a split's own call


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> dict[str, Split]:
    """One of each split class, on real files: images, a .npy of rows, a tiled slide, prepared copies."""
    root = tmp_path_factory.mktemp("contract")
    rng = np.random.default_rng(0)
    slide = root / "slide.tif"
    write_slide(slide, slide_pixels(256, 0, rng)[0], levels=2, tile=128)
    patches = PatchesConfig(size=[32, 32], level=0, min_foreground=0.0, per_image=3)
    images = FileSplit([str(slide)], [1])
    grid = grid_split([str(slide)], patches)[0]
    drawn = RandomPatches(images, [layout_of(str(slide), patches, grid=False)], patches)
    np.save(root / "rows.npy", rng.integers(0, 256, (3, 8, 8, 3), np.uint8))
    whole = load_or_generate_source(_copy(write_copy(root / "whole", counts={"train": 3, "val": 3})))
    mask = root / "mask.png"  # the slide's mask: a masked split's samples are (image, mask) pairs
    Image.fromarray(rng.integers(0, 3, (256, 256), np.uint8)).save(mask)
    cut = load_or_generate_source(_copy(_as_patch_copy(write_copy(root / "cut", counts={"train": 3, "val": 3}),
                                                       grid)))
    return {"file": FileSplit([str(slide), str(slide)], [0, 1]), "array": ArraySplit(root / "rows.npy", [2, 0],
                                                                                     [0, 1], "train"),
            "grid": grid, "random": drawn, "listed": drawn.fixed(draws=2, seed=0), "prepared": whole.train,
            "prepared_patches": cut.train, "marked": MarkedSplit(4),
            "masked": MaskedFileSplit([str(slide), str(slide)], [str(mask), str(mask)], MaskRule(3, 255))}


def _copy(path: Path) -> PreparedDataConfig:
    return PreparedDataConfig(path=str(path))


def _as_patch_copy(root: Path, grid: GridPatches) -> Path:
    """A whole-image copy made a patch copy of `grid`'s slide, as prepare writes one: each sample a place on it."""
    manifest = read_manifest(root)
    for name, record in manifest.splits.items():
        places = np.zeros(record.count, PLACE_DTYPE)
        places["x"] = np.arange(record.count) * 32
        np.save(root / places_name(name), places)
        record.places_sha256 = index_digest(places)
    kept = manifest_patches(dict.fromkeys(manifest.splits, grid), grid.patches, 2)
    write_manifest(root, dataclasses.replace(manifest, patches=kept))
    return root


KINDS = {"file": FileSplit, "array": ArraySplit, "grid": GridPatches, "random": RandomPatches,
         "listed": ListedPatches, "prepared": PreparedSplit, "prepared_patches": PreparedPatches,
         "marked": MarkedSplit, "masked": MaskedFileSplit}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_split_class_keeps_the_contract_called_for_real(splits, kind):
    split = splits[kind]
    assert type(split) is KINDS[kind] and isinstance(split, Split)
    drawn, decode = (0, 1, 0), Decode()
    raw = split.fetch(0, decode, drawn)
    sample, again = split.decode(0, raw, decode), split.read(0, decode, drawn)
    image = sample[0] if split.mask_dtype else sample  # the split's kind says what a sample is
    assert image.ndim == 3 and np.array_equal(image, again[0] if split.mask_dtype else again)
    assert (split.mask_dtype is not None) == (kind == "masked")
    assert not split.mask_dtype or (sample[1].dtype == split.mask_dtype and sample[1].shape == image.shape[:2])
    assert isinstance(split.describe(0, drawn), str) and len(split.labels) == len(split)
    part = split.take(np.array([1]))
    assert isinstance(part, Split) and len(part) == 1 and part.labels[0] == split.labels[1]
    assert np.array_equal(np.asarray(part.read(0, decode, drawn)[0] if split.mask_dtype else
                                     part.read(0, decode, drawn)),
                          split.read(1, decode, drawn)[0] if split.mask_dtype else split.read(1, decode, drawn))
    assert split.nodata(0) is None and split.largest_decode_bytes(decode)[0] >= image.size // 2
    place = split.place_of(0)
    patched = split.patches is not None
    assert (place is not None) == patched == (split.images is not None) == (split.image_of is not None)
    assert isinstance(place(0, 1, 0), str) if patched else True
    read = {"file": [splits["grid"].images.paths[0]] * 2, "masked": [splits["grid"].images.paths[0]] * 2,
            "grid": splits["grid"].images.paths}
    assert split.files() == read.get(kind, read["grid"] if kind in ("random", "listed") else [])  # a copy's: none
    assert split.bands == (3 if kind.startswith("prepared") else None)


def test_a_class_short_of_one_member_is_not_a_split():
    members = {name: (lambda self, *args: None) for name in (
        "__len__", "fetch", "decode", "read", "describe", "files", "nodata", "largest_decode_bytes", "place_of")}
    data = {"labels": np.zeros(1), "bands": None, "patches": None, "images": None, "image_of": None,
            "mask_dtype": None}
    untakeable = type("Untakeable", (), {**members, **data})
    assert not isinstance(untakeable(), Split)
    assert isinstance(type("Whole", (), {**members, **data, "take": members["read"]})(), Split)  # with `take`: one
