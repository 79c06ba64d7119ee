"""The layout's rules, read off the code (ast), not grepped: which stage may import which, and
the schema's defaults against the YAML files that extend it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from app.config import DATA_SCHEMAS, SCHEMAS, AugmentConfig, conf_dir

APP = Path(__file__).resolve().parent.parent / "app"
FRAMEWORKS = ("tensorflow", "keras", "jax")


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in APP.rglob("*.py")}


def imports(module: str) -> set[str]:
    """Every module `module` imports, at its top or inside a function (both can run)."""
    tree = ast.parse(MODULES[module].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in MODULES}
    return found


def closure(start: list[str]) -> set[str]:
    """`start` and every module of the app they import, transitively; and the outside ones."""
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in imports(module) if module in MODULES else ():
            seen.add(name) if name not in MODULES else todo.append(name)
            parent = name.rsplit(".", 1)[0]
            if parent in MODULES and parent not in seen:  # `import app.x.y` runs app/x/__init__.py
                todo.append(parent)
    return seen


def test_workers_never_import_a_framework():
    worker_side = closure(["app.loader.worker", "app.loader.pool", "app.data", "app.augment"])
    bad = sorted(m for m in worker_side if m.split(".")[0] in FRAMEWORKS)
    assert not bad, bad
    # negative control: the walk does see the frameworks where they are
    assert any(m.split(".")[0] == "keras" for m in closure(["app.model"]))


def test_model_and_training_never_import_loader_internals():
    public = {"app.loader", "app.loader.pipeline", "app.loader.order"}
    training = ["app.model", *(m for m in MODULES if m.startswith("app.training"))]
    assert len(training) > 5
    for module in training:
        internal = sorted(m for m in imports(module) if m.startswith("app.loader") and m not in public)
        assert not internal, (module, internal)
    assert "app.loader.enqueuer" in imports("app.loader.pipeline")  # negative control: the walk sees them


def test_the_loader_never_imports_model_training_or_commands():
    forbidden = ("app.model", "app.training", "app.commands")
    for module in [m for m in MODULES if m.startswith("app.loader")]:
        bad = sorted(m for m in closure([module]) if m.startswith(forbidden))
        assert not bad, (module, bad)


def _default(f: dataclasses.Field):
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    value = getattr(value, "value", value)  # an enum member: its name in YAML
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


CASES = [(schema, conf_dir() / group / path.name) for group, schema in SCHEMAS.items()
         for path in sorted((conf_dir() / group).glob("*.yaml"))
         if not (schema is AugmentConfig and path.stem != "none")]  # augment/default.yaml is a preset list
CASES += [(schema, conf_dir() / "data" / f"{name}.yaml") for name, schema in DATA_SCHEMAS.items()]


@pytest.mark.parametrize(("schema", "path"), CASES, ids=[f"{p.parent.name}/{p.stem}" for _, p in CASES])
def test_schema_defaults_equal_the_yaml(schema, path):
    yaml = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    yaml.pop("defaults")
    fields = {f.name: f for f in dataclasses.fields(schema)}
    assert set(yaml) <= set(fields), set(yaml) - set(fields)
    for key, value in yaml.items():
        default = _default(fields[key])
        assert value == default, f"{path.name}: {key} is {value!r} in YAML, {default!r} in {schema.__name__}"
