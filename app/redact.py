"""Secrets kept out of everything a command saves, prints or logs: below a `storage_options` key, at any depth, a key
whose name holds one of SECRET_WORDS (any case) has its value written as REDACTED; configs exactly, text generously."""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "<redacted>"
OPTIONS = "storage_options"
SECRET_WORDS = ("key", "secret", "token", "password", "passwd", "credential", "session_token", "access_key",
                "private")
_SECRET = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# In text: a key (a dotted path, or a flow mapping's key) after the start, a space, `{`, `,`, `+` or
# `~`, never inside a value (`http://s3.key.host:9000` is not a key), then `=` or `:` and its value:
# quoted, an interpolation, a flow mapping or list of one level, or a run up to a separator.
_ASSIGNMENT = re.compile(
    r"(?<![^\s{,+~])(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\$\{[^}]*\}|\{[^{}]*\}|\[[^\[\]]*\]|[^\s,}\]]+)")


def is_secret(name: str) -> bool:
    """Whether a key of storage_options named `name` holds a secret (SECRET_WORDS, any case)."""
    return bool(_SECRET.search(str(name)))


def _secret_path(path: list[str]) -> bool:
    """Whether a key path (its parts) names a secret: a part after `storage_options` is secret."""
    if OPTIONS not in path:
        return False
    return any(is_secret(part) for part in path[path.index(OPTIONS) + 1:])


def redacted(node: Any, path: tuple[str, ...] = ()) -> Any:
    """`node` (a config, or a part at key path `path`; keys may be dotted) as a new container, secrets REDACTED."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            where = (*path, *str(key).split("."))
            secret = value is not None and value != "" and _secret_path(list(where))
            out[key] = REDACTED if secret else redacted(value, where)
        return out
    if isinstance(node, list | tuple):
        return [redacted(item, path) for item in node]
    if isinstance(node, str) and OPTIONS in node:
        return redacted_text(node)
    return node


def redacted_text(text: str, within: bool = False) -> str:
    """`text`, secrets after `storage_options` (anywhere: `within`) as a quoted REDACTED Hydra reads; may over-catch."""
    start = 0 if within else text.find(OPTIONS)
    if start < 0:
        return text

    def replace(match: re.Match) -> str:
        parts = match["name"].split(".")
        secret = _secret_path(parts) if OPTIONS in parts else any(map(is_secret, parts))
        if not secret:  # a flow mapping or list's own keys are looked at in turn
            return f"{match['name']}{match['sep']}{redacted_text(match['value'], within=True)}"
        if match["value"] in ("null", "''", '""'):
            return match[0]
        return f"{match['name']}{match['sep']}'{REDACTED}'"

    return text[:start] + _ASSIGNMENT.sub(replace, text[start:])


def without_redacted(options: dict, path: str) -> tuple[dict, list[str]]:
    """(`options` at config key `path` less the keys whose value is REDACTED, the dotted keys taken out)."""
    kept, dropped = {}, []
    for key, value in options.items():
        where = f"{path}.{key}"
        if value == REDACTED:
            dropped.append(where)
        elif isinstance(value, dict):
            kept[key], inner = without_redacted(value, where)
            dropped += inner
        else:
            kept[key] = value
    return kept, dropped


def dropped_note(keys: list[str]) -> str:
    """The line naming secrets a read-back config lacked, how to give them (no `key=`/`key:`: redaction spares it)."""
    return (f"secrets not saved with the run, so not used ({', '.join(keys)}): the environment's credentials "
            f"apply (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...); to use others, give them again on "
            f"the command line as {keys[0].split(OPTIONS)[0]}{OPTIONS}.<key>=...")


class RedactingFilter(logging.Filter):
    """A logging filter writing a record's message with `redacted_text`; Hydra's logging config puts it on a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if OPTIONS in message:
            cleaned = redacted_text(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True

