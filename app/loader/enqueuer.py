"""The enqueuer: which samples go in which batch, in which slot, built by which worker.

Work is split by sample, not by batch: every worker fills part of the same slot, so even one
slot ahead keeps every core busy. Batches come out in batch-index order, and no batch is
scheduled more than `max_size` ahead of the one being consumed (that one included), so the
queue holds at most `max_size` uint8 batches. Workers start once a run and serve every epoch
and both splits.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import AppError, DataError, MachineError, WorkerError
from app.loader import worker as worker_loop
from app.loader.ring import Ring
from app.processes import startable

log = logging.getLogger(__name__)

# A worker that dies is replaced and its samples rebuilt; this many deaths with no batch
# completed in between is a fault to report, not to retry forever.
MAX_DEATHS_IN_A_ROW = 3


@dataclass
class _Worker:
    conn: Connection
    handle: Any  # multiprocessing.Process or threading.Thread
    name: str
    pending: set[tuple[int, int]] = field(default_factory=set)  # (slot, position) handed out, not answered
    answered: int = 0
    ready: bool = False  # it said it has started (imports done, ring mapped)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def sentinel(self) -> int | None:
        return getattr(self.handle, "sentinel", None)


@dataclass
class _Slot:
    batch_no: int = -1
    split_name: str = ""
    epoch: int = 0
    todo: dict[int, int] = field(default_factory=dict)  # position -> sample index not yet written
    size: int = 0


class Enqueuer:
    def __init__(self, splits: dict, augmenters: dict, *, batch_size: int, image_size, workers: int = 2,
                 use_multiprocessing: bool = True, max_size: int = 2, start_method: str = "spawn",
                 timeout_s: float = 120.0, seed: int = 0, on_bad_sample: str = "raise",
                 max_bad_fraction: float = 0.0, bad_log: Path | None = None, startup_timeout_s: float = 300.0):
        self.splits, self.augmenters = splits, augmenters
        self.batch_size, self.image_size = batch_size, tuple(image_size)
        self.num_workers, self.use_multiprocessing = workers, use_multiprocessing
        self.max_size = max_size if workers > 0 else 1  # in-process: one batch, built on demand
        self.start_method, self.timeout_s, self.seed = start_method, timeout_s, seed
        self.startup_timeout_s = startup_timeout_s
        # raise: stop at a bad sample; skip: the next readable one in its place (training);
        # mark: leave its place and say which (predict, where a stand-in would be a made-up answer)
        self.on_bad_sample = on_bad_sample
        self.max_bad_fraction, self.bad_log = max_bad_fraction, bad_log
        self.failed: dict[str, dict[int, str]] = {name: {} for name in splits}  # mark: sample index → reason
        self.skipped: dict[str, set[int]] = {name: set() for name in splits}
        self.restarts = 0  # workers replaced this run
        self.ring: Ring | None = None
        self._workers: list[_Worker] = []
        self._slots: list[_Slot] = []
        self._deaths_in_a_row = 0
        # Worker processes are started from this one long-lived thread: Linux's parent-death
        # signal fires when the *thread* that started a process ends, and replacements would
        # otherwise be started from a pass's short-lived copy-ahead thread (app/loader/prefetch.py).
        self._starter: ThreadPoolExecutor | None = None

    @classmethod
    def from_config(cls, plain: dict, splits: dict, augmenters: dict, *, bad_log: Path | None = None,
                    on_bad_sample: str | None = None) -> Enqueuer:
        """The enqueuer `data`, `queue` and `seed` of a (plain, validated) config describe;
        `on_bad_sample` replaces data.on_bad_sample (predict's own policy)."""
        data, queue = plain["data"], plain["queue"]
        return cls(splits, augmenters, batch_size=data["batch_size"], image_size=data["image_size"],
                   workers=queue["workers"], use_multiprocessing=queue["use_multiprocessing"],
                   max_size=queue["max_size"], start_method=queue["start_method"], timeout_s=queue["timeout_s"],
                   seed=plain["seed"], on_bad_sample=on_bad_sample or data["on_bad_sample"],
                   max_bad_fraction=data["max_bad_fraction"], bad_log=bad_log,
                   startup_timeout_s=queue["startup_timeout_s"])

    # -- life cycle ---------------------------------------------------------------------

    @property
    def queue_bytes(self) -> int:
        return self.max_size * self.batch_size * self.image_size[0] * self.image_size[1] * 3

    @property
    def worker_pids(self) -> list[int]:
        return [w.handle.pid for w in self._workers if isinstance(w.handle, mp.process.BaseProcess)]

    def start(self) -> Enqueuer:
        shared = self.num_workers > 0 and self.use_multiprocessing
        self.ring = Ring(self.max_size, self.batch_size, self.image_size, shared=shared)
        self._slots = [_Slot() for _ in range(self.max_size)]
        if shared:
            self._starter = ThreadPoolExecutor(1, thread_name_prefix="app-worker-starter")
        try:
            for i in range(self.num_workers):
                self._workers.append(self._start_process(i) if shared else self._start_thread(i))
        except BaseException:
            self.close()
            raise
        return self

    def _start_process(self, i: int) -> _Worker:
        context = mp.get_context(self.start_method)
        parent_end, child_end = context.Pipe(duplex=True)
        parent_pid = os.getpid() if self.start_method == "spawn" else None
        process = context.Process(
            target=worker_loop.process_main, name=f"app-loader-{i}", daemon=True,
            args=(child_end, self.ring.spec, self.splits, self.augmenters, self.seed, self.on_bad_sample, parent_pid))
        with _child_environment(self.start_method):
            self._starter.submit(process.start).result()
        child_end.close()
        return _Worker(parent_end, process, f"worker process {process.pid}")

    def _start_thread(self, i: int) -> _Worker:
        parent_end, child_end = mp.Pipe(duplex=True)
        thread = threading.Thread(
            target=_serve_thread, name=f"app-loader-{i}", daemon=True,
            args=(child_end, self.ring.array, self.ring.done, self.splits, self.augmenters, self.seed,
                  self.on_bad_sample))
        thread.start()
        return _Worker(parent_end, thread, f"worker thread {i}", ready=True)

    def close(self) -> None:
        """Stop every worker (no orphans) and free the ring (nothing left in /dev/shm)."""
        workers, self._workers = self._workers, []
        for w in workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5.0
        for w in workers:
            while w.handle.is_alive() and time.monotonic() < deadline:
                _discard_replies(w.conn)  # a worker blocked on a full pipe could not see the None
                w.handle.join(timeout=0.05)
            if isinstance(w.handle, mp.process.BaseProcess):
                if w.handle.is_alive():
                    w.handle.kill()
                w.handle.join(timeout=5.0)
            w.conn.close()
        if self._starter is not None:
            self._starter.shutdown()
            self._starter = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None

    def __enter__(self) -> Enqueuer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- one pass over a split ----------------------------------------------------------

    def batches(self, split_name: str, order: np.ndarray, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(uint8 batch, labels) in order. The uint8 array is a view of a ring slot, valid
        until the next batch is asked for: copy it out (app/loader/prefetch.py) before that."""
        if self.ring is None:
            raise RuntimeError("Enqueuer.batches() before start()")
        split = self.splits[split_name]
        count = -(-len(order) // self.batch_size)
        bounds = [(b * self.batch_size, min(len(order), (b + 1) * self.batch_size)) for b in range(count)]
        scheduled = 0
        try:
            for b in range(count):
                while scheduled < count and scheduled < b + self.max_size:
                    self._schedule(split_name, epoch, scheduled, order[slice(*bounds[scheduled])])
                    scheduled += 1
                slot = self._slots[b % self.max_size]
                if self.num_workers == 0:
                    self._build_here(b % self.max_size)
                else:
                    self._wait_for(b % self.max_size)
                self._deaths_in_a_row = 0
                yield self.ring.array[b % self.max_size, : slot.size], split.labels[order[slice(*bounds[b])]]
                slot.batch_no = -1
        except GeneratorExit:  # the consumer stopped early: wait for what is in flight
            self._drain()
            raise
        except BaseException:  # a fault or Ctrl-C: nothing here will be reused
            self.close()
            raise

    def _schedule(self, split_name: str, epoch: int, batch_no: int, indices: np.ndarray) -> None:
        slot_index = batch_no % self.max_size
        slot = self._slots[slot_index]
        slot.batch_no, slot.split_name, slot.epoch, slot.size = batch_no, split_name, epoch, len(indices)
        slot.todo = {position: int(index) for position, index in enumerate(indices)}
        self.ring.done[slot_index] = 0
        if self.num_workers == 0:
            return
        # Positions dealt round-robin, starting one worker further each batch, so uneven
        # batches even out; which worker builds a sample never changes its pixels.
        n = len(self._workers)
        for k, w in enumerate(self._workers):
            self._send(w, slot_index, range((k + batch_no) % n, len(indices), n))

    def _send(self, w: _Worker, slot_index: int, positions) -> None:
        slot = self._slots[slot_index]
        items = [(p, slot.todo[p]) for p in positions]
        if not items:
            return
        w.pending.update((slot_index, p) for p, _ in items)
        try:
            w.conn.send(("batch", slot.split_name, slot.epoch, slot_index, items))
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died: _pump sees its sentinel and hands `pending` to its replacement

    def _build_here(self, slot_index: int) -> None:
        slot = self._slots[slot_index]
        split, augmenter = self.splits[slot.split_name], self.augmenters[slot.split_name]
        for position, index in list(slot.todo.items()):
            reply = worker_loop.fill(self.ring.array, slot_index, position, index, split, augmenter,
                                      self.seed, slot.epoch, self.on_bad_sample)
            self._handle(reply, None, "the training process")

    def _wait_for(self, slot_index: int) -> None:
        slot = self._slots[slot_index]
        deadline = time.monotonic() + self.timeout_s
        while slot.todo:
            if self._starting():  # the batch's clock runs once every worker is up
                deadline = time.monotonic() + self.timeout_s
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                done = self.ring.done[slot_index]
                missing = [i for p, i in slot.todo.items() if not done[p]] or list(slot.todo.values())
                raise WorkerError(
                    f"batch {slot.batch_no} of the {slot.split_name} split was not ready after queue.timeout_s="
                    f"{self.timeout_s:g} s: still waiting for sample(s) {', '.join(map(str, missing[:10]))} "
                    f"({self.splits[slot.split_name].describe(missing[0])}). A worker is hung or far too slow; "
                    "raise queue.timeout_s if the samples are just slow to load.")
            self._pump(min(remaining, 1.0))  # threads have no sentinel: check on them now and then

    def _starting(self) -> bool:
        """Whether a worker is still starting; one that takes past queue.startup_timeout_s is an error."""
        starting = [w for w in self._workers if not w.ready]
        for w in starting:
            if time.monotonic() - w.started_at > self.startup_timeout_s:
                raise WorkerError(
                    f"{w.name} did not start within queue.startup_timeout_s={self.startup_timeout_s:g} s (importing "
                    "its modules and unpickling the data source and augmentation). The machine may be overloaded; "
                    "raise queue.startup_timeout_s, or lower queue.workers.")
        return bool(starting)

    def _pump(self, wait_s: float) -> None:
        """Take every reply that is there (waiting up to `wait_s` for one); replace dead workers."""
        by_conn = {w.conn: w for w in self._workers}
        by_sentinel = {w.sentinel: w for w in self._workers if w.sentinel is not None}
        for obj in wait([*by_conn, *by_sentinel], timeout=wait_s):
            w = by_conn.get(obj) or by_sentinel[obj]
            if w not in self._workers:
                continue  # replaced in this round already
            try:
                while w.conn.poll():  # replies a worker sent before it died still count
                    self._handle(w.conn.recv(), w, w.name)
            except (EOFError, ConnectionResetError, BrokenPipeError):
                pass
            if not w.handle.is_alive():
                self._replace(w)
        for w in self._workers:
            if w.sentinel is None and not w.handle.is_alive():
                raise WorkerError(f"{w.name} stopped unexpectedly while building batches.")

    def _replace(self, dead: _Worker) -> None:
        """A worker died (the OOM killer's SIGKILL, say): start another, hand it the dead one's samples."""
        dead.handle.join(timeout=2.0)
        dead.conn.close()
        # written before it died, though its share message never came
        self._settle(dead, {(s, p) for s, p in dead.pending if self.ring.done[s, p]})
        how = _exit_description(dead.handle.exitcode)
        if not dead.answered and (dead.handle.exitcode or 0) > 0:  # an error, not a kill: restarting won't help
            raise WorkerError(
                f"{dead.name} exited ({how}) before building any sample: it could not start. Its Python error is "
                "on stderr above; typically the data source or augmentation cannot be rebuilt in a fresh "
                f"process (queue.start_method={self.start_method}) or a module fails to import there.")
        self._deaths_in_a_row += 1
        if self._deaths_in_a_row > MAX_DEATHS_IN_A_ROW:
            raise WorkerError(
                f"{dead.name} died ({how}), the {self._deaths_in_a_row}th worker death with no batch completed "
                "in between: giving up instead of restarting in a loop. If memory runs out, lower queue.workers, "
                "queue.max_size or data.batch_size; else look for the sample that kills the decoder.")
        i = self._workers.index(dead)
        self._workers[i] = new = self._start_process(i)
        self.restarts += 1
        log.warning("%s died (%s); started %s to rebuild its %d unfinished samples", dead.name, how, new.name,
                    len(dead.pending))
        for slot_index in sorted({s for s, _ in dead.pending}):
            self._send(new, slot_index, sorted(p for s, p in dead.pending if s == slot_index))

    def _handle(self, reply: tuple, w: _Worker | None, who: str) -> None:
        if reply[0] == "ready":
            w.ready = True
            return
        if reply[0] == "share":  # every sample of w's share in this slot is written or answered
            self._settle(w, {key for key in w.pending if key[0] == reply[1]})
            return
        kind, slot_index, position = reply[:3]
        if w is not None:
            w.pending.discard((slot_index, position))
            w.answered += 1
        slot = self._slots[slot_index]
        if kind in ("ok", "skipped", "marked"):
            slot.todo.pop(position, None)
            if kind == "skipped":
                self._record_skip(slot.split_name, *reply[3:])
            elif kind == "marked":
                index, where, reason = reply[3:]
                self.failed[slot.split_name][index] = reason
                log.warning("sample %d of the %s split (%s) could not be loaded: %s", index, slot.split_name,
                            where, reason)
            return
        index, where, detail = reply[3:]
        if kind == "bad":
            raise DataError(
                f"sample {index} of the {slot.split_name} split ({where}) could not be loaded: {detail}. "
                "Fix or remove the file, or set data.on_bad_sample=skip to replace such samples "
                "(logged to bad_samples.txt) up to data.max_bad_fraction.")
        last = detail.strip().splitlines()[-1] if detail.strip() else "unknown error"
        if last.startswith("MemoryError"):  # the machine's limit, not a bug in the decoder
            raise MachineError(
                f"{who} ran out of memory on sample {index} of the {slot.split_name} split ({where}): lower "
                "data.batch_size, queue.max_size or queue.workers, or data.max_image_pixels to refuse such images.")
        error = WorkerError(
            f"{who} failed on sample {index} of the {slot.split_name} split ({where}), batch {slot.batch_no}: "
            f"{last}. The worker's traceback is in train.log.")
        error.worker_traceback = detail
        raise error

    def _settle(self, w: _Worker, written: set[tuple[int, int]]) -> None:
        """(slot, position) pairs `w` has written: no longer waited for."""
        for slot_index, position in written:
            self._slots[slot_index].todo.pop(position, None)
        w.pending -= written
        w.answered += len(written)

    def _record_skip(self, split_name: str, index: int, where: str, reason: str) -> None:
        seen = self.skipped[split_name]
        if index in seen:
            return
        seen.add(index)
        log.warning("skipped sample %d of the %s split (%s): %s", index, split_name, where, reason)
        if self.bad_log is not None:
            with open(self.bad_log, "a", encoding="utf-8") as f:
                f.write(f"{split_name}\t{index}\t{where}\t{reason}\n")
        total = len(self.splits[split_name])
        if len(seen) > self.max_bad_fraction * total:
            raise DataError(
                f"{len(seen)} of {total} samples of the {split_name} split could not be loaded, above "
                f"data.max_bad_fraction={self.max_bad_fraction:g} (last: {where}: {reason}); "
                f"see bad_samples.txt in the run directory.")

    def _drain(self) -> None:
        """Let every sample already handed out land, so no late write hits a reused slot."""
        if self.num_workers == 0 or not self._workers:
            for slot in self._slots:
                slot.todo.clear()
            return
        deadline = time.monotonic() + self.timeout_s
        try:
            while any(slot.todo for slot in self._slots) and time.monotonic() < deadline:
                self._pump(0.5)
        except AppError:  # a fault in a batch nobody will consume
            pass
        if any(slot.todo for slot in self._slots):
            self.close()  # workers that cannot finish are not reused


def _exit_description(code: int | None) -> str:
    """What is known of how a process ended: its exit code, or the signal that killed it."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by signal {signal.Signals(-code).name} ({-code})"
    except ValueError:
        return f"killed by signal {-code}"


def _serve_thread(conn, ring, done, splits, augmenters, seed, on_bad_sample) -> None:
    try:
        worker_loop.serve(conn, ring, done, splits, augmenters, seed, on_bad_sample)
    finally:
        conn.close()


def _discard_replies(conn: Connection) -> None:
    try:
        while conn.poll():
            conn.recv()
    except (EOFError, OSError):
        pass


@contextmanager
def _child_environment(start_method: str):
    """Workers inherit single-threaded math libraries and ignore Ctrl-C from the terminal
    (the training process decides), both from their first instruction."""
    saved = {k: os.environ.get(k) for k in worker_loop.THREAD_ENV}
    os.environ.update(worker_loop.THREAD_ENV)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        with startable(start_method):
            yield
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
