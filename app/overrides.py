"""`key=value` overrides read by Hydra's own parser (the command line before Hydra, a run's recorded ones) and quoted
where Hydra would refuse or misread them. Flags (`-m`, `--cfg=job`) are not overrides: their key is before `=`."""

from __future__ import annotations

from functools import lru_cache

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

_PARSER = OverridesParser.create()


@lru_cache(maxsize=1024)
def override(arg: str) -> Override | None:
    """Hydra's reading of `arg`; None for a flag or what Hydra refuses (its message says why on the command line)."""
    if arg.startswith("-"):
        return None
    try:
        return _PARSER.parse_override(arg)
    except HydraException:
        return None


def _written(arg: str) -> str:
    """The value of a parsed override as typed (Hydra's keys hold no `=`)."""
    return arg.split("=", 1)[1] if "=" in arg else ""


def parsed(arg: str) -> tuple[str, str] | None:
    """(key sans prefixes, typed value) of a value-setting override; None for a flag, `~key` or what Hydra refuses."""
    found = override(arg)
    if found is None or found.is_delete():
        return None
    return found.key_or_group, _written(arg)


def key_of(arg: str) -> str:
    """An argument's key: an override's without `+`/`++`/`~` and package; else (flag, refused) the text before `=`."""
    found = override(arg)
    return found.key_or_group if found is not None else arg.split("=", 1)[0]


def value_of(argv: list[str], key: str) -> str | None:
    """`key`'s last value: a string as Hydra reads it (unquoted), else (number, list, sweep) as typed; None if unset."""
    found = None
    for arg in argv:
        read = override(arg)
        if read is not None and read.key_or_group == key and not read.is_delete():
            value = read.value()
            found = value if isinstance(value, str) else _written(arg)
    return found


def as_dict(overrides: list[str]) -> dict[str, str]:
    """Each override's key → its value as typed, the last one winning; flags and deletions left out."""
    return dict(pair for pair in map(parsed, overrides) if pair is not None)


def quoted(value: str) -> str:
    """`value` as one quoted string of Hydra's override grammar (no interpolation inside)."""
    return "'" + value.replace("'", "\\'").replace("${", "\\${") + "'"


def quote_override(arg: str) -> str:
    """`key=value` as typed where Hydra reads it so; else (non-ASCII, `~`, `#`, `{}.jpg`, end spaces) quoted as is."""
    if arg.startswith("-") or "=" not in arg:
        return arg
    key, value = arg.split("=", 1)
    bracketed = value[:1] + value[-1:] in ("[]", "{}")
    if value[:1] in ("'", '"') or bracketed:  # quoted, a list or a dict: as typed, Hydra's own error if it is wrong
        return arg
    read = override(arg)
    if read is not None and (not isinstance(read.value(), str) or read.value() == value):
        return arg
    return f"{key}={quoted(value)}"
