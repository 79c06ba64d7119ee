"""Hydra internals, one adapter: `--help`, `--hydra-help` and shell completion list each config group's options, and
hydra-core 1.3 makes a deep copy of the whole config repository for each group it lists (CachingConfigRepository's
constructor): seconds for this app's groups. Here one copy serves a command line's listing. pyproject.toml pins
hydra-core's minor; tests/cli/test_hydra_groups.py checks the listing against Hydra's own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.object_type import ObjectType

# The flags whose output lists the groups' options
LISTING_FLAGS = ("--help", "-h", "--hydra-help", "--shell-completion", "-sc")


@contextlib.contextmanager
def group_options_listed_from_one_copy() -> Iterator[None]:
    """Inside, a config loader lists group options from one copy of its repository per (config, overrides)."""
    own = ConfigLoaderImpl.get_group_options
    copies: dict[tuple, object] = {}

    def get_group_options(self, group_name: str, results_filter: ObjectType | None = ObjectType.CONFIG,
                          config_name: str | None = None, overrides: list[str] | None = None) -> list[str]:
        key = (id(self), config_name, tuple(overrides or ()))
        if key not in copies:
            copies[key] = self._parse_overrides_and_create_caching_repo(config_name, list(overrides or ()))[1]
        return copies[key].get_group_options(group_name, results_filter)

    ConfigLoaderImpl.get_group_options = get_group_options
    try:
        yield
    finally:
        ConfigLoaderImpl.get_group_options = own
