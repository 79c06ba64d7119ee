"""app/loader/pool.py: worker processes start, die, are replaced and stop, for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from loaders import assert_clean, make, wait_until
from marked import MarkedSplit, index_of

from app.capacity.memory import is_fork_server
from app.errors import WorkerError
from app.loader import prefetch


def test_workers_run_in_other_processes(tmp_path, children):
    log = tmp_path / "reads.log"
    with make(MarkedSplit(16, log_path=str(log)), workers=2) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
        pids = {int(line.split()[1]) for line in log.read_text().splitlines()}
    assert os.getpid() not in pids and len(pids) == 2  # the samples of each batch split between both
    assert_clean(children)


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_killed_worker_is_replaced_and_its_samples_rebuilt(caplog, children):
    """The OOM killer's SIGKILL mid-epoch: a new worker, no lost or duplicated sample."""
    n, order = 400, np.random.default_rng(0).permutation(400)
    with make(MarkedSplit(n), workers=2, max_size=2) as enq:
        undisturbed = [index_of(im) for b, _ in enq.batches("train", order, epoch=0) for im in b]
    assert undisturbed == list(order)
    with make(MarkedSplit(n), workers=2, max_size=2) as enq, caplog.at_level("WARNING"):
        got = []
        for k, (images, _) in enumerate(enq.batches("train", order, epoch=0)):
            got.extend(index_of(im) for im in images)
            if k == 3:
                victim = enq.worker_pids[0]
                os.kill(victim, signal.SIGKILL)
                # dead (a zombie until the pool reaps it) with samples of the next batches handed out
                assert wait_until(lambda victim=victim: _dead(victim))
        assert got == undisturbed and enq.restarts == 1
        assert victim not in enq.worker_pids and len(enq.worker_pids) == 2
        # the replacement serves the next epoch too
        assert [index_of(im) for b, _ in enq.batches("val", order[:12], epoch=1) for im in b] == list(order[:12])
    assert f"worker process {victim} died (killed by signal SIGKILL (9))" in caplog.text
    assert "out-of-memory" not in caplog.text  # what is known, not a guess
    assert_clean(children)


def test_a_replacement_started_in_a_pass_outlives_it(caplog, children):
    """A replacement was started from the pass's short-lived copy-ahead thread, and
    the parent-death signal, which fires when the *thread* that started a process ends, killed
    it at the end of every pass: 6 restarts for one kill over 3 epochs."""
    n, order = 48, np.arange(48)
    with make(MarkedSplit(n), workers=2, max_size=2) as enq, caplog.at_level("WARNING"):
        for epoch in range(3):
            got = []
            for k, (images, _) in enumerate(prefetch.batches(enq, "train", order, epoch)):
                got.extend(index_of(im) for im in images)
                if epoch == 0 and k == 2:
                    victim = enq.worker_pids[0]
                    os.kill(victim, signal.SIGKILL)
            assert got == list(order)
            alive = enq.worker_pids
            assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in alive)
        assert enq.restarts == 1 and len(alive) == 2 and victim not in alive
    assert caplog.text.count("died (") == 1
    assert_clean(children)


def test_a_sample_that_kills_every_worker_is_an_error_not_a_loop(children):
    with pytest.raises(WorkerError, match=r"died \(killed by signal SIGKILL.*4th worker death with no batch"), \
            make(MarkedSplit(40, kills_at=9), workers=2, max_size=2) as enq:
        list(enq.batches("train", np.arange(40), epoch=0))
    assert_clean(children)


def test_a_worker_that_cannot_start_is_an_error_at_once(children):
    split = MarkedSplit(16)
    split.unpicklable = True
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"exited \(exit code 1\) before building any sample: it could not start"), \
            make(split, workers=2) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
    assert enq.restarts == 0 and time.monotonic() - started < 30
    assert_clean(children)


@pytest.mark.parametrize("when", ["before any sample", "mid-pass"])
def test_a_dead_fork_server_is_a_kill_its_workers_replaced_and_counted_once(when, tmp_path, caplog, children):
    """The fork server killed (the OOM killer, say) takes its four workers along: each is replaced and the pass
    ends whole, although none had built a sample (no failure to start) and four deaths pass the three in a row."""
    def kill_the_server() -> int:
        server = next(p for p in psutil.Process().children() if is_fork_server(p.pid))
        assert {psutil.Process(pid).ppid() for pid in enq.worker_pids} == {server.pid} == \
            {w.fork_server for w in enq.pool.workers}  # multiprocessing's record (app/processes.py) is that process
        server.kill()  # as the OOM killer does: the workers may see it end before it is a zombie
        return server.pid

    split, go, got = MarkedSplit(32), tmp_path / "go", []
    split.held_until = str(go)  # the first workers held in their start (not one has answered) until it exists
    if when == "mid-pass":
        go.touch()
    with make(split, workers=4, max_size=2, start_method="forkserver") as enq, caplog.at_level("WARNING"):
        first = enq.worker_pids
        server = kill_the_server() if when == "before any sample" else None
        go.touch()
        for k, (images, _) in enumerate(enq.batches("train", np.arange(32), epoch=0)):
            got.extend(index_of(im) for im in images)
            if k == 0 and server is None:
                server = kill_the_server()  # the rest of the pass once its workers are gone with it (not a race)
                assert wait_until(lambda: all(_dead(pid) for pid in first), timeout_s=20)
        assert got == list(range(32)) and enq.restarts == 4 and not set(first) & set(enq.worker_pids)
    assert caplog.text.count(f"its fork server, process {server}, died") == 4
    assert wait_until(lambda: all(_dead(pid) for pid in first), timeout_s=20)  # none left an orphan (not our child)
    assert_clean(children)


