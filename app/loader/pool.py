"""The loader's workers: start them (processes or threads), watch them, replace one that died, stop them all."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import psutil

from app.errors import WorkerError
from app.loader import messages
from app.loader import worker as worker_loop
from app.loader.ring import Ring
from app.loader.settings import Queue
from app.processes import fork_server_pid, main_module_hidden, signals_held, start_fork_server, startable

log = logging.getLogger(__name__)
# A worker that dies is replaced and its samples rebuilt; this many deaths with no batch
# completed in between is a fault to report, not to retry forever.
MAX_DEATHS_IN_A_ROW = 3
_TOLD_UNPRELOADED: set[int] = set()  # the fork servers found without the workers' modules, told of once each


@dataclass(frozen=True)
class Work:
    """What every worker is handed at its start: pickled once to each process."""

    splits: dict
    augmenters: dict
    seed: int
    on_bad_sample: str  # raise, skip or mark (app/loader/worker.py)


@dataclass(kw_only=True)
class Worker:
    conn: Connection
    handle: Any  # multiprocessing.Process or threading.Thread
    name: str
    pending: set[tuple[int, int]] = field(default_factory=set)  # (slot, position) handed out, not answered
    answered: int = 0
    ready: bool = False  # it said it has started (imports done, ring mapped)
    started_at: float = field(default_factory=time.monotonic)
    fork_server: int | None = None  # the pid of the fork server that forked it (queue.start_method=forkserver)

    @property
    def sentinel(self) -> int | None:
        return getattr(self.handle, "sentinel", None)

    @property
    def is_process(self) -> bool:
        return isinstance(self.handle, mp.process.BaseProcess)


class Pool:
    def __init__(self, ring: Ring, work: Work, *, processes: bool, queue: Queue):
        self.ring, self.work, self.processes, self.queue = ring, work, processes, queue
        self.workers: list[Worker] = []
        self.deaths_in_a_row = 0  # since a batch was last completed (completed_batch)
        self._last_lost_server: int | None = None
        # a user's transforms defined in their script (app.library) unpickle only where it was imported
        self._needs_main = any(getattr(a, "needs_main", False) for a in work.augmenters.values())
        # Processes are started from this one long-lived thread: Linux's parent-death signal
        # fires when the *thread* that started a process ends, and a replacement is often asked
        # for from a pass's short-lived copy-ahead thread (app/loader/prefetch.py).
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="app-worker-starter") if processes else None

    def start(self, count: int) -> None:
        for i in range(count):
            with signals_held():  # a stop meanwhile waits until the worker is listed, so that close() stops it
                self.workers.append(self._start(i))

    @property
    def pids(self) -> list[int]:
        return [w.handle.pid for w in self.workers if w.is_process]

    def _start(self, i: int) -> Worker:
        if not self.processes:
            parent_end, child_end = mp.Pipe(duplex=True)
            thread = threading.Thread(target=_serve_thread, name=f"app-loader-{i}", daemon=True,
                                      args=(child_end, self.ring.slots, self.ring.done, self.work))
            thread.start()
            return Worker(conn=parent_end, handle=thread, name=f"worker thread {i}", ready=True)
        context = mp.get_context(self.queue.start_method)
        parent_end, child_end = context.Pipe(duplex=True)
        forked = self.queue.forked
        if forked:  # takes effect where this process's fork server starts, here or later; a running one is kept
            context.set_forkserver_preload(worker_loop.PRELOADED)
        with _child_environment(self.queue.start_method), main_module_hidden(not self._needs_main):
            # the server started as the workers are, in this environment, from the starter thread
            parent = self._starter.submit(start_fork_server).result() if forked else os.getpid()
            process = context.Process(target=worker_loop.process_main, name=f"app-loader-{i}", daemon=True,
                                      args=(child_end, self.ring.spec, self.work, parent, dict(os.environ)))
            self._starter.submit(process.start).result()
        child_end.close()
        return Worker(conn=parent_end, handle=process, name=f"worker process {process.pid}",
                      fork_server=parent if forked else None)

    def completed_batch(self) -> None:  # the deaths in a row end here
        self.deaths_in_a_row = 0

    def replace(self, dead: Worker, how: str, server: int | None) -> Worker:
        """A new worker in `dead`'s place (none of its work: the caller hands that on); an error past the cap."""
        # `how` it died; `server`: the fork server that died with it, where one did
        if server is None or server != self._last_lost_server:  # a fork server's death counts once, not a worker's
            self.deaths_in_a_row += 1
        self._last_lost_server = server or self._last_lost_server
        if self.deaths_in_a_row > MAX_DEATHS_IN_A_ROW:
            raise WorkerError(
                f"{dead.name} died ({how}), the {self.deaths_in_a_row}th worker death with no batch completed "
                "in between: giving up instead of restarting in a loop. If memory runs out, lower queue.workers, "
                "queue.max_size or data.batch_size; else look for the sample that kills the decoder.")
        i = self.workers.index(dead)
        self.workers[i] = new = self._start(i)
        return new

    # The pid of the fork server that forked `dead` where that server has died too (killed, say by the OOM killer),
    # which takes its workers along: multiprocessing then reads their exit code as 255. Dead: exiting, a zombie,
    # reaped, or no longer multiprocessing's server (it started another in its place)
    @staticmethod
    def lost_fork_server(dead: Worker) -> int | None:
        server = dead.fork_server
        if server is None or server != fork_server_pid():
            return server  # none, or one multiprocessing has replaced already
        try:
            # a process's command line reads empty from the moment its exit lets go of its memory, before its files
            # close (the workers' end of file) and before it is a zombie
            if psutil.Process(server).cmdline():
                return None
        except psutil.Error:  # a zombie, or reaped
            pass
        # multiprocessing starts another only once it is a zombie (its waitpid); polled, not reaped here, which
        # would leave multiprocessing's waitpid a ChildProcessError
        _wait_for_exit(server, timeout_s=10.0)
        return server

    # `w` said it has started. A forked one whose modules its server did not import is told of, once a server: the
    # workers are right but each holds its own copy, which `plan` counts shared
    def started(self, w: Worker, preloaded: bool) -> None:
        w.ready = True
        if w.fork_server is None or preloaded or w.fork_server in _TOLD_UNPRELOADED:
            return
        _TOLD_UNPRELOADED.add(w.fork_server)
        log.warning("%s was forked by multiprocessing's fork server (process %d) without the loader's modules "
                    "imported there: the server was started before the loader's, by other code in this process, "
                    "or could not import them (`app` must be importable wherever Python starts). Each worker "
                    "imports them itself: about 50 MiB more a worker than `plan` and queue.workers=auto count. "
                    "Start a loader before that code, or set queue.start_method=spawn, which they count as it is.",
                    w.name, w.fork_server)

    def wait(self, timeout_s: float) -> list[Worker]:
        """The workers with something to read or that have died, waiting up to `timeout_s` for one."""
        by_conn = {w.conn: w for w in self.workers}
        by_sentinel = {w.sentinel: w for w in self.workers if w.sentinel is not None}
        return [by_conn.get(obj) or by_sentinel[obj] for obj in wait([*by_conn, *by_sentinel], timeout=timeout_s)]

    def starting(self) -> bool:
        """Whether a worker is still starting; WorkerError for one past startup_timeout_s."""
        starting = [w for w in self.workers if not w.ready]
        for w in starting:
            if time.monotonic() - w.started_at > self.queue.startup_timeout_s:
                raise WorkerError(
                    f"{w.name} did not start within queue.startup_timeout_s={self.queue.startup_timeout_s:g} s "
                    "(importing its modules and unpickling the data source and augmentation). The machine may be "
                    "overloaded; raise queue.startup_timeout_s, or lower queue.workers.")
        return bool(starting)

    def check_threads(self) -> None:
        """WorkerError for a dead worker thread: threads have no sentinel to wake a wait."""
        for w in self.workers:
            if w.sentinel is None and not w.handle.is_alive():
                raise WorkerError(f"{w.name} stopped unexpectedly while building batches.")

    def close(self) -> None:
        """Stop every worker, killing a process still alive after 5 s: no orphan, whatever its state."""
        workers, self.workers = self.workers, []
        for w in workers:
            try:
                w.conn.send(messages.STOP)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5.0
        for w in workers:
            while w.handle.is_alive() and time.monotonic() < deadline:
                _discard_replies(w.conn)  # a worker blocked on a full pipe could not see the STOP
                w.handle.join(timeout=0.05)
            if w.is_process:
                if w.handle.is_alive():
                    w.handle.kill()
                w.handle.join(timeout=5.0)
            w.conn.close()
        if self._starter is not None:
            self._starter.shutdown()
            self._starter = None


def exit_description(code: int | None) -> str:
    """What is known of how a process ended: its exit code, or the signal that killed it."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by signal {signal.Signals(-code).name} ({-code})"
    except ValueError:
        return f"killed by signal {-code}"


def _wait_for_exit(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.005)
    except psutil.Error:  # reaped
        pass


def _serve_thread(conn, ring, done, work: Work) -> None:
    try:
        worker_loop.serve(conn, ring, done, work)
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
    """Workers start with single-threaded math libraries and Ctrl-C ignored (the training process decides)."""
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
