"""app/cli/hydra_groups.py: the groups' options as Hydra's own listing gives them, from one copy of the repository."""

from __future__ import annotations

from importlib import metadata

import pytest
from hydra import initialize_config_dir
from hydra._internal import config_repository
from hydra.core.global_hydra import GlobalHydra

from app.cli.hydra_groups import group_options_listed_from_one_copy
from app.config import conf_dir
from app.schema import register


@pytest.fixture
def copies_made(monkeypatch) -> list[int]:
    """Counts the copies of the config repository Hydra makes (CachingConfigRepository's constructor)."""
    made, own = [], config_repository.CachingConfigRepository.__init__

    def counted(self, delegate):
        made.append(1)
        own(self, delegate)

    monkeypatch.setattr(config_repository.CachingConfigRepository, "__init__", counted)
    return made


def test_the_groups_are_listed_as_hydra_lists_them_from_one_copy(copies_made):
    register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        hydras_own = hydra.format_config_groups(lambda group: True)
        by_hydra = len(copies_made)
        with group_options_listed_from_one_copy():
            listed = hydra.format_config_groups(lambda group: True)
        assert listed == hydras_own and "model: " in listed and "hydra/launcher: " in listed
        assert len(copies_made) - by_hydra == 1 and by_hydra > 50  # the negative control: a copy a group
        assert hydra.format_config_groups(lambda group: True) == hydras_own  # Hydra's own again after


def test_the_pinned_minor_is_the_one_installed():
    """The adapter reads hydra-core 1.3's internals: pyproject.toml's pin keeps that minor."""
    assert metadata.version("hydra-core").startswith("1.3.")
