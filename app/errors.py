"""Errors a user can act on: each carries a one-paragraph message the CLI prints as is."""

import os
from pathlib import Path


class AppError(Exception):
    """A failure whose message names the key, path or index at fault (no traceback needed)."""


class ConfigError(AppError):
    """A config value that is missing, of the wrong type or out of range."""

    key: str | None = None  # config_error's: the key, its value and what is allowed, for a caller that says it its way
    value = None
    allowed: str | None = None


def config_error(key: str, value, allowed: str) -> ConfigError:
    """The one way to say config key `key`'s value is not allowed, and what is."""
    error = ConfigError(f"config key `{key}` = {value!r} is not allowed: {allowed}.")
    error.key, error.value, error.allowed = key, value, allowed
    return error


class DataError(AppError):
    """Missing or unreadable data."""


class BadSampleError(DataError):
    """One sample could not be read or decoded."""

    def __init__(self, index: int, where: str, reason: str):
        self.index, self.where, self.reason = index, where, reason
        super().__init__(f"sample {index} ({where}) could not be loaded: {reason}")


class WorkerError(AppError):
    """A loader worker failed, died or hung."""


class MachineError(AppError):
    """The machine ran out of something (disk space, memory): nothing the config got wrong."""


def _chain(error: BaseException | None):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _disk_full(error: BaseException) -> OSError | None:
    """The OSError of a full disk or quota in `error`'s chain (h5py and zipfile wrap it; some keep only the text)."""
    import errno

    for e in _chain(error):
        if isinstance(e, OSError) and (e.errno in (errno.ENOSPC, errno.EDQUOT)
                                       or "No space left on device" in str(e) or "Disk quota exceeded" in str(e)):
            return e
    return None


def explain(error: BaseException, resume_hint: str | None = None, where: str | None = None) -> BaseException:
    """A full disk, a file past its size limit, exhausted memory or a refused path as a MachineError saying what to do;
    anything else unchanged. `resume_hint`: how to continue the run; `where`: the directory written, if none named."""
    if isinstance(error, AppError):
        return error
    full = _disk_full(error)
    if full is not None:
        path = full.filename or where
        free = free_space(os.path.dirname(path) if full.filename else path)
        where = path or "the files being written"
        then = f", then continue with `{resume_hint}`: the checkpoints written before are whole" if resume_hint \
            else ", then run the command again"
        return MachineError(f"no space left on the device holding {where}{free}: free some space{then}.")
    too_large = _errno_in(error, "EFBIG")
    if too_large is not None:
        then = f"continue with `{resume_hint}`" if resume_hint else "run the command again"
        file = too_large.filename or (f"a file written into {where}" if where else "a file being written")
        return MachineError(f"{file} grew past the largest file "
                            f"this process may write ({too_large.strerror}: the shell's `ulimit -f`, or the file "
                            f"system's own limit): raise it (`ulimit -f unlimited`) or write to another disk, then "
                            f"{then}.")
    if any(isinstance(e, MemoryError) for e in _chain(error)):
        if resume_hint:  # a resumed run keeps its data and model settings: only the queue's may change
            return MachineError(f"out of memory (MemoryError): continue with `{resume_hint} queue.max_size=1` (or "
                                "fewer queue.workers), or start a new run with a smaller data.batch_size or "
                                "data.image_size.")
        return MachineError("out of memory (MemoryError): lower data.batch_size, queue.max_size, queue.workers or "
                            "data.image_size (`python -m app train --cfg job` shows them).")
    blocked = _path_refused(error)
    if blocked is not None:
        path = blocked.filename2 or blocked.filename
        then = f"continue with `{resume_hint}`" if resume_hint else "run the command again"
        return MachineError(f"{path} cannot be written or read: {blocked.strerror}. Give it back its place (a file "
                            f"where a file belongs, writable by you, on a writable disk), then {then}.")
    return error


def free_space(path) -> str:
    """' (N MiB free)' on the disk holding `path`; '' where that cannot be told."""
    import shutil

    try:
        return f" ({shutil.disk_usage(path).free / 2**20:.1f} MiB free)"
    except (OSError, TypeError):
        return ""


def _errno_in(error: BaseException, name: str) -> OSError | None:
    """The OSError with errno `name` in `error`'s chain."""
    import errno

    return next((e for e in _chain(error) if isinstance(e, OSError) and e.errno == getattr(errno, name)), None)


def _path_refused(error: BaseException) -> OSError | None:
    """The OSError in `error`'s chain of a path the file system refuses: permissions, file/folder mix-up, read-only."""
    import errno

    refusals = (errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EROFS, errno.ENOTEMPTY)
    for e in _chain(error):
        if isinstance(e, OSError) and e.errno in refusals and e.filename:
            return e
    return None


