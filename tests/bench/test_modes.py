"""A bench mode's child process and the pipe to its parent."""

from __future__ import annotations

import multiprocessing

from app.bench.modes import child_main


def test_a_mode_whose_bench_stopped_ends_quietly():
    """Ctrl-C or SIGTERM ends the bench, which closes its end of the pipe: the child's result has
    nobody to go to, and the child ends without a BrokenPipeError traceback on the terminal."""
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    child_main("serial", None, child_end)  # negative control: the parent is there and gets the error
    assert "AttributeError" in parent_end.recv()["error"]
    parent_end, child_end = multiprocessing.Pipe(duplex=False)
    parent_end.close()
    child_main("serial", None, child_end)  # raises nothing
