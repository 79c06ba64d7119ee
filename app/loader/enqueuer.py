"""The enqueuer: which samples go in which batch, slot and worker. Work is split by sample, so even one slot ahead
keeps every worker busy; batches come out in order, at most `max_size` scheduled ahead (the consumed one included)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from app.errors import AppError, WorkerError
from app.loader import messages
from app.loader import worker as worker_loop
from app.loader.bad_samples import BadSamples, failure
from app.loader.pool import Pool, Work, Worker, exit_description
from app.loader.ring import Ring
from app.loader.settings import Queue, Settings, ring_slots
from app.loader.telemetry import Telemetry
from app.processes import signals_held

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class _Slot:
    batch_no: int = -1
    split_name: str = ""
    epoch: int = 0
    todo: dict[int, int] = field(default_factory=dict)  # position -> sample index not yet written
    draws: dict[int, int] = field(default_factory=dict)  # position -> its draw of the index, where not the first
    size: int = 0
    labels: np.ndarray | None = None  # the batch's labels: a stand-in's own where one was written (skip)
    fill: int = 0  # how many batches it has been handed: a worker's late ShareDone names an earlier one


class Enqueuer:
    def __init__(self, splits: dict, augmenters: dict, settings: Settings, seed: int = 0,
                 on_bad_sample: str = "raise"):
        """`on_bad_sample`: raise, skip (the next readable sample in its place) or mark (zeros; see `bad.failed`)."""
        self.splits, self.augmenters, self.settings = splits, augmenters, settings  # the settings taken as they are
        self.seed, self.on_bad_sample = seed, on_bad_sample
        queue = settings.queue
        wanted = queue.max_size if queue.workers > 0 else 1  # in-process: one batch, built on demand
        self.slot_count, capped = ring_slots(wanted, {name: len(split) for name, split in splits.items()},
                                             settings.batch_size)
        if capped:
            log.info(capped)
        self.bad = BadSamples(splits, settings.max_bad_fraction, settings.bad_log, settings.policy_names)
        self.restarts = 0  # workers replaced this run
        self.telemetry = Telemetry()
        self.ring: Ring | None = None
        self.pool: Pool | None = None
        self._slots: list[_Slot] = []

    @classmethod
    def from_config(cls, config, splits: dict, augmenters: dict, settings: Settings,
                    on_bad_sample: str | None = None) -> Enqueuer:
        """The enqueuer of a loaded config's `seed` and `data.on_bad_sample`; `on_bad_sample` overrides the latter."""
        return cls(splits, augmenters, settings, seed=config.seed,
                   on_bad_sample=on_bad_sample or str(config.data.on_bad_sample.value))

    @property
    def queue(self) -> Queue:
        return self.settings.queue

    @property
    def queue_bytes(self) -> int:
        return self.slot_count * self.settings.batch_bytes

    @property
    def worker_pids(self) -> list[int]:
        return self.pool.pids if self.pool else []

    @property
    def _workers(self) -> list[Worker]:
        return self.pool.workers if self.pool else []

    @property
    def work(self) -> Work:
        return Work(self.splits, self.augmenters, self.seed, self.on_bad_sample)

    @property
    def shares_memory(self) -> bool:  # worker processes: the ring is a segment in /dev/shm
        return self.queue.workers > 0 and self.queue.use_multiprocessing

    def start(self) -> Enqueuer:
        shared = self.shares_memory  # dead processes' rings are the caller's to delete (Loader's `with` does)
        try:  # from the ring on: a signal at any point here leaves no segment in /dev/shm
            settings = self.settings
            self.ring = Ring(self.slot_count, (settings.batch_size, *settings.image_size), shared=shared,
                             pixels=settings.pixels, mask_dtype=settings.mask_dtype)
            self._slots = [_Slot() for _ in range(self.slot_count)]
            self.pool = Pool(self.ring, self.work, processes=shared, queue=self.queue)
            self.pool.start(self.queue.workers)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every worker, then free the ring even if that failed; Ctrl-C and SIGTERM wait until it is done."""
        with signals_held():
            try:
                if self.pool is not None:
                    self.pool.close()
                    self.pool = None
            finally:
                if self.ring is not None:
                    self.ring.close()
                    self.ring = None

    def __enter__(self) -> Enqueuer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def batches(self, split_name: str, order: np.ndarray, epoch: int,
                draws: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(uint8 batch, targets) in order; the batch (and masks) a view of a ring slot, valid until the next is asked.
        `draws`: beside `order`, which draw of its index each is in the epoch (data.sampling), else all first."""
        if self.ring is None:
            raise RuntimeError("Enqueuer.batches() before start()")
        size = self.settings.batch_size
        count = -(-len(order) // size)
        bounds = [(b * size, min(len(order), (b + 1) * size)) for b in range(count)]
        scheduled = 0
        try:
            for b in range(count):
                while scheduled < count and scheduled < b + self.slot_count:
                    part = slice(*bounds[scheduled])
                    drawn = None if draws is None else draws[part]
                    self._schedule(split_name, epoch, scheduled, order[part], draws=drawn)
                    scheduled += 1
                slot = self._slots[b % self.slot_count]
                if self.queue.workers == 0:
                    self._build_here(b % self.slot_count)
                else:
                    self._pump(0)  # the replies already there, so the ring's fill is as it stands
                    self.telemetry.observe_fill(self._slots, self.slot_count)
                    self._wait_for(b % self.slot_count)
                self.pool.completed_batch()
                # its targets: the labels, or (a class a pixel) a view of the masks in the ring
                masks = self.ring.masks
                yield self.ring.array[b % self.slot_count, : slot.size], (
                    slot.labels if masks is None else masks[b % self.slot_count, : slot.size])
                slot.batch_no = -1
        except GeneratorExit:  # the consumer stopped early: wait for what is in flight
            self._drain()
            raise
        except BaseException:  # a fault or Ctrl-C: nothing here will be reused
            self.close()
            raise

    def _schedule(self, split_name: str, epoch: int, batch_no: int, indices: np.ndarray, *,
                  draws: np.ndarray | None) -> None:
        slot_index = batch_no % self.slot_count
        slot = self._slots[slot_index]
        slot.batch_no, slot.split_name, slot.epoch, slot.size = batch_no, split_name, epoch, len(indices)
        slot.fill += 1
        slot.todo = {position: int(index) for position, index in enumerate(indices)}
        slot.draws = {} if draws is None else {position: int(d) for position, d in enumerate(draws) if d}
        slot.labels = self.splits[split_name].labels[indices]  # a copy: fancy indexing
        self.ring.done[slot_index] = 0
        if self.queue.workers == 0:
            return
        # Positions dealt round-robin, starting one worker further each batch, so uneven
        # batches even out; which worker builds a sample never changes its pixels.
        n = len(self._workers)
        for k, w in enumerate(self._workers):
            self._send(w, slot_index, range((k + batch_no) % n, len(indices), n))

    def _send(self, w: Worker, slot_index: int, positions) -> None:
        slot = self._slots[slot_index]
        items = [messages.Item(p, slot.todo[p], slot.draws.get(p, 0)) for p in positions]
        if not items:
            return
        w.pending.update((slot_index, item.position) for item in items)
        try:
            w.conn.send(messages.Task(split=slot.split_name, epoch=slot.epoch, slot=slot_index, items=items,
                                      fill=slot.fill))
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died: _pump sees its sentinel and hands `pending` to its replacement

    def _build_here(self, slot_index: int) -> None:
        slot = self._slots[slot_index]
        task, work = messages.Task(split=slot.split_name, epoch=slot.epoch, slot=slot_index, items=[]), self.work
        for position, index in list(slot.todo.items()):
            item = messages.Item(position, index, slot.draws.get(position, 0))
            reply = worker_loop.fill(self.ring.slots, task, work, item)
            self._handle(reply, None, "the training process")
        self.telemetry.add_stages(worker_loop.take_stages())

    def _wait_for(self, slot_index: int) -> None:
        slot = self._slots[slot_index]
        deadline = time.monotonic() + self.queue.timeout_s
        while slot.todo:
            if self.pool.starting():  # the batch's clock runs once every worker is up
                deadline = time.monotonic() + self.queue.timeout_s
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                done = self.ring.done[slot_index]
                missing = [i for p, i in slot.todo.items() if not done[p]] or list(slot.todo.values())
                raise WorkerError(
                    f"batch {slot.batch_no} of the {slot.split_name} split was not ready after queue.timeout_s="
                    f"{self.queue.timeout_s:g} s: still waiting for sample(s) {', '.join(map(str, missing[:10]))} "
                    f"({self.splits[slot.split_name].describe(missing[0])}). A worker is hung or far too slow; "
                    "raise queue.timeout_s if the samples are just slow to load.")
            self._pump(min(remaining, 1.0))  # threads have no sentinel: check on them now and then

    def _pump(self, wait_s: float) -> None:
        """Take every reply that is there (waiting up to `wait_s` for one); replace dead workers."""
        for w in self.pool.wait(wait_s):
            if w not in self._workers:
                continue  # replaced in this round already
            try:
                while w.conn.poll():  # replies a worker sent before it died still count
                    self._handle(w.conn.recv(), w, w.name)
            except (EOFError, ConnectionResetError, BrokenPipeError):
                pass
            if not w.handle.is_alive():
                self._replace(w)
        self.pool.check_threads()

    def _replace(self, dead: Worker) -> None:
        """A worker died (the OOM killer's SIGKILL, say, or its fork server's): start another, hand it its samples."""
        server = self.pool.lost_fork_server(dead)
        dead.handle.join(timeout=2.0)
        dead.conn.close()
        # written before it died, though its share message never came
        self._settle(dead, {(s, p) for s, p in dead.pending if self.ring.done[s, p]})
        how = exit_description(dead.handle.exitcode) + (f"; its fork server, process {server}, died" if server else "")
        if not dead.answered and (dead.handle.exitcode or 0) > 0 and not server:  # an error: restarting won't help
            raise WorkerError(
                f"{dead.name} exited ({how}) before building any sample: it could not start. Its Python error is "
                "on stderr above; typically the data source or augmentation cannot be rebuilt in a fresh "
                f"process (queue.start_method={self.queue.start_method}) or a module fails to import there.")
        new = self.pool.replace(dead, how, server)
        self.restarts += 1
        log.warning("%s died (%s); started %s to rebuild its %d unfinished samples", dead.name, how, new.name,
                    len(dead.pending))
        for slot_index in sorted({s for s, _ in dead.pending}):
            self._send(new, slot_index, sorted(p for s, p in dead.pending if s == slot_index))

    def _handle(self, reply, w: Worker | None, who: str) -> None:
        if isinstance(reply, messages.Ready):
            self.pool.started(w, reply.preloaded)
            return
        if isinstance(reply, messages.ShareDone):  # every sample of w's share in this slot is written or answered
            self.telemetry.add_stages(reply.stages)
            if reply.fill == self._slots[reply.slot].fill:  # not a batch the slot held before
                self._settle(w, {key for key in w.pending if key[0] == reply.slot})
            return
        if w is not None:
            w.pending.discard((reply.slot, reply.position))
            w.answered += 1
        slot = self._slots[reply.slot]
        if isinstance(reply, messages.Failed):
            raise failure(reply, slot.split_name, slot.batch_no, who)
        if not isinstance(reply, messages.Written):
            self.bad.take(reply, slot.split_name)  # raises for Bad
        if isinstance(reply, messages.Skipped):  # the image is the stand-in's: so is the label
            slot.labels[reply.position] = self.splits[slot.split_name].labels[reply.stand_in]
        slot.todo.pop(reply.position, None)

    def _settle(self, w: Worker, written: set[tuple[int, int]]) -> None:
        """(slot, position) pairs `w` has written: no longer waited for."""
        for slot_index, position in written:
            self._slots[slot_index].todo.pop(position, None)
        w.pending -= written
        w.answered += len(written)

    def _drain(self) -> None:
        """Let every sample already handed out land, so no late write hits a reused slot."""
        if self.queue.workers == 0 or not self._workers:
            for slot in self._slots:
                slot.todo.clear()
            return
        deadline = time.monotonic() + self.queue.timeout_s
        try:
            while any(slot.todo for slot in self._slots) and time.monotonic() < deadline:
                self._pump(0.5)
        except AppError:  # a fault in a batch nobody will consume
            pass
        if any(slot.todo for slot in self._slots):
            self.close()  # workers that cannot finish are not reused

