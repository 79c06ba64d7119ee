"""Typed messages between the training process and its loader workers, one pipe a worker; pixels go in the ring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

STOP = None  # parent → worker: end the loop


class Item(NamedTuple):
    """A sample to build: its place in the batch, its index, which draw of it this is (data.sampling; 0 the first)."""

    position: int
    index: int
    draw: int = 0


@dataclass(frozen=True, kw_only=True)
class Task:
    """Parent → worker: build these samples into `slot`, the `fill`th time it is filled."""

    split: str
    epoch: int
    slot: int
    items: list[Item]
    fill: int = 0  # which fill of the slot: its ShareDone names it


@dataclass(frozen=True)
class Ready:
    """Worker → parent, once: started (imports done, ring mapped); its tasks may be timed from now."""

    preloaded: bool = False  # its modules came imported by the fork server that forked it


@dataclass(frozen=True)
class ShareDone:
    """Worker → parent: its share of `slot` is written or answered; `stages`: as worker.take_stages returns them."""

    slot: int
    # a share answered sample by sample completes its batch before this comes, when the slot may hold the next
    fill: int
    stages: tuple = (0.0, 0.0, 0.0, 0.0, 0, 0)


@dataclass(frozen=True)
class Written:
    """A sample's pixels are in the ring: from the in-process builder only (a process sets the `done` byte instead)."""

    slot: int
    position: int


@dataclass(frozen=True, kw_only=True)
class SampleNote:
    """Worker → parent: what became of one sample other than being written as itself."""

    slot: int
    position: int
    index: int
    where: str  # the file or row, for messages
    detail: str  # the reason, or a traceback for Failed


@dataclass(frozen=True, kw_only=True)
class Skipped(SampleNote):
    """Unreadable; `stand_in`, the next readable sample, was written in its place (its label too)."""

    stand_in: int


class Marked(SampleNote):
    """Unreadable; zeros written in its place, to be reported as such (predict)."""


class Bad(SampleNote):
    """Unreadable, and the policy is to stop (data.on_bad_sample=raise)."""


class Stranded(SampleNote):
    """Unreadable under data.on_bad_sample=skip, and so is every sample that might stand in."""


class Failed(SampleNote):
    """An exception other than a bad file: a bug or the machine's limit; `detail` is its traceback."""
