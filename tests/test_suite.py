"""The suite's own rules, as pyproject.toml sets them: what `make test` needs is in the `dev`
extra, a test that hangs fails with its stack instead of holding the suite, and what `make test`
leaves to `make test-all` says what covers it; and which commands share a test process's app process
(tests/docs_runner.py)."""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import psutil
from docs_runner import TESTS, OneProcess, sharable, shared_process
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
# a test that waits on a child process that never answers, and kills it whatever happens
HUNG = '''
import multiprocessing, os


def never_answer(end):
    end.recv()  # the parent never sends


def test_waits_on_a_child_that_never_answers():
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(target=never_answer, args=(theirs,))
    child.start()
    with open(os.environ["CHILD_PID_FILE"], "w") as f:
        f.write(str(child.pid))
    try:
        ours.recv()
    finally:
        child.kill()
        child.join()
'''


def missing_from_dev(pyproject: dict) -> list[str]:
    """What the suite builds or runs with that the `dev` extra does not install: the build
    backend's requirements (the packaging test builds a wheel without build isolation) and
    pytest's plugins that pyproject's options use."""
    dev = {Requirement(r).name for r in pyproject["project"]["optional-dependencies"]["dev"]}
    needed = {Requirement(r).name for r in pyproject["build-system"]["requires"]}
    needed |= {"pytest", "pytest-xdist"} | ({"pytest-timeout"} if "timeout" in pyproject["tool"]["pytest"][
        "ini_options"] else set())
    return sorted(needed - dev)


def test_the_dev_extra_installs_what_the_suite_builds_and_runs_with():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert missing_from_dev(pyproject) == []
    dev = pyproject["project"]["optional-dependencies"]["dev"]
    dev[:] = [r for r in dev if Requirement(r).name != "wheel"]  # negative control: wheel left out
    assert missing_from_dev(pyproject) == ["wheel"]


def packages_left_out(pyproject: dict) -> list[str]:
    """app/'s packages (folders with an __init__.py) that a wheel would not ship."""
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "app").rglob("__init__.py")}
    return sorted(found - listed)


def test_a_wheel_ships_every_package_of_app():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert not packages_left_out(pyproject)
    pyproject["tool"]["setuptools"]["packages"].remove("app.runs")  # negative control
    assert packages_left_out(pyproject) == ["app.runs"]


def test_a_hung_test_fails_under_the_timeout_with_its_stack_and_its_cleanup_runs(tmp_path):
    (tmp_path / "test_hung.py").write_text(HUNG)
    ran = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                          str(tmp_path), "-p", "no:cacheprovider", "-n", "1", "--timeout=5",
                          "--basetemp", str(tmp_path / "base"), str(tmp_path / "test_hung.py")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "CHILD_PID_FILE": str(tmp_path / "child.pid")})
    said = ran.stdout + ran.stderr
    assert ran.returncode == 1 and "1 failed" in said, said[-3000:]
    assert "Failed: Timeout" in said and "ours.recv()" in said, said[-3000:]  # the stack, at the hang
    pid = int((tmp_path / "child.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def exhaustive_without_their_cover(files) -> list[str]:
    """The tests marked exhaustive (left out of `make test`) whose docstring does not say which
    tests of `make test` cover their path."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            marked = isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d).endswith("mark.exhaustive") for d in node.decorator_list)
            if marked and "Covered in `make test` by:" not in (ast.get_docstring(node) or ""):
                found.append(f"{path.name}::{node.name}")
    return found


def test_make_test_leaves_out_only_the_exhaustive_variants_each_naming_its_cover(tmp_path):
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert '-m "not exhaustive"' in recipe and recipe.count(' -m "') == 1
    assert ' -m "' not in makefile.split("\ntest-all:", 1)[1].split("\n\n", 1)[0]
    tests = sorted(ROOT.glob("tests/**/test_*.py"))
    assert len([p for p in tests if "mark.exhaustive" in p.read_text()]) >= 5
    assert exhaustive_without_their_cover(tests) == []
    (tmp_path / "test_bare.py").write_text("import pytest\n\n\n@pytest.mark.exhaustive\ndef test_x():\n"
                                           '    """A variant."""\n')
    assert exhaustive_without_their_cover([tmp_path / "test_bare.py"]) == ["test_bare.py::test_x"]  # the control


def serving() -> list[psutil.Process]:
    """This process's children that serve commands (tests/docs_runner.py --serve)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # one that ended meanwhile
            if "--serve" in child.cmdline():
                found.append(child)
    return found


def test_the_shared_app_process_takes_what_a_new_one_would_run_alike_and_is_no_child(tmp_path):
    python = sys.executable
    assert sharable([["train"], ["evaluate"]], None, python)  # the session's environment, as it is
    assert sharable([["train"]], {**os.environ, "PYTHONPATH": str(TESTS)}, python)  # the tests importable
    assert sharable([["train"]], {**os.environ, "KERAS_BACKEND": "tensorflow", "HYDRA_FULL_ERROR": "1"}, python)
    # negative controls: a test's own variable, another backend or devices, another interpreter
    assert not sharable([["train"]], {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:1"}, python)
    assert not sharable([["train"]], {**os.environ, "KERAS_BACKEND": "jax"}, python)
    assert not sharable([["train"], ["train", "trainer.cpu_devices=2"]], None, python)
    assert not sharable([["train", "trainer.backend=jax"]], None, python)
    assert not sharable([["train"]], None, "/usr/bin/python3")
    done = shared_process()("--help", cwd=tmp_path)
    assert done.returncode == 0 and "usage: python -m app" in done.stdout
    assert serving() == []  # the tests that look at their children never meet it
    own = OneProcess(env={**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    try:  # negative control: a process of a test's own is its child
        assert own("--help", cwd=tmp_path).returncode == 0 and len(serving()) == 1
    finally:
        own.close()
