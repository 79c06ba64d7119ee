"""What a command prints for people besides its log: the composed config as a tree (rich)."""

from __future__ import annotations

import sys

from omegaconf import OmegaConf
from rich.console import Console
from rich.syntax import Syntax
from rich.tree import Tree


def config_tree(plain: dict, title: str = "config") -> Tree:
    """A branch a group (data, augment, model, ...) holding its YAML, then one for the top-level keys."""
    tree = Tree(title, guide_style="dim")
    branches = {k: v for k, v in plain.items() if isinstance(v, dict)}
    branches["(top level)"] = {k: v for k, v in plain.items() if not isinstance(v, dict)}
    for key, value in branches.items():
        tree.add(key, guide_style="dim").add(_yaml(value))
    return tree


def _yaml(value: dict) -> Syntax:
    code = OmegaConf.to_yaml(value).rstrip()
    # as wide as its longest line: rich would pad every line to the console's width
    return Syntax(code, "yaml", code_width=max(map(len, code.splitlines())), background_color="default")


def print_config(plain: dict, title: str = "config") -> None:
    # not a terminal (a log, a pipe): no width to wrap at, so paths and lists stay whole
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 10_000).print(config_tree(plain, title))
