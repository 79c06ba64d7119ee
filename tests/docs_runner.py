"""Runs command lines of `python -m app` one after another in this one process, through the CLI's
own `main` (app/__main__.py) as `python -m app` calls it, and Python snippets with `exec`, for
tests/cli/test_docs_commands.py: TensorFlow and Keras load once for them all.

Usage: python tests/docs_runner.py <commands.json> <results.json>; each command is
{"argv": [...]} or {"python": "..."}. Other tests run a few commands so with
`spawn_one_process_for`, or one at a time as each test gives them, in a process kept for a module's
tests, with `OneProcess` (`--serve`: a command a line read, its result a line written back). Both run them in
this test process's shared one (`shared_process`, kept for the session) where their environment is the session's
and none chooses the backend or devices: TensorFlow loads once a test process. In an argument, {LAST_RUN} is the
newest run directory under ./outputs/<date>/<time>/ with a model.keras and {LAST_SWEEP} the newest sweep under
./outputs/multirun/<date>/<time>/, found when that command starts: the documents' placeholders for a run they made a
step before. With DOCS_RUNNER_SECONDS=<file>, a line a command (its seconds, folder and arguments) is added to that
file: where a test's time goes.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra

from app.__main__ import main
from app.cli import argv as argv_step
from app.runs import rundir

TESTS = Path(__file__).resolve().parent
# What a process's environment gains by itself: pytest's name of the test running, what the app sets where it
# runs (app/__init__.py, `main`, TensorFlow chosen as the backend) and what TensorFlow and MLflow set as they load.
# Any other change is a test's own: its commands get a process of their own.
OWN_KEYS = {"PYTEST_CURRENT_TEST": None, "HYDRA_FULL_ERROR": None, "TF_CPP_MIN_LOG_LEVEL": None,
            "NO_ALBUMENTATIONS_UPDATE": None, "KERAS_BACKEND": "tensorflow", "TF2_BEHAVIOR": None,
            "TPU_ML_PLATFORM": None, "TPU_ML_PLATFORM_VERSION": None, "TPU_SKIP_MDS_QUERY": None,
            "HDF5_PLUGIN_PATH": None, "ENABLE_RUNTIME_UPTIME_TELEMETRY": None, "_MLFLOW_TELEMETRY_SESSION_ID": None}


def told(env) -> dict:
    """`env` less what a process gains by itself: what a command is told."""
    return {key: value for key, value in env.items()
            if key not in OWN_KEYS or OWN_KEYS[key] not in (None, value)}


# The environment of the shared process's commands: the session's as the tests' modules found it (before any test
# changed it), the tests' folder importable (their callbacks and sources).
SESSION_ENV = told(os.environ)
SHARED_ENV = {**SESSION_ENV, "PYTHONPATH": str(TESTS)}
OWN_PROCESS = ("trainer.backend=", "trainer.strategy=", "trainer.cpu_devices=")  # chosen before the framework loads


def newest(pattern: str) -> str:
    """The newest folder under ./outputs/ that holds `pattern`'s file."""
    found = sorted(Path("outputs").glob(pattern), key=lambda path: path.stat().st_mtime)
    return str(found[-1].parent) if found else "<none>"


def placeheld(text: str) -> str:
    return (text.replace("{LAST_SWEEP}", newest("multirun/*/*/multirun.yaml"))
            .replace("{LAST_RUN}", newest("[0-9]*/[0-9]*/model.keras")))


def run_one(command: dict) -> dict:
    out, started = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            if "python" in command:
                exec(compile(placeheld(command["python"]), "<snippet>", "exec"), {})  # noqa: S102
                status = 0
            else:
                status = main([placeheld(arg) for arg in command["argv"]])
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except Exception:  # noqa: BLE001 - a snippet's failure is the test's to show
            traceback.print_exc()
            status = 1
    # what one command leaves in the process that the next, in a process of its own, would not see
    GlobalHydra.instance().clear()
    argv_step.CLAIMED.clear()
    for run_dir in list(rundir._held):  # a refused command's lock, which its process's exit (atexit) releases
        rundir.release_lock(run_dir)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for module in list(sys.modules.values()):  # a warning shown once a process is shown to the next command too
        if isinstance(registry := getattr(module, "__dict__", {}).get("__warningregistry__"), dict):
            registry.clear()
    if keras := sys.modules.get("keras"):  # the models of the commands before, let go
        keras.backend.clear_session()
    seconds = time.perf_counter() - started
    if timings := os.environ.get("DOCS_RUNNER_SECONDS"):
        with open(timings, "a") as f:
            f.write(f"{seconds:7.1f} {os.getcwd()} {' '.join(command.get('argv', ['python']))}\n")
    return {**command, "status": status, "printed": out.getvalue(), "seconds": seconds}


def spawn_one_process_for(*argvs: list[str], cwd: Path, env: dict | None = None,
                          python: str = sys.executable) -> list[subprocess.CompletedProcess]:
    """`python -m app <argv>` for each argv, one after another in one new process (this module,
    run as a script by `python`), so TensorFlow loads once for them all; each one's exit status and
    what it printed (stdout and stderr as one text, given as both). In the shared process where it can be."""
    if sharable(argvs, env, python):
        return [shared_process()(*argv, cwd=cwd) for argv in argvs]
    with tempfile.TemporaryDirectory(prefix="commands-") as folder:
        listed, written = Path(folder) / "commands.json", Path(folder) / "results.json"
        listed.write_text(json.dumps([{"argv": list(argv)} for argv in argvs]))
        runner = subprocess.run([python, __file__, str(listed), str(written)], cwd=cwd, env=env,
                                capture_output=True, text=True, timeout=600 * len(argvs))
        done = json.loads(written.read_text()) if written.exists() else []
    assert len(done) == len(argvs), f"the runner died ({runner.returncode}): {runner.stderr[-3000:]}"
    return [subprocess.CompletedProcess(["app", *r["argv"]], r["status"], r["printed"], r["printed"]) for r in done]


