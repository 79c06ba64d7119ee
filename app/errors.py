"""Errors a user can act on: each carries a one-paragraph message the CLI prints as is."""


class AppError(Exception):
    """A failure whose message names the key, path or index at fault (no traceback needed)."""


class ConfigError(AppError):
    """A config value that is missing, of the wrong type or out of range."""


class DataError(AppError):
    """Missing or unreadable data."""


class BadSampleError(DataError):
    """One sample could not be read or decoded."""

    def __init__(self, index: int, where: str, reason: str):
        self.index, self.where, self.reason = index, where, reason
        super().__init__(f"sample {index} ({where}) could not be loaded: {reason}")


class WorkerError(AppError):
    """A loader worker failed, died or hung."""


def _paragraph(error: BaseException) -> str:
    """The error and its causes as one paragraph (Hydra wraps OmegaConf's detail in __cause__)."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        if text and text not in parts and "$VALUE" not in text:  # OmegaConf's unfilled templates
            parts.append(text)
        error = error.__cause__
    return " — ".join(parts)


def _allowed_keys(error: BaseException) -> str:
    """For an unknown key: the keys its schema does allow."""
    import dataclasses

    while error is not None:
        object_type = getattr(error, "object_type", None)
        if object_type is not None and dataclasses.is_dataclass(object_type):
            names = ", ".join(f.name for f in dataclasses.fields(object_type))
            return f" Allowed keys there: {names}."
        error = error.__cause__
    return ""


def exit_status_for(error: BaseException) -> int:
    """Print `error` as one paragraph on stderr and return the process's exit status."""
    import os
    import sys
    import traceback

    if isinstance(error, KeyboardInterrupt):
        print("interrupted.", file=sys.stderr)
        return 130
    if isinstance(error, AppError):
        print(f"error: {_paragraph(error)}", file=sys.stderr)
        return 2 if isinstance(error, ConfigError) else 1
    from hydra.errors import HydraException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if isinstance(error, (HydraException, OmegaConfBaseException)):
        unknown = any(isinstance(e, (ConfigKeyError, ConfigAttributeError)) for e in (error, error.__cause__))
        hint = _allowed_keys(error) if unknown else ""
        print(f"config error: {_paragraph(error)}{hint}", file=sys.stderr)
        return 2
    if os.environ.get("APP_TRACEBACK"):
        traceback.print_exception(error)
    print(f"error: unexpected {type(error).__name__}: {_paragraph(error)} (a bug: the traceback is in the "
          "run's train.log; set APP_TRACEBACK=1 to print it here)", file=sys.stderr)
    return 1
