"""Which rows of each global batch this process loads under data_parallel: process p of P loads [p·b, (p+1)·b),
b = batch / P; validation's short last batch is loaded whole by every process, replicated on every device."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np


def train_share(order: np.ndarray, batch: int, processes: int, process: int) -> np.ndarray:
    """This process's rows of each full global batch of `order`, in order."""
    if processes == 1:
        return order
    return order.reshape(-1, processes, batch // processes)[:, process].ravel()


@dataclass
class ValidationShare:
    """This process's part of validation over samples 0..n-1."""

    rows: np.ndarray  # the sample indices this process loads, in order
    sizes: list[int]  # the rows it hands to the step for each global batch
    whole_last: bool  # the last batch is short: loaded by every process, replicated on every device

    @property
    def batches(self) -> int:
        return len(self.sizes)


def validation_share(n: int, batch: int, processes: int, process: int) -> ValidationShare:
    """This process's share of each full global batch of `batch` over 0..n-1, and all of the short last one."""
    local, full = batch // processes, n // batch
    own = train_share(np.arange(full * batch), batch, processes, process)
    last = np.arange(full * batch, n)
    return ValidationShare(np.concatenate([own, last]), [local] * full + ([len(last)] if len(last) else []),
                           bool(len(last)))


def mirrored_sizes(n: int, batch: int, replicas: int) -> list[int]:
    """Mirrored validation batch sizes: a last batch too short to give each replica a row joins the one before."""
    full, rest = divmod(n, batch)
    sizes = [batch] * full + ([rest] if rest else [])
    if 0 < rest < replicas and full:
        sizes[-2:] = [batch + rest]
    return sizes


def regrouped(batches: Iterable[tuple], sizes: list[int]) -> Iterator[tuple]:
    """(images, labels) for each global batch of `sizes[i]` rows, from the loader's batches of this process's rows."""
    source = iter(batches)
    for size in sizes:
        xs, ys, got = [], [], 0
        while got < size:
            x, y = next(source)
            xs.append(x)
            ys.append(y)
            got += len(y)
        yield (xs[0], ys[0]) if len(xs) == 1 else (np.concatenate(xs), np.concatenate(ys))
