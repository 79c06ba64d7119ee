"""The layout's rules, read off the code (ast), not grepped: which stage may import which, and
how long a module or a function may grow."""

from __future__ import annotations

import ast
from pathlib import Path

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
        bad = sorted(m for m in closure([module]) if m.startswith(forbidden) or m.split(".")[0] in FRAMEWORKS)
        assert not bad, (module, bad)


# The floors of app/, bottom to top. An import, at a module's top or inside a function, points
# down a floor or sideways on its own; the loader and the model sit side by side and never meet.
FLOORS = [
    {"app", "app.errors", "app.schema", "app.rules", "app.config", "app.families", "app.io", "app.frameworks",
     "app.processes", "app.console", "app.sheets", "app.overrides",
     "app.adapters"},
    {"app.data", "app.augment", "app.loader", "app.model", "app.backbones"},
    {"app.capacity"},
    {"app.training"},
    {"app.commands", "app.bench"},
    {"app.__main__"},
]
NEVER = {("app.loader", "app.model"), ("app.loader", "app.backbones")}


def unit(module: str) -> str:
    """The package a module belongs to (app.capacity.plan → app.capacity), or the module itself
    at app/'s top."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    """Each of app/'s packages → the other packages of app/ its modules import."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        imported = {unit(name) for name in imports(module) if name == "app" or name.startswith("app.")}
        graph.setdefault(unit(module), set()).update(imported - {unit(module)})
    return graph


def layering_faults(graph: dict[str, set[str]]) -> list[str]:
    """A package on no floor, an arrow up a floor or a forbidden one, and each cycle."""
    floor = {package: level for level, packages in enumerate(FLOORS) for package in packages}
    faults = [f"{package} is on no floor" for package in sorted(graph) if package not in floor]
    for package, imported in sorted(graph.items()):
        for other in sorted(imported):
            if floor.get(other, -1) > floor.get(package, len(FLOORS)):
                faults.append(f"{package} → {other}: up a floor")
            elif (package, other) in NEVER:
                faults.append(f"{package} → {other}: never")
    faults += [f"cycle: {' → '.join(cycle)}" for cycle in _cycles(graph)]
    return faults


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each package that is on one, as the path back to it."""
    found = []
    for start in sorted(graph):
        todo, seen = [(start, [start])], set()
        while todo:
            package, path = todo.pop()
            for other in sorted(graph.get(package, ())):
                if other == start:
                    found.append([*path, start])
                    todo = []
                    break
                if other not in seen:
                    seen.add(other)
                    todo.append((other, [*path, other]))
    return found


def test_packages_import_down_the_floors_never_up_and_never_round():
    graph = package_graph()
    assert {"app.capacity", "app.training", "app.loader", "app.model"} <= graph.keys()
    assert "app.capacity" in graph["app.training"]  # the walk sees the arrows there are
    assert not layering_faults(graph), layering_faults(graph)
    # negative control: capacity reaching up into training (which imports it), and the loader into the model
    wrong = {**graph, "app.capacity": {"app.training"}, "app.loader": {"app.model"}, "app.extra": set()}
    faults = layering_faults(wrong)
    assert "app.capacity → app.training: up a floor" in faults and "app.loader → app.model: never" in faults
    assert "cycle: app.capacity → app.training → app.capacity" in faults and "app.extra is on no floor" in faults


def _oversized(tree: ast.AST, max_lines: int = 60, max_parameters: int = 5) -> list[str]:
    """Functions longer than `max_lines` or taking more than `max_parameters` (self/cls aside)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
            parameters = len([n for n in names if n not in ("self", "cls")])
            if node.end_lineno - node.lineno + 1 > max_lines or parameters > max_parameters:
                found.append(node.name)
    return found


def test_modules_and_functions_stay_short():
    long_modules = sorted(m for m, p in MODULES.items() if len(p.read_text().splitlines()) > 300)
    assert not long_modules, long_modules
    oversized = {m: names for m, p in MODULES.items() if (names := _oversized(ast.parse(p.read_text())))}
    assert not oversized, oversized
    # negative control: the rule sees a long function and a wide one
    wide = ast.parse("def f(a, b, c, d, e, g):\n    pass\n")
    long = ast.parse("def h():\n" + "    x = 1\n" * 61)
    assert _oversized(wide) == ["f"] and _oversized(long) == ["h"]


LOADER_HOLDERS = ("loader", "enqueuer")  # what the code outside app/loader calls the Loader it holds


def _loader_api() -> set[str]:
    """The public members of app/loader/pipeline.py's Loader, read off its class."""
    tree = ast.parse(MODULES["app.loader.pipeline"].read_text())
    loader = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Loader")
    return {n.name for n in loader.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def _loader_reads_beyond(tree: ast.AST, api: set[str]) -> list[str]:
    """Attributes read off a loader (`loader.x`, `self.loader.x`) that its public type does not offer."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else ""
        if name in LOADER_HOLDERS and node.attr not in api:
            found.append(ast.unparse(node))
    return found


def test_commands_and_training_use_the_loader_only_through_its_public_type():
    api = _loader_api()
    assert {"batches", "every_sample", "failed", "skipped", "restarts", "telemetry", "queue"} <= api
    outside = {m: p for m, p in MODULES.items() if not m.startswith("app.loader")}
    beyond = {m: found for m, p in outside.items() if (found := _loader_reads_beyond(ast.parse(p.read_text()), api))}
    assert not beyond, beyond
    # the enqueuer's parts stay the loader's: no command or training module imports them
    internal = {f"app.loader.{n}" for n in ("enqueuer", "bad_samples", "telemetry", "ring", "pool", "prefetch",
                                            "messages")}
    users = [m for m in outside if m.startswith(("app.commands", "app.training"))]
    imported = {m: sorted(imports(m) & internal) for m in users if imports(m) & internal}
    assert not imported, imported
    # negative control: the walk sees a private attribute and an internal object read off a loader
    bad = ast.parse("loader._enqueuer.close()\nself.loader.bad.failed\nenqueuer.batches('train', o, 0)\n")
    assert sorted(_loader_reads_beyond(bad, api)) == ["loader._enqueuer", "self.loader.bad"]
    assert "app.loader.enqueuer" in imports("app.loader.pipeline")
