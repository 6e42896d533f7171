"""The package's layering (docs/architecture.md): no import cycles, and no module imports
from a layer above its own, counting imports inside functions too (a lazy import is still a
dependency). Private attributes of another module are read only in tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

# Lowest first. A module's layer is that of its longest listed prefix.
LAYERS = [
    ["model", "errors", "output", "stop", "argtypes"],
    ["perf", "traces", "clusters", "forecast"],
    ["placement", "metrics"],
    ["policies"],
    ["backend", "sim", "k8s"],
    ["control"],
    ["session", "whatif", "experiment", "sweeps", "scenarios", "k8s.service", "k8s.leader"],
    ["ui", "commands", "cli", "bench", "__main__", "k8s.local", "__init__"],
]


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _layer(module: str) -> int:
    best, found = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), i
    assert found is not None, f"{module} has no layer in LAYERS"
    return found


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Package modules `module` imports at run time (TYPE_CHECKING blocks left out)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
            elif (node.module or "").startswith("workbench"):
                base = node.module.split(".")[1:]
            else:
                continue
            names = [".".join(base + [a.name]) for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("workbench.") for a in node.names
                     if a.name.startswith("workbench.")]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower():
    upward = [f"{a} -> {b}" for a, targets in _graph().items() for b in targets
              if _layer(b) > _layer(a)]
    assert upward == []


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def _private_names(text: str) -> set[str]:
    """Private attributes a file defines: `self._x = …` and `def _x`."""
    return set(re.findall(r"\bself\.(_[a-z][a-z0-9_]*)\s*[:=]", text)) | \
        set(re.findall(r"\bdef (_[a-z][a-z0-9_]*)", text))


def test_no_private_attribute_of_another_module_is_read():
    """`backend._held`, `controller._pending_switch`: reaching into another module's private
    state is how the seams drifted. A private of the file's own classes is fine, and so are
    third-party ones (not defined in the package)."""
    texts = {path: path.read_text() for path in PACKAGE.rglob("*.py")}
    own = {path: _private_names(text) for path, text in texts.items()}
    everywhere = set().union(*own.values())
    access = re.compile(r"\b(?!self\b|cls\b)[a-z_][a-z0-9_]*\.(_[a-z][a-z0-9_]*)\b")
    found = []
    for path, text in texts.items():
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in access.finditer(line.split("#", 1)[0]):
                name = m.group(1)
                if name in everywhere and name not in own[path]:
                    found.append(f"{path.relative_to(PACKAGE)}:{lineno}: {m.group(0)}")
    assert found == [], "\n".join(found)


def test_no_function_over_80_lines_without_a_reason():
    """A long function hides steps that deserve names; one that must stay long says why in
    its docstring (a line starting 'Long because')."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80 and "Long because" not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(PACKAGE)}: {node.name} ({lines} lines)")
    assert long == []