def test_each_lost_fork_server_counts_as_one_death_in_a_row():
    """Its workers' deaths count once; other servers' and the workers' own count each (threads stand in here)."""
    with make(MarkedSplit(8), workers=1, processes=False) as enq:
        for server in (101, 101, 101, None, 202):
            enq.pool.replace(enq.pool.workers[0], "exit code 255", server)
        assert enq.pool.deaths_in_a_row == 3
        with pytest.raises(WorkerError, match=r"4th worker death with no batch completed"):
            enq.pool.replace(enq.pool.workers[0], "exit code 255", 303)  # negative control: a third server counts


PRELOAD_SKIPPED = """
import multiprocessing.forkserver, sys
import numpy as np
from loaders import make
from marked import MarkedSplit
if sys.argv[1] == "started before":
    multiprocessing.forkserver.ensure_running()  # other code's fork server: no preload of the loader's
with make(MarkedSplit(8), workers=2, start_method="forkserver") as enq:
    assert len(list(enq.batches("train", np.arange(8), epoch=0))) == 2
"""


@pytest.mark.parametrize("server", ["started before", "the loader's"])
def test_workers_of_a_fork_server_without_the_loaders_modules_are_told_of_once(server):
    """Where another fork server runs already, its workers import the modules themselves (about 50 MiB each that the
    plan counts shared): said once, the batches right all the same; not said of the loader's own (negative control)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # the tests' helpers, everywhere
    result = subprocess.run([sys.executable, "-c", PRELOAD_SKIPPED, server], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("without the loader's modules imported") == (server == "started before"), \
        result.stderr[-3000:]


def test_workers_never_import_tensorflow(tmp_path):
    """What a spawned worker imports: the worker loop and what unpickling its arguments needs."""
    code = ("import sys, app.loader.worker, app.loader.ring, app.augment, app.data; "
            "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    root = Path(__file__).parent.parent.parent
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_die_with_their_parent_even_by_sigkill(method, tmp_path):
    """Forked workers too: their parent is the fork server, which must end with the training process although they
    spin in C code holding the GIL (no thread of theirs runs)."""
    code = """
import os, threading, time
from marked import IdentityAugmenter, MarkedSplit
from app.loader.enqueuer import Enqueuer
from app.loader.settings import Queue, Settings
split = MarkedSplit(8, spins=True, log_path=LOG)  # both workers busy (hung) in a read: no pipe EOF to notice
settings = Settings(batch_size=4, image_size=(8, 8), queue=Queue(workers=2, timeout_s=600, start_method=METHOD))
enq = Enqueuer({"train": split}, {"train": IdentityAugmenter()}, settings).start()
threading.Thread(target=lambda: list(enq.batches("train", list(range(8)), 0)), daemon=True).start()
deadline = time.monotonic() + 60
def reading():  # the workers that have started their read (a line each, then the spin)
    return len(open(LOG).read().splitlines()) if os.path.exists(LOG) else 0
while (len(enq.worker_pids) < 2 or reading() < 2) and time.monotonic() < deadline:
    time.sleep(0.01)
print(" ".join(map(str, enq.worker_pids)), enq.ring.spec.name, flush=True)
time.sleep(120)  # alive, with its workers, until the test SIGKILLs it
"""
    code = code.replace("METHOD", repr(method)).replace("LOG", repr(str(tmp_path / "reads.log")))
    parent = subprocess.Popen([sys.executable, "-c", code], text=True,
                              cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    *pids, segment = parent.stdout.readline().split()
    pids = [int(p) for p in pids]
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)  # negative control
    started_by = {psutil.Process(p).ppid() for p in pids}  # the parent, or its fork server
    assert (started_by == {parent.pid}) == (method == "spawn")
    parent.kill()  # SIGKILL: no cleanup code of the parent runs
    parent.wait()
    assert wait_until(lambda: not any(psutil.pid_exists(p) for p in [*pids, *started_by]), timeout_s=10)
    # multiprocessing's resource tracker unlinks what the dead parent left
    assert wait_until(lambda: not os.path.exists(f"/dev/shm/{segment}"), timeout_s=10)


class SlowToStart(MarkedSplit):
    """A source whose unpickling in a worker takes a while: a loaded machine's start-up."""

    def __setstate__(self, state):
        time.sleep(state["start_s"])  # the worker's start-up, not the test, waits
        super().__setstate__(state)


@pytest.mark.slow
def test_start_up_is_timed_apart_from_the_batch(children):
    """Queue.timeout_s counted the workers' start-up, so a small timeout failed at
    batch 0 on a loaded machine."""
    split = SlowToStart(8)
    split.start_s = 1.5
    with make(split, workers=2, timeout_s=0.5) as enq:
        assert [index_of(im) for b, _ in enq.batches("train", np.arange(8), epoch=0) for im in b] == list(range(8))
    with pytest.raises(WorkerError, match=r"did not start within queue.startup_timeout_s=0.5 s"), \
            make(split, workers=2, timeout_s=0.5, startup_timeout_s=0.5) as enq:  # its own limit still holds
        list(enq.batches("train", np.arange(8), epoch=0))
    assert_clean(children)
