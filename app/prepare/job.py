"""The prepare job: each unfinished shard in order, its samples encoded by a spawn pool (not the loader's: samples are
of their own size) and written in order under a progress bar; bad samples by data.on_bad_sample."""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from app.data.copies.shards import BAD_SAMPLES, sample_key
from app.data.copies.storage import Store
from app.errors import DataError
from app.prepare.encode import Bad, Encoding, encode_chunk, encode_or_bad, start_worker
from app.prepare.finish import write_bad_samples
from app.prepare.plan import per_shard, shard_orders, write_record
from app.prepare.tar import ShardWriter, delete_stale_temporaries
from app.processes import delete_orphan_semaphores

CHUNK = 8  # samples a task: few enough that the pool stays busy at a shard's end
ESTIMATE_SAMPLES = 8  # samples encoded to size the shards


@dataclass(kw_only=True)
class Job:
    store: Store  # the copy's folder or URL
    splits: dict  # split name → FileSplit | ArraySplit: train, val, and test where the source has one
    encoding: Encoding
    workers: int
    seed: int
    on_bad_sample: str  # raise | skip
    max_bad_fraction: float


def estimate_per_shard(job: Job, shard_mb: int) -> dict[str, int]:
    """Samples a shard, each split, from the stored size of the first few shuffled training samples (the same few)."""
    train = job.splits["train"]
    first = shard_orders(len(train), len(train) or 1, job.seed, "train")[0][:ESTIMATE_SAMPLES]
    sizes = [len(done.image) for done in (encode_or_bad(train, int(i), job.encoding) for i in first)
             if not isinstance(done, Bad)]
    return {name: per_shard(sizes, shard_mb) for name in job.splits}


def write_shards(job: Job, plan: dict, found: dict[str, dict | None]) -> tuple[dict[str, list[dict]], int]:
    """Every unfinished shard of `plan` (`found`: the records, None where not whole), in order; (records by split,
    samples encoded now). Keys are places in the split: a finished shard is kept only where those before it end."""
    orders = {split: shard_orders(planned["count"], planned["per_shard"], job.seed, split)
              for split, planned in plan["splits"].items()}
    total = sum(planned["count"] for planned in plan["splits"].values())
    kept = sum(len(orders[split][n]) for split, planned in plan["splits"].items()
               for n, name in enumerate(planned["shards"]) if found[name] is not None)
    records: dict[str, list[dict]] = {}
    with _pool(job) as pool, tqdm(total=total, initial=kept, unit="img", desc="prepare", dynamic_ncols=True) as bar:
        for split, planned in plan["splits"].items():
            delete_stale_temporaries(job.store, planned["shards"])
            records[split], start = [], 0
            for name, order in zip(planned["shards"], orders[split], strict=True):
                record = found[name]
                if record is None or record.get("start") != start:
                    bar.update(-len(order) if record is not None else 0)
                    record = found[name] = _write_shard(job, pool, split, (name, order, start), bar=bar)
                    _check_bad_fraction(job, plan, split, found, written=name)
                records[split].append(record)
                start += len(record["rows"])
    return records, total - kept


def _write_shard(job: Job, pool, split: str, shard: tuple, *, bar: tqdm) -> dict:
    """One shard (its name, its samples' source indices, its first good sample's key number), then its record."""
    name, order, start = shard
    rows, bad, source_bytes = [], [], 0
    with ShardWriter(job.store, name, job.encoding.format) as writer:
        for result in _encoded_in_order(pool, split, order):
            bar.update(1)
            if isinstance(result, Bad):
                _refuse_if_raise(job, split, result)
                bad.append([result.index, result.where, result.detail])
                continue
            offset, length, mask = writer.add(sample_key(split, start + len(rows)), result)
            rows.append([offset, length, result.label, result.height, result.width, result.index, result.crc,
                         result.nodata, *([[*mask, result.mask_crc]] if mask else [])])
            source_bytes += result.source_bytes
    record = {"start": start, "rows": rows, "bad": bad, "source_bytes": source_bytes, "bytes": writer.size}
    write_record(job.store, name, record)
    return record


def _encoded_in_order(pool, split: str, order: np.ndarray):
    """The samples `order` of `split`, encoded by the pool, in order; a few chunks a worker in flight."""
    chunks = [[int(i) for i in order[at:at + CHUNK]] for at in range(0, len(order), CHUNK)]
    window = max(2, 4 * job_workers(pool))
    pending: deque[Future] = deque()
    for chunk in chunks:
        pending.append(pool.submit(encode_chunk, split, chunk))
        if len(pending) >= window:
            yield from pending.popleft().result()
    while pending:
        yield from pending.popleft().result()


def job_workers(pool) -> int:
    return getattr(pool, "_max_workers", 1)


def _refuse_if_raise(job: Job, split: str, bad: Bad) -> None:
    if job.on_bad_sample == "raise":
        raise DataError(f"{bad.where} (sample {bad.index} of the {split} split) could not be loaded: {bad.detail}. "
                        "Fix or remove the file, or set data.on_bad_sample=skip to leave such files out of the copy "
                        f"(listed in {job.store.path_of(BAD_SAMPLES)}); the shards finished so far are kept, so "
                        "running the same command again goes on from there.")


def _check_bad_fraction(job: Job, plan: dict, split: str, found: dict[str, dict | None], *, written: str) -> None:
    """Past data.max_bad_fraction of the split left out so far: bad_samples.txt written, then a DataError."""
    if not found[written]["bad"]:
        return
    bad = [row for name in plan["splits"][split]["shards"] if found[name] for row in found[name]["bad"]]
    count = plan["splits"][split]["count"]
    if len(bad) > job.max_bad_fraction * count:
        listed = write_bad_samples(job.store, {split: bad})
        raise DataError(f"{len(bad)} of {count} samples of the {split} split could not be loaded, above "
                        f"data.max_bad_fraction={job.max_bad_fraction:g} (last: {bad[-1][1]}: {bad[-1][2]}); see "
                        f"{listed}. Fix or remove those files, or raise data.max_bad_fraction, and run the same "
                        "command again (the finished shards are kept).")


class _InProcess:
    """queue.workers=0: the pool's `submit`, run here."""

    _max_workers = 1

    def __init__(self, job: Job):
        start_worker(job.splits, job.encoding)

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        future.set_result(fn(*args))
        return future

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _pool(job: Job):
    if job.workers <= 0:
        return _InProcess(job)
    return _Spawned(job)


class _Spawned(ProcessPoolExecutor):
    """A spawn pool that stops at once on an error or Ctrl-C (its queued chunks cancelled)."""

    def __init__(self, job: Job):
        delete_orphan_semaphores()  # an earlier prepare's, killed with its group: nothing else would remove them
        super().__init__(max_workers=job.workers, mp_context=mp.get_context("spawn"), initializer=start_worker,
                         initargs=(job.splits, job.encoding))

    def __exit__(self, kind, error, trace):
        self.shutdown(wait=kind is None, cancel_futures=True)
        return False
