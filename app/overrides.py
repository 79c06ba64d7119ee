"""Hydra's `key=value` overrides, read and quoted: the one parser of them for the resume path and a run's recorded
overrides. Prefixes (`+`, `++`, `~`) are taken off to name a key."""

from __future__ import annotations

import re

# A value Hydra parses as a sweep or a function (choice(a, b), range(1,3), int(4)...) is not quoted.
_FUNCTION = re.compile(r"^[A-Za-z_]+\(.*\)$")


def parsed(arg: str) -> tuple[str, str] | None:
    """(key, value) of an override, its key's prefixes taken off; None for a flag or a word without `=`."""
    if arg.startswith("-") or "=" not in arg:
        return None
    key, value = arg.split("=", 1)
    return key.lstrip("+~"), value


def key_of(arg: str) -> str:
    """The key an argument names: an override's, prefixes off; a flag's (`--cfg=job`) up to `=`."""
    return arg.lstrip("+~").split("=", 1)[0]


def value_of(argv: list[str], key: str) -> str | None:
    """The last value given to `key`, its Hydra quotes taken off; None when not given."""
    found = None
    for arg in argv:
        if "=" in arg and key_of(arg) == key:
            found = arg.split("=", 1)[1]
    if found and len(found) >= 2 and found[0] == found[-1] and found[0] in "'\"":
        found = found[1:-1].replace(f"\\{found[0]}", found[0]).replace("\\${", "${")
    return found


def as_dict(overrides: list[str]) -> dict[str, str]:
    """Each override's key → its value as written, the last one winning; flags left out."""
    return dict(pair for pair in map(parsed, overrides) if pair is not None)


def quoted(value: str) -> str:
    """`value` as one quoted string of Hydra's override grammar (no interpolation inside)."""
    return "'" + value.replace("'", "\\'").replace("${", "\\${") + "'"


def quote_override(arg: str) -> str:
    """`key=value`, `value` quoted if Hydra would reject it unquoted (space, non-ASCII) and it is a plain string."""
    if arg.startswith("-") or "=" not in arg:
        return arg
    key, value = arg.split("=", 1)
    plain = value and value[0] not in "'\"[{" and not _FUNCTION.match(value)
    if plain and (any(c.isspace() for c in value) or not value.isascii()):
        return f"{key}={quoted(value)}"
    return arg
