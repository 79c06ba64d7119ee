"""A run's data source found again and checked to be the one it trained on; a refusal names what changed."""

from __future__ import annotations

from pathlib import Path

from app.augment import build_compose, eval_transforms, short_side_rule
from app.data.copies.prepared import PreparedSplit, check_short_side
from app.data.sources import cifar, synthetic
from app.data.sources.chosen import load_or_generate_source
from app.errors import DataError
from app.runs.rundir import read_json

SPLIT_MISSING = ("it records which samples the run trains and validates on; restore it from a copy of the run, "
                 "or start a new run")


def checked_source(config, run_dir: Path | None = None):
    """A config's data source, the run's own or `config.data`'s (made if missing); a copy stored too small refused."""
    source = load_or_generate_source(config.data) if run_dir is None else run_source(run_dir, config.data)
    check_stored_sizes(config, source)
    return source


def run_source(run_dir: Path, data_config):
    """An existing run's data source, checked to be the one it trained on; refused before any work when it is not."""
    recorded = read_json(Path(run_dir) / "split.json", SPLIT_MISSING)
    if recorded.get("source") == "synthetic":
        synthetic.check_generator(str(recorded.get("root", "")), run_dir)
    if recorded.get("source") == "cifar":
        cifar.check_split(recorded, run_dir)
    source = load_or_generate_source(data_config)
    check_same_data(run_dir, source)
    return source


def check_same_data(run_dir: Path, source) -> None:
    """A DataError naming what changed unless split.json's fingerprint is the source's (old runs: names, sizes)."""
    recorded = read_json(Path(run_dir) / "split.json", SPLIT_MISSING)
    fingerprint = recorded.get("fingerprint")
    now = source.fingerprint if "fingerprint_covers" in recorded else source.names_sizes_fingerprint
    if fingerprint == now:
        return
    detail = ""
    if recorded.get("names_sizes_fingerprint") and recorded["names_sizes_fingerprint"] == \
            source.names_sizes_fingerprint:
        detail = (" Only modification times differ: the files were rewritten, or copied without keeping "
                  "their times (cp -p and rsync -t keep them).")
    raise DataError(f"the data changed since {run_dir} was trained (split.json fingerprint "
                    f"{str(fingerprint)[:12]}, now {str(now)[:12]}; it covers "
                    f"{recorded.get('fingerprint_covers', 'relative paths and sizes')}): the samples would not be "
                    f"the run's.{_changed_files(recorded, source, Path(run_dir) / 'split.json')}{detail} "
                    "Restore the data, or start a new run.")


def _changed_files(recorded: dict, source, split_file: Path) -> str:
    """For a folder source: the files new, gone, or modified since split.json was written, as a sentence or ""."""
    if not isinstance(recorded.get("train"), list) or "train" not in source.split:
        return ""
    before = set(recorded["train"]) | set(recorded.get("val") or [])
    now = set(source.split["train"]) | set(source.split["val"])
    root = Path(source.split["root"])
    since = split_file.stat().st_mtime
    modified = sorted(rel for rel in now & before if _modified_after(root / rel, since))
    parts = [f"{len(names)} {what} ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})"
             for what, names in (("new", sorted(now - before)), ("gone", sorted(before - now)),
                                 ("modified after the run started", modified)) if names]
    return f" In {root}: {'; '.join(parts)}." if parts else ""


def _modified_after(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime > since
    except OSError:
        return False


def check_stored_sizes(config, source) -> None:
    """DataError, before any work, for a prepared copy stored smaller than a loaded config's transforms need."""
    if not isinstance(source.train, PreparedSplit):
        return
    size = config.data.image_size
    evaluation = eval_transforms(config.augment, size)
    for name, split, transforms in (("train", source.train, config.augment.transforms),
                                    ("evaluation", source.val, evaluation)):
        need, _ = short_side_rule(build_compose(transforms, size), "short-side check")
        check_short_side(split, need, f"the {name} transforms (to {size[0]}×{size[1]})")
