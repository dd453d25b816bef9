"""No import cycles among corral's modules.

The graph is read from the source (the AST of every module under ``src/corral``), not
from what happens to be imported at run time. Its edges are the imports that run:
those at module level (also inside ``if``/``try``) and those deferred into a function,
since an import moved into a function to dodge a cycle still closes it when the
function runs. Imports under ``if TYPE_CHECKING:`` are for the type checker only and
do not count, nor does a module's import of its own parent packages (Python imports
those first anyway).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import corral

SRC = Path(corral.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and any(
        isinstance(n, ast.Name | ast.Attribute)
        and (getattr(n, "id", None) or getattr(n, "attr", None)) == "TYPE_CHECKING"
        for n in ast.walk(node.test))


def _imported(module: str, tree: ast.Module) -> Iterator[str]:
    """The corral modules ``module`` imports when it runs (see the module docstring)."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if _is_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            pending.extend(ast.iter_child_nodes(node))
            continue
        for name in names:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                target = ".".join(parts[:end])
                if target in MODULES and not module.startswith(f"{target}.") and target != module:
                    yield target


def _graph() -> dict[str, set[str]]:
    return {name: set(_imported(name, ast.parse(path.read_text(), str(path))))
            for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_corral_imports() -> None:
    graph = _graph()
    assert len(graph) > 100
    assert "corral.errors" in graph["corral.rapi.server"]
    assert "corral.opcodes.messages" in graph["corral.opcodes.checks"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    described = ["; ".join(f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle)
                 for cycle in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)
