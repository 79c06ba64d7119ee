"""What becomes of an unreadable sample (`data.on_bad_sample`), and the error a worker's failure stands for."""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.errors import AppError, DataError, MachineError, WorkerError
from app.io import append_tsv
from app.loader import messages

log = logging.getLogger(__name__)
MAX_REPLACEMENTS = 100  # `skip`: how many following samples a worker tries in place of a bad one


@dataclass(frozen=True)
class PolicyNames:
    """How messages name the policy's settings and where skipped samples go: config keys or ImageLoader's (LIBRARY)."""

    skip: str = "data.on_bad_sample=skip"
    max_bad_fraction: str = "data.max_bad_fraction"
    skipped_to: str = "logged to bad_samples.txt"


LIBRARY = PolicyNames(skip='ImageLoader(on_bad_sample="skip")', max_bad_fraction="max_bad_fraction",
                      skipped_to="each a warning of the app.loader.bad_samples logger, counted in loader.skipped")


class BadSamples:
    """The bad samples of one loader's splits, by split name."""

    def __init__(self, splits: dict, max_bad_fraction: float, bad_log: Path | None,
                 names: PolicyNames = PolicyNames()):
        self.sizes = {name: len(split) for name, split in splits.items()}
        self.labels = {name: split.labels for name, split in splits.items()}
        self.describe = {name: split.describe for name, split in splits.items()}
        self.max_bad_fraction, self.bad_log, self.names = max_bad_fraction, bad_log, names
        self.failed: dict[str, dict[int, str]] = {name: {} for name in splits}  # mark: sample index → reason
        # a resumed run's list goes on: a sample skipped before the stop is not listed (or counted) twice
        self.skipped: dict[str, set[int]] = {name: _listed_in(bad_log, name) for name in splits}

    def take(self, reply, split_name: str) -> None:
        """A worker's Skipped, Marked, Bad or Stranded reply; DataError for Bad, Stranded or skips past the limit."""
        if isinstance(reply, messages.Skipped):
            self._log_skipped(split_name, reply)
        elif isinstance(reply, messages.Marked):
            self.failed[split_name][reply.index] = reply.detail
            log.warning("sample %d of the %s split (%s) could not be loaded: %s", reply.index, split_name,
                        reply.where, reply.detail)
        elif isinstance(reply, messages.Stranded):
            tried = min(MAX_REPLACEMENTS, self.sizes[split_name]) - 1
            raise DataError(
                f"sample {reply.index} of the {split_name} split ({reply.where}) could not be loaded: {reply.detail}; "
                f"and none of the {tried} samples after it that could stand in for it ({self.names.skip}) "
                f"could be read either: the {split_name} split has no readable image there. Fix or replace those "
                f"files{self._listed(' (', ' lists those found so far)')}.")
        else:
            raise DataError(
                f"sample {reply.index} of the {split_name} split ({reply.where}) could not be loaded: "
                f"{reply.detail}. Fix or remove the file, or set {self.names.skip} to replace such samples "
                f"({self.names.skipped_to}) up to {self.names.max_bad_fraction}.")

    def _log_skipped(self, split_name: str, reply: messages.Skipped) -> None:
        seen = self.skipped[split_name]
        if reply.index not in seen:
            seen.add(reply.index)
            log.warning("skipped sample %d of the %s split (%s): %s", reply.index, split_name, reply.where,
                        reply.detail)
            if self.bad_log is not None:
                append_tsv(self.bad_log, [(split_name, reply.index, reply.where, reply.detail)])
            if np.ndim(self.labels[split_name]) == 1:  # one class a sample (several: no class to lose whole)
                self._warn_if_a_class_is_gone(split_name, int(self.labels[split_name][reply.index]))
        total = self.sizes[split_name]  # checked for one listed before a resume too: the limit may be lower now
        if len(seen) > self.max_bad_fraction * total:
            raise DataError(
                f"{len(seen)} of {total} samples of the {split_name} split could not be loaded, above "
                f"{self.names.max_bad_fraction}={self.max_bad_fraction:g} (last: {reply.where}: {reply.detail})"
                f"{self._listed('; see ', '')}.")

    def _warn_if_a_class_is_gone(self, split_name: str, label: int) -> None:
        labels = np.asarray(self.labels[split_name])
        members = np.flatnonzero(labels == label)
        if np.isin(members, list(self.skipped[split_name])).all():  # named by a file: its folder is the class's
            log.warning("every sample of class %d (%s, ...) of the %s split (%d files) could not be loaded: the %s "
                        "split has none of that class left%s", label,
                        self.describe[split_name](int(members[0])), split_name, len(members), split_name,
                        self._listed("; see ", ""))

    def _listed(self, before: str, after: str) -> str:
        """Where the bad files are listed, for a message; nothing where no list is kept (bench)."""
        return "" if self.bad_log is None else f"{before}{self.bad_log}{after}"


def _listed_in(bad_log: Path | None, split_name: str) -> set[int]:
    """The sample indices of `split_name` that `bad_log` (bad_samples.txt) lists already."""
    if bad_log is None or not Path(bad_log).is_file():
        return set()
    with open(bad_log, encoding="utf-8", newline="") as f:
        return {int(row[1]) for row in csv.reader(f, delimiter="\t") if len(row) >= 2 and row[0] == split_name
                and row[1].isdigit()}


def failure(note: messages.Failed, split_name: str, batch_no: int, who: str) -> AppError:
    """The error a Failed note stands for: out of memory, or a failure with the worker's traceback."""
    detail = note.detail.strip()
    last = detail.splitlines()[-1] if detail else "unknown error"
    if last.startswith("MemoryError"):  # the machine's limit, not a bug in the decoder
        return MachineError(
            f"{who} ran out of memory on sample {note.index} of the {split_name} split ({note.where}): lower "
            "queue.workers or queue.max_size, or data.max_image_pixels to refuse such images (a resumed run may "
            "change these too), or data.batch_size in a new run.")
    if last.startswith("app.errors.DataError: "):  # storage that could not be reached: its own paragraph
        return DataError(f"{who} could not read sample {note.index} of the {split_name} split: "
                         f"{last.removeprefix('app.errors.DataError: ')}")
    error = WorkerError(f"{who} failed on sample {note.index} of the {split_name} split ({note.where}), batch "
                        f"{batch_no}: {last}. The worker's traceback is in train.log.")
    error.worker_traceback = note.detail
    return error