# The shared process is started by one that exits at once, so it is no child of this test process: the tests that
# look at their own children (loader workers, a job's leftovers, memory) never meet it.
LAUNCHER = "import subprocess, sys; subprocess.Popen(sys.argv[2:], pass_fds=map(int, sys.argv[1].split(',')))"


class OneProcess:
    """`python -m app <argv>` command lines run one at a time, as tests give them, in one process of this
    module's started by the first and kept until `close` (a module-scoped fixture's): TensorFlow loads once
    for them all. Each call's result as spawn_one_process_for gives it; each runs in its own `cwd`."""

    def __init__(self, *, env: dict | None = None, python: str = sys.executable, detached: bool = False):
        self.env, self.python, self.detached, self.server = env, python, detached, None

    def __call__(self, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
        if self not in _shared and sharable([argv], self.env, self.python):
            return shared_process()(*argv, cwd=cwd)
        if self.server is None:
            self._spawn_server()
        self.asking.write(json.dumps({"argv": list(argv), "cwd": str(cwd)}) + "\n")
        self.asking.flush()
        answer = self.answers.readline()
        if not answer:  # the process died: the next command starts another
            said = Path(self.said.name).read_text()[-3000:]
            self.close()
            raise AssertionError(f"the runner died: {said}")
        done = json.loads(answer)
        return subprocess.CompletedProcess(["app", *argv], done["status"], done["printed"], done["printed"])

    def _spawn_server(self) -> None:
        asked, asking = os.pipe()  # pipes of their own: what the commands print (and their workers) stays apart
        answering, answered = os.pipe()
        self.said = tempfile.NamedTemporaryFile(prefix="runner-", suffix=".log")  # noqa: SIM115 - closed by close
        command = [self.python, __file__, "--serve", str(asked), str(answered)]
        if self.detached:
            command = [self.python, "-c", LAUNCHER, f"{asked},{answered}", *command]
        self.server = subprocess.Popen(command, pass_fds=(asked, answered), env=self.env, stdout=self.said,
                                       stderr=self.said)
        if self.detached:
            self.server.wait(timeout=60)  # the launcher, gone once the server has started
        os.close(asked)
        os.close(answered)
        self.asking, self.answers = os.fdopen(asking, "w"), os.fdopen(answering)

    def close(self) -> None:
        """Ends the process (its input closed, it returns: its end of the answers closes) and deletes its log."""
        if self.server is not None:
            self.asking.close()
            if select.select([self.answers], [], [], 120)[0]:  # bounded: a stray holder of its end never hangs us
                self.answers.read()
            if not self.detached:
                self.server.wait(timeout=120)
            self.answers.close()
            self.said.close()
            self.server = None

    def __enter__(self) -> OneProcess:
        return self

    def __exit__(self, *_) -> None:
        self.close()


_shared: list[OneProcess] = []  # this test process's shared one, once started


def shared_process() -> OneProcess:
    """This test process's own app process, started by its first command and kept for the session (closed at exit)."""
    if not _shared:
        _shared.append(OneProcess(env=SHARED_ENV, detached=True))
        atexit.register(_shared[0].close)
    return _shared[0]


def sharable(argvs, env: dict | None, python: str) -> bool:
    """Commands the shared process can run as a new one would: the session's environment (as it was, or with the
    tests' folder importable), this interpreter, and none choosing the backend or devices."""
    given = told(os.environ if env is None else env)
    return python == sys.executable and given in (SESSION_ENV, SHARED_ENV) and \
        not any(arg.startswith(OWN_PROCESS) for argv in argvs for arg in argv)


def serve_commands(asked: int, answered: int) -> None:
    """Runs each command line read from the pipe `asked` in its `cwd`, its result written to `answered`."""
    with open(asked) as commands, open(answered, "w") as answers:
        for line in commands:
            command = json.loads(line)
            os.chdir(command.pop("cwd"))
            answers.write(json.dumps(run_one(command)) + "\n")
            answers.flush()


def train_killed(argv: list[str], *, cwd: Path, env: dict) -> Path:
    """`python -m app train <argv>` in a process of its own, SIGKILLed as epoch 2's fourth step begins
    (tests/recording.py's KillOnce, which leaves killed.txt); the run directory it left, ./killed."""
    marker = cwd / "killed.txt"
    kill = f"trainer.callbacks=[{{_target_: recording.KillOnce, path: {marker}, epoch: 1, batch: 3}}]"
    killed = subprocess.run([sys.executable, "-m", "app", "train", *argv, kill, "hydra.run.dir=killed"], cwd=cwd,
                            env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9 and marker.exists(), killed.stderr[-3000:]
    return cwd / "killed"


if __name__ == "__main__" and sys.argv[1] == "--serve":
    serve_commands(int(sys.argv[2]), int(sys.argv[3]))
elif __name__ == "__main__":
    listed, written = Path(sys.argv[1]), Path(sys.argv[2])  # the CLI's main sets sys.argv
    results = []
    for command in json.loads(listed.read_text()):
        results.append(run_one(command))
        written.write_text(json.dumps(results))  # what ran so far, should a later one hang
