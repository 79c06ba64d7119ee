"""Runs command lines of `python -m app` one after another in this one process, through the CLI's
own `main` (app/__main__.py) as `python -m app` calls it, and Python snippets with `exec`, for
tests/cli/test_docs_commands.py: TensorFlow and Keras load once for them all.

Usage: python tests/docs_runner.py <commands.json> <results.json>; each command is
{"argv": [...]} or {"python": "..."}. Other tests run a few commands so with
`spawn_one_process_for`, or one at a time as each test gives them, in a process kept for a module's
tests, with `OneProcess` (`--serve`: a command a line read, its result a line written back). In an
argument, {LAST_RUN} is the newest run directory under ./outputs/<date>/<time>/ with a model.keras and
{LAST_SWEEP} the newest sweep under ./outputs/multirun/<date>/<time>/, found when that command starts:
the documents' placeholders for a run they made a step before. With DOCS_RUNNER_SECONDS=<file>, a line a
command (its seconds, folder and arguments) is added to that file: where a test's time goes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
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
    seconds = time.perf_counter() - started
    if timings := os.environ.get("DOCS_RUNNER_SECONDS"):
        with open(timings, "a") as f:
            f.write(f"{seconds:7.1f} {os.getcwd()} {' '.join(command.get('argv', ['python']))}\n")
    return {**command, "status": status, "printed": out.getvalue(), "seconds": seconds}


def spawn_one_process_for(*argvs: list[str], cwd: Path, env: dict | None = None,
                          python: str = sys.executable) -> list[subprocess.CompletedProcess]:
    """`python -m app <argv>` for each argv, one after another in one new process (this module,
    run as a script by `python`), so TensorFlow loads once for them all; each one's exit status and
    what it printed (stdout and stderr as one text, given as both)."""
    with tempfile.TemporaryDirectory(prefix="commands-") as folder:
        listed, written = Path(folder) / "commands.json", Path(folder) / "results.json"
        listed.write_text(json.dumps([{"argv": list(argv)} for argv in argvs]))
        runner = subprocess.run([python, __file__, str(listed), str(written)], cwd=cwd, env=env,
                                capture_output=True, text=True, timeout=600 * len(argvs))
        done = json.loads(written.read_text()) if written.exists() else []
    assert len(done) == len(argvs), f"the runner died ({runner.returncode}): {runner.stderr[-3000:]}"
    return [subprocess.CompletedProcess(["app", *r["argv"]], r["status"], r["printed"], r["printed"]) for r in done]


class OneProcess:
    """`python -m app <argv>` command lines run one at a time, as tests give them, in one process of this
    module's started by the first and kept until `close` (a module-scoped fixture's): TensorFlow loads once
    for them all. Each call's result as spawn_one_process_for gives it; each runs in its own `cwd`."""

    def __init__(self, *, env: dict | None = None, python: str = sys.executable):
        self.env, self.python, self.server = env, python, None

    def __call__(self, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
        if self.server is None:
            self._spawn_server()
        self.asking.write(json.dumps({"argv": list(argv), "cwd": str(cwd)}) + "\n")
        self.asking.flush()
        answer = self.answers.readline()
        assert answer, f"the runner died ({self.server.wait()}): {Path(self.said.name).read_text()[-3000:]}"
        done = json.loads(answer)
        return subprocess.CompletedProcess(["app", *argv], done["status"], done["printed"], done["printed"])

    def _spawn_server(self) -> None:
        asked, asking = os.pipe()  # pipes of their own: what the commands print (and their workers) stays apart
        answering, answered = os.pipe()
        self.said = tempfile.NamedTemporaryFile(prefix="runner-", suffix=".log")  # noqa: SIM115 - closed by close
        self.server = subprocess.Popen([self.python, __file__, "--serve", str(asked), str(answered)],
                                       pass_fds=(asked, answered), env=self.env, stdout=self.said, stderr=self.said)
        os.close(asked)
        os.close(answered)
        self.asking, self.answers = os.fdopen(asking, "w"), os.fdopen(answering)

    def close(self) -> None:
        """Ends the process (its input closed, it returns) and deletes its log."""
        if self.server is not None:
            self.asking.close()
            self.server.wait(timeout=120)
            self.answers.close()
            self.said.close()

    def __enter__(self) -> OneProcess:
        return self

    def __exit__(self, *_) -> None:
        self.close()


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
