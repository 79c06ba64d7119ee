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
        bad = sorted(m for m in closure([module]) if m.startswith(forbidden))
        assert not bad, (module, bad)


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


# Explicit construction: a reader sees what each argument is without counting positions.
LOGGING_CALLS = {"debug", "info", "warning", "error", "exception", "critical", "log"}
# Names app/ defines that libraries define too: a call to them may be the library's own.
LIBRARY_NAMES = {"__init__", "run", "main", "get", "update", "write", "start", "stop", "close", "call", "build"}


def _is_dataclass(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)) == "dataclass"


def _kw_only(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in decorator.keywords)


def positional_dataclasses(tree: ast.AST, max_fields: int = 4) -> list[str]:
    """Dataclasses of more than `max_fields` fields that may be built by position."""
    found = []
    for node in ast.walk(tree):
        decorators = [d for d in getattr(node, "decorator_list", ()) if _is_dataclass(d)]
        if not isinstance(node, ast.ClassDef) or not decorators or _kw_only(decorators[0]):
            continue
        fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                  and "ClassVar" not in ast.unparse(s.annotation)]
        if len(fields) > max_fields:
            found.append(node.name)
    return found


def defined_names(trees: list[ast.AST]) -> set[str]:
    """The functions and classes app/ defines, by name, less the names libraries share."""
    names = {n.name for t in trees for n in ast.walk(t)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names - LIBRARY_NAMES - LOGGING_CALLS


def wide_calls(tree: ast.AST, app_names: set[str], max_positional: int = 4) -> list[str]:
    """Calls that pass more than `max_positional` arguments by position to an app-defined callable
    (`cls(...)` in a classmethod is the class's own)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) <= max_positional:
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if callee in app_names or callee == "cls":
            found.append(f"{callee}:{node.lineno}")
    return found