def _paragraph(error: BaseException) -> str:
    """The error and its causes as one paragraph (Hydra wraps OmegaConf's detail in __cause__)."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        # a cause already said in full by the error it caused is not repeated ("X — X")
        if text and not any(text in part for part in parts) and "$VALUE" not in text:  # and OmegaConf's templates
            parts.append(text)
        error = error.__cause__
    return " — ".join(parts)


def _unknown_key(error: BaseException) -> tuple[str, list[str]] | None:
    """(key, the keys its schema allows) for a key the schema lacks; None for a free mapping, where `+` adds keys."""
    import dataclasses

    while error is not None:
        object_type = getattr(error, "object_type", None)
        if object_type is not None and dataclasses.is_dataclass(object_type):
            return str(getattr(error, "full_key", "") or "?"), [f.name for f in dataclasses.fields(object_type)]
        error = error.__cause__
    return None


def _unknown_key_message(key: str, names: list[str]) -> str:
    """Say which keys are there, and the likeliest meant: Hydra's advice, `+key=...`, a schema refuses too."""
    import difflib

    head, _, last = key.rpartition(".")
    near = difflib.get_close_matches(last, names, n=1)
    meant = f" (did you mean {head + '.' if head else ''}{near[0]}?)" if near else ""
    return f"config key `{key}` is not allowed: no such key{meant}. Allowed keys there: {', '.join(names)}."


def _unknown_option(error: BaseException) -> str | None:
    """For a missing group option (`optimizer=adamm`): the options a user may pick, without Hydra's schemas and path."""
    import difflib

    group, _, name = str(getattr(error, "missing_cfg_file", None) or "").rpartition("/")
    options = [o for o in getattr(error, "options", None) or [] if not o.endswith("_schema")]
    if not group or not options:
        return None
    near = difflib.get_close_matches(name, options, n=1)
    meant = f" (did you mean {group}={near[0]}?)" if near else ""
    return f"config group `{group}` has no option `{name}`{meant}: {group}= one of {', '.join(options)}."


def exit_status_for(error: BaseException) -> int:  # 130 interrupted, 2 a config's fault, 1 any other; says nothing
    if isinstance(error, KeyboardInterrupt):
        return 130
    error = explain(error)
    if isinstance(error, AppError):
        return 2 if isinstance(error, ConfigError) else 1
    return 2 if _config_library_error(error) else 1


def report_failure(error: BaseException, command: str = "train") -> None:
    """Print `error` as one paragraph on stderr; a bug's traceback goes to `command`'s log, if any."""
    import logging
    import sys
    import traceback

    if isinstance(error, KeyboardInterrupt):
        print("interrupted.", file=sys.stderr)
        return
    error = explain(error)
    if isinstance(error, AppError):
        print(f"error: {_paragraph(error)}", file=sys.stderr)
        return
    if _config_library_error(error):
        from omegaconf.errors import ConfigAttributeError, ConfigKeyError

        unknown = any(isinstance(e, (ConfigKeyError, ConfigAttributeError)) for e in (error, error.__cause__))
        found = _unknown_key(error) if unknown else None
        option = _unknown_option(error)
        print(f"error: {_unknown_key_message(*found)}" if found else f"error: {option}" if option else
              f"config error: {_paragraph(error)}", file=sys.stderr)
        return
    if os.environ.get("APP_TRACEBACK"):
        traceback.print_exception(error)
    # Hydra's log file, once the command has started (not before: a config Hydra could not compose)
    logged = bool(logging.getLogger().handlers)
    if logged and not any(getattr(e, "traceback_logged", False) for e in (error, error.__cause__)):
        logging.getLogger(f"app.{command}").error("unexpected error", exc_info=error)
    where = ("the run's train.log; " if command == "train" else
             f"{command}.log, in the command's directory; ") if logged else ""
    print(f"error: unexpected {type(error).__name__}: {_paragraph(error)} (a bug: "
          f"{'the traceback is in ' + where if where else ''}set APP_TRACEBACK=1 to print it here)", file=sys.stderr)


def _config_library_error(error: BaseException) -> bool:  # Hydra's or OmegaConf's: a config's fault
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(error, (HydraException, OmegaConfBaseException))


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to this app as it was installed: editable from a source checkout, else from an
    index. Told by where `app` was imported from: a build's app.egg-info would mislead metadata."""
    checkout = (Path(__file__).resolve().parent.parent / "pyproject.toml").is_file()
    return f"pip install -e '.[{extra}]'" if checkout else f"pip install 'app[{extra}]'"
