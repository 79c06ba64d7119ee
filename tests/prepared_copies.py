"""Tiny prepared copies (app/data/copies/shards.py's layout) written with tarfile, the index and
write_manifest alone, as `python -m app prepare` writes them: the reader's tests need no prepare."""

from __future__ import annotations

import io
import json
import tarfile
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from app.data.copies.shards import (
    INDEX_DTYPE,
    INDEX_DTYPE_1,
    MEMBER,
    Manifest,
    SplitRecord,
    index_digest,
    index_path,
    read_index,
    read_manifest,
    sample_key,
    shard_name,
    write_manifest,
)


def picture(label: int, number: int, size: tuple[int, int] = (40, 56)) -> np.ndarray:
    """An H×W×3 image whose class shows (a bright band where the label says) and whose number varies it."""
    rng = np.random.default_rng(1000 * label + number)
    image = rng.integers(0, 90, (*size, 3), dtype=np.uint8)
    band = size[1] // 4
    image[:, label * band:(label + 1) * band, label % 3] = 230
    return image


def _encoded(image: np.ndarray, image_format: str) -> tuple[bytes, int]:
    """(the member's bytes, where the pixels start in them: after a .npy header, for raw)."""
    buffer = io.BytesIO()
    if image_format == "raw":
        np.save(buffer, np.ascontiguousarray(image))
        data = buffer.getvalue()
        return data, len(data) - image.nbytes
    Image.fromarray(image).save(buffer, "JPEG", quality=95, subsampling=0)
    return buffer.getvalue(), 0


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _data_offsets(shard: Path) -> dict[str, int]:
    """Where each member's data starts, as tarfile reads the shard back."""
    with tarfile.open(shard) as tar:
        return {member.name: member.offset_data for member in tar.getmembers()}


def write_split(root: Path, split: str, samples: list[tuple[np.ndarray, int]], *, image_format: str,
                shards: int = 2) -> SplitRecord:
    """The split's shards (samples dealt round-robin) and its index."""
    names = [shard_name(split, n) for n in range(shards)]
    index = np.zeros(len(samples), INDEX_DTYPE)
    tars = [tarfile.open(root / name, "w", format=tarfile.USTAR_FORMAT) for name in names]
    members = []
    for i, (image, label) in enumerate(samples):
        shard, key = i % shards, sample_key(split, i)
        data, header = _encoded(image, image_format)
        _add(tars[shard], f"{key}.{MEMBER[image_format]}", data)
        _add(tars[shard], f"{key}.cls", str(label).encode())
        _add(tars[shard], f"{key}.json", json.dumps({"path": f"/orig/{key}.png", "size": list(image.shape[:2])})
             .encode())
        members.append((f"{key}.{MEMBER[image_format]}", header, len(data) - header, zlib.crc32(data[header:])))
    for tar in tars:
        tar.close()
    offsets = [_data_offsets(root / name) for name in names]
    for i, ((image, label), (member, header, length, crc)) in enumerate(zip(samples, members, strict=True)):
        index[i] = (i % shards, offsets[i % shards][member] + header, length, label, *image.shape[:2], crc)
    np.save(index_path(root, split), index)
    return SplitRecord(count=len(samples), shards=names, shard_bytes=[(root / name).stat().st_size for name in names],
                       index_sha256=index_digest(index))


def write_copy(root: Path, *, image_format: str = "jpeg", counts: dict[str, int] | None = None,
               short_side: int | None = 40, classes: int = 3) -> Path:
    """A copy of `counts` samples a split (default train 24, val 9, test 6), labels cycling over `classes`."""
    root.mkdir(parents=True, exist_ok=True)
    counts = counts or {"train": 24, "val": 9, "test": 6}
    splits = {}
    for offset, (split, n) in enumerate(counts.items()):
        samples = [(picture(i % classes, 100 * offset + i), i % classes) for i in range(n)]
        splits[split] = write_split(root, split, samples, image_format=image_format)
    write_manifest(root, Manifest(class_names=[f"class{c}" for c in range(classes)], splits=splits,
                                  source={"name": "folder", "path": "/orig", "fingerprint": "f" * 64},
                                  short_side=short_side, format=image_format,
                                  quality=95 if image_format == "jpeg" else None, app_version="test"))
    return root


def corrupt_member(root: Path, split: str, i: int) -> str:
    """Sample i's image member of `split` overwritten with zeros where the index points; its
    description as data=prepared names it (`<shard> member <key>.<ext>`)."""
    row = read_index(root, split)[i]
    shard = root / read_manifest(root).splits[split].shards[int(row["shard"])]
    with open(shard, "r+b") as f:
        f.seek(int(row["offset"]))
        f.write(b"\0" * int(row["length"]))
    return f"{shard} member {sample_key(split, i)}.{MEMBER[read_manifest(root).format]}"



def flip_byte(root: Path, split: str, i: int) -> str:
    """One byte in the middle of sample i's image data of `split` inverted, past any header a
    decoder checks; its description as data=prepared names it."""
    row = read_index(root, split)[i]
    shard = root / read_manifest(root).splits[split].shards[int(row["shard"])]
    with open(shard, "r+b") as f:
        f.seek(int(row["offset"]) + int(row["length"]) // 2)
        byte = f.read(1)[0]
        f.seek(-1, io.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))
    return f"{shard} member {sample_key(split, i)}.{MEMBER[read_manifest(root).format]}"


def write_as_format_1(root: Path) -> None:
    """The copy at `root` rewritten as an app before checksums wrote it: index rows without their
    CRC32, a version 1 manifest without checksums or shard sizes, and (a copy `prepare` wrote)
    shard records without them either."""
    manifest = json.loads((root / "manifest.json").read_text())
    for split, record in manifest["splits"].items():
        index = read_index(root, split)
        np.save(index_path(root, split), index[list(INDEX_DTYPE_1.names)].astype(INDEX_DTYPE_1))
        for shard in record["shards"]:
            journal = root / ".prepare" / f"{shard}.json"
            if journal.exists():
                kept = json.loads(journal.read_text())
                kept = {**{k: v for k, v in kept.items() if k != "bytes"}, "rows": [r[:6] for r in kept["rows"]]}
                journal.write_text(json.dumps(kept))
        manifest["splits"][split] = {"count": record["count"], "shards": record["shards"]}
    old = {k: v for k, v in manifest.items() if k != "checksum"}
    (root / "manifest.json").write_text(json.dumps({**old, "version": 1}, indent=2))
