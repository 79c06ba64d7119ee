"""data=prepared: a `prepare` copy (shards.py) in a folder or at a URL (copy_storage.py), its splits
(prepared_splits.py) built once its indexes match the manifest; a damaged copy is refused at start."""

from __future__ import annotations

import hashlib
import json
import logging

from app.data.copies.copy_checks import index_damage, labels_damage, masks_damage, places_damage, stale_copy
from app.data.copies.copy_storage import CopyStorage, open_copy
from app.data.copies.prepared_splits import (
    Beside,
    PreparedMasks,
    PreparedPatches,
    PreparedPatchMasks,
    PreparedSplit,
    patches_config,
)
from app.data.copies.shards import CHECKSUMS_SINCE, MANIFEST, Manifest, prepare_again, prepare_command, unrecorded
from app.data.source import Source
from app.errors import DataError
from app.schema.data import DATA_TARGETS, PatchesConfig, PreparedDataConfig, patches_of
from app.targets import targets_of

# a split's kind by what its copy keeps beside the index: (patches-<split>.npy, masks-<split>.npy)
KINDS = {(False, False): PreparedSplit, (True, False): PreparedPatches, (False, True): PreparedMasks,
         (True, True): PreparedPatchMasks}
FINGERPRINT_COVERS = "the prepared copy's manifest: its source's fingerprint, the resize rule and the format"
log = logging.getLogger(__name__)


def copy_may_move(saved_data) -> bool:
    """Whether a resume may move data.path: a copy is known by its manifest's fingerprint, not its place."""
    return saved_data.get("_target_") == DATA_TARGETS["prepared"]


def run_patches(data_cfg) -> PatchesConfig | None:
    """A run's data.patches: its own, or (data=prepared) its patch copy's; None for whole images."""
    own = patches_of(data_cfg)
    if own is not None or not isinstance(data_cfg, PreparedDataConfig):
        return own
    kept = open_copy(data_cfg).manifest.patches
    return patches_config(kept["settings"]) if kept else None


def prepared_source(data_cfg) -> Source:
    """data=prepared: the copy at data.path (a local folder, or a URL)."""
    root = open_copy(data_cfg)
    manifest = root.manifest
    kept, wanted = targets_of(manifest.task), targets_of(data_cfg.task)
    if kept is not wanted:
        raise DataError(f"{root} holds {kept.kind} (prepared with data.task={kept.task.value}), and this run has "
                        f"data.task={wanted.task.value}: add data.task={kept.task.value}, or prepare a copy from the "
                        f"source with data.task={wanted.task.value}.")
    if kept.masks:
        _check_mask_rule(root, manifest, data_cfg)
    splits = _checked_splits(root, manifest)
    stale = stale_copy(root, manifest)
    if stale:
        log.warning("%s", stale)
    for name in ("train", "val"):
        if not len(splits.get(name, ())):
            raise DataError(f"{root} has no {name} samples: a prepared copy needs a train and a val split; "
                            "prepare it again from a source with both.")
    rule = {"short_side": manifest.short_side, "format": manifest.format, "quality": manifest.quality}
    fingerprint = hashlib.sha256(json.dumps({"source": manifest.source.get("fingerprint"), **rule},
                                            sort_keys=True).encode()).hexdigest()
    split = {"source": "prepared", "fingerprint": fingerprint, "fingerprint_covers": FINGERPRINT_COVERS,
             "class_names": manifest.class_names, "root": str(root), "prepared": {**rule, "of": manifest.source},
             "counts": {name: len(s) for name, s in splits.items()},
             **({"patches": _patches_described(manifest.patches, splits)} if manifest.patches else {})}
    return Source(name="prepared", class_names=list(manifest.class_names), train=splits["train"], val=splits["val"],
                  fingerprint=fingerprint, split=split, test=splits.get("test"))


def _patches_described(kept: dict, splits: dict) -> dict:
    """split.json's `patches` of a patch copy, as a run on the slides writes it, with the copy's draws."""
    counts = {name: {"images": len(kept["images"][name]), "patches": len(split)} for name, split in splits.items()}
    return {"split_by": "image", "size": kept["settings"]["size"], "mode": kept["settings"]["mode"],
            "draws": kept["draws"], **counts}


def _checked_splits(root: CopyStorage, manifest: Manifest) -> dict[str, PreparedSplit]:
    """Each split of the copy, once its index and (in a folder) shard sizes match the manifest; else a DataError."""
    again, where = prepare_again(root, manifest), str(root).rstrip("/")
    if manifest.version < CHECKSUMS_SINCE:
        log.warning("%s/%s is format version %d: its samples have no checksums, so a damaged one is read "
                    "unchecked; to add them, %s.", where, MANIFEST, manifest.version, again)
    problems, targets = root.shard_damage(manifest), targets_of(manifest.task)
    splits = {}
    for name, record in manifest.splits.items():
        problems += filter(None, [index_damage(where, manifest, name, root.index(name, again))])
        kept = {}  # a multilabel copy's labels, a patch copy's places (image and corner), a segmentation copy's masks
        for key, held, read, damaged in (("vectors", targets.label_vectors, root.labels, labels_damage),
                                         ("places", bool(manifest.patches), root.places, places_damage),
                                         ("masks", targets.masks, root.masks, masks_damage)):
            if held:
                kept[key] = read(name, again)
                problems += filter(None, [damaged(where, manifest, name, kept[key])])
        kind = KINDS["places" in kept, "masks" in kept]
        splits[name] = kind(root, name, record.shards, stored=manifest, beside=Beside(**kept))
    if problems:
        raise DataError(f"{'; '.join(problems)}: the copy is damaged; {again}.")
    return splits


def _check_mask_rule(root: CopyStorage, manifest: Manifest, data_cfg) -> None:
    """A run naming its classes (training must) names the copy's, in order, and its ignore index; predict takes them."""
    given = list(data_cfg.classes or [])
    if not given:
        return
    held = f"{root} holds masks of the classes {manifest.class_names} with ignore index {manifest.ignore_index}"
    if given != list(manifest.class_names):
        raise DataError(f"{held}, and this run has data.classes={given}: give "
                        f"data.classes=[{','.join(manifest.class_names)}] (a mask's values are those classes' "
                        "indices), or prepare a copy from the source with yours.")
    if data_cfg.ignore_index != manifest.ignore_index:
        raise DataError(f"{held}, and this run has data.ignore_index={data_cfg.ignore_index}: give "
                        f"data.ignore_index={'null' if manifest.ignore_index is None else manifest.ignore_index}, or "
                        "prepare a copy from the source with yours.")


def check_short_side(split, need: int | None, what: str) -> None:
    """Refuse, before any work, a prepared split stored below the `need` px of short side that `what` needs."""
    if not isinstance(split, PreparedSplit) or need is None:
        return
    manifest = split.root.manifest
    stored = manifest.short_side
    if stored is None or stored >= need:
        return
    again = f"{split.root}-{need}"
    raise DataError(f"the prepared copy {split.root} stores images at a short side of {stored} px, but {what} "
                    f"need {need} px: training on it would upsample. Prepare a copy for these transforms in a new "
                    f"folder: `{prepare_command(manifest, again, need)}`{unrecorded(manifest)}, then train with "
                    f"data.path={again}; or lower data.image_size.")
