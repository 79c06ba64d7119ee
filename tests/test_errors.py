"""app/errors.py and the run directory's files: the machine's faults and corrupt files as messages."""

from __future__ import annotations

import errno
import json
import logging

import pytest

from app.errors import AppError, MachineError, exit_status_for, explain, report_failure
from app.io import temporary_name, write_json
from app.runs.rundir import Summary


def test_memory_and_disk_errors_become_messages_saying_what_to_do(capsys):
    memory = explain(MemoryError())
    assert isinstance(memory, MachineError) and "lower data.batch_size, queue.max_size" in str(memory)
    full = explain(OSError(errno.ENOSPC, "No space left on device", "/runs/x/model.keras"),
                   resume_hint="python -m app train resume=/runs/x")
    assert "no space left on the device holding /runs/x/model.keras" in str(full)
    assert "continue with `python -m app train resume=/runs/x`" in str(full)
    wrapped = RuntimeError("saving failed")  # h5py and zipfile wrap it
    wrapped.__cause__ = OSError("[Errno 28] No space left on device")
    assert isinstance(explain(wrapped), MachineError)
    other = ValueError("a bug")  # negative control: anything else is left alone
    assert explain(other) is other
    assert exit_status_for(MemoryError()) == 1
    assert capsys.readouterr().err == ""  # the status alone says nothing: reporting is its own call
    report_failure(MemoryError())
    assert "error: out of memory (MemoryError)" in capsys.readouterr().err


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "summary.json"
    write_json(path, {"a": 1})
    temporary_name(path).symlink_to("/dev/full")  # every write there fails: a full disk
    with pytest.raises(OSError) as caught:
        write_json(path, {"a": 2})
    assert caught.value.errno == errno.ENOSPC and isinstance(explain(caught.value), MachineError)
    assert json.loads(path.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_corrupt_summary_on_resume_is_named_with_what_to_do(tmp_path):
    (tmp_path / "summary.json").write_text('{"status": "runn')
    with pytest.raises(AppError, match=r"summary.json cannot be read .*delete it and resume again"):
        Summary(tmp_path, [], resumed_from=str(tmp_path))
    (tmp_path / "summary.json").unlink()
    assert Summary(tmp_path, [], resumed_from=str(tmp_path)).content["status"] == "running"


def test_report_lists_a_corrupt_summary_as_unreadable(tmp_path, capsys):
    from app.commands.report import table

    for name, text in (("0", json.dumps({"status": "completed", "overrides": ["queue.workers=1"]})),
                       ("1", "{broken")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(text)
    _, _, rows = table([tmp_path / "0", tmp_path / "1"])
    assert [r["status"] for r in rows] == ["completed", "unreadable"]
    assert "1/summary.json cannot be read" in capsys.readouterr().err


def test_a_cause_the_message_already_says_is_not_repeated(capsys):
    from app.errors import BadSampleError, DataError

    try:
        try:
            raise ValueError("empty file")
        except ValueError as exc:
            raise BadSampleError(3, "/d/a.jpg", str(exc)) from exc
    except BadSampleError as bad:
        assert exit_status_for(bad) == 1
        report_failure(bad)
    assert capsys.readouterr().err.strip() == "error: sample 3 (/d/a.jpg) could not be loaded: empty file"
    wrapped = DataError("the run cannot start")  # negative control: a cause that says more is kept
    wrapped.__cause__ = OSError("disk gone")
    report_failure(wrapped)
    assert capsys.readouterr().err.strip() == "error: the run cannot start — disk gone"


def test_a_bugs_message_names_the_log_of_the_command_that_holds_its_traceback(capsys, caplog, monkeypatch):
    assert exit_status_for(ValueError("boom")) == 1 and not caplog.records  # the status alone logs nothing
    report_failure(ValueError("boom"), "predict")
    assert "the traceback is in predict.log" in capsys.readouterr().err
    assert caplog.records[-1].exc_info[0] is ValueError and caplog.records[-1].name == "app.predict"
    caplog.clear()
    logged = ValueError("boom")
    logged.traceback_logged = True  # as train's run marks what it logged
    report_failure(logged)
    assert "the run's train.log" in capsys.readouterr().err and not caplog.records  # once, not twice
    report_failure(ValueError("boom"))  # a bug of train's before its run logged anything: logged here
    assert "the run's train.log" in capsys.readouterr().err and caplog.records[-1].name == "app.train"
    # before Hydra set up any log (a config it could not compose): no log is named
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    report_failure(ValueError("boom"))
    said = capsys.readouterr().err
    assert "(a bug: set APP_TRACEBACK=1 to print it here)" in said and ".log" not in said


def test_a_path_the_file_system_refuses_is_named_with_what_to_do():
    import os

    renamed = OSError(errno.EISDIR, os.strerror(errno.EISDIR), "/runs/x/.m.tmp", None, "/runs/x/metrics.csv")
    message = str(explain(renamed, resume_hint="python -m app train resume=/runs/x"))
    assert message.startswith("/runs/x/metrics.csv cannot be written or read: Is a directory.")
    assert message.endswith("then continue with `python -m app train resume=/runs/x`.")
    locked = RuntimeError("saving failed")
    locked.__cause__ = PermissionError(errno.EPERM, "Operation not permitted", "/runs/x/model.keras")
    assert isinstance(explain(locked), MachineError) and "/runs/x/model.keras" in str(explain(locked))
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/x")  # negative control: not a refusal
    assert explain(missing) is missing


def test_a_file_past_the_size_limit_is_a_message_saying_what_to_do():
    """`ulimit -f` (or a file system's largest file) refuses a write with EFBIG, not a full disk."""
    refused = OSError(errno.EFBIG, "File too large")
    explained = explain(refused, resume_hint="python -m app train resume=/runs/x", where="/runs/x")
    assert isinstance(explained, MachineError), explained
    assert str(explained).startswith("a file written into /runs/x grew past the largest file this process may "
                                     "write (File too large: the shell's `ulimit -f`")
    assert str(explained).endswith("then continue with `python -m app train resume=/runs/x`.")
    assert explain(OSError(errno.EIO, "I/O error")).errno == errno.EIO  # negative control: another error stays


@pytest.mark.parametrize(("override", "said"), [
    ("queue.wokers=2", "config key `queue.wokers` is not allowed: no such key (did you mean queue.workers?). "
                       "Allowed keys there: workers,"),
    ("data.decode.drafft=false", "(did you mean data.decode.draft?)"),
])
def test_an_unknown_key_is_named_without_hydras_plus_advice(override, said, capsys):
    """Hydra's "use +key=..." fails when followed (a schema refuses added keys too): the message
    names the key and the one meant instead. A free mapping keeps Hydra's advice, which works there."""
    from hydra import compose, initialize_config_dir

    from app.config import conf_dir
    from app.schema import register

    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        for given in (override, "model.kwargs.alpha=0.75"):
            with pytest.raises(Exception) as caught:
                compose("config", overrides=[given])
            assert exit_status_for(caught.value) == 2
            report_failure(caught.value)
            printed = capsys.readouterr().err
            if given == override:
                assert said in printed and "+" not in printed
            else:  # negative control: `+model.kwargs.alpha=0.75` is what adds a key to a mapping
                assert "+model.kwargs.alpha=0.75" in printed
        compose("config", overrides=["+model.kwargs.alpha=0.75"])  # ... and it does


def test_a_misspelt_group_option_is_named_with_the_options_a_user_may_pick(capsys):
    """Hydra lists the schemas beside the options and its search path; the message keeps the options."""
    from hydra import compose, initialize_config_dir

    from app.config import conf_dir
    from app.schema import register

    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        with pytest.raises(Exception) as caught:
            compose("config", overrides=["data=foldr"])
        compose("config", overrides=["data=folder"])  # negative control: the option meant composes
    assert exit_status_for(caught.value) == 2
    report_failure(caught.value)
    printed = capsys.readouterr().err
    assert printed.startswith("error: config group `data` has no option `foldr` (did you mean data=folder?): "
                              "data= one of cifar, folder, prepared, synthetic, table.")
    assert "_schema" not in printed and "search path" not in printed
