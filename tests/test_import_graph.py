"""The house's import rules, read from the source: no module imports itself back through others, and imports
point one way between packages (train → distill, heads, eval; eval → heads; distill → heads; heads → nothing
of ours). Entry points (`__main__`) may also reach the packages their command needs (python -m eval loads a
target with distill's loader): nothing imports an entry point, so they cannot close a circle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("train", "distill", "heads", "eval")
ALLOWED = {"train": {"distill", "heads", "eval"}, "eval": {"heads"}, "distill": {"heads"}, "heads": set()}
ENTRY_POINT_EXTRAS = {"eval": {"distill"}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}


def _resolve(name: str, modules: dict) -> str | None:
    """The module `name` refers to: itself, or the package holding the imported attribute."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Every module of ours → the modules of ours it imports (function-level imports included)."""
    modules, graph = _modules(), {}
    for name, path in modules.items():
        deps = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}".rstrip(".")
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {r for r in (_resolve(t, modules) for t in targets) if r and r != name}
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 100  # the walk found the code, not an empty tree
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    """The check above could pass on a finder that never finds one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_point_one_way_between_packages():
    wrong = []
    for module, deps in import_graph().items():
        own = module.split(".")[0]
        allowed = ALLOWED[own] | (ENTRY_POINT_EXTRAS.get(own, set()) if module.endswith(".__main__") else set())
        wrong += [f"{module} → {dep}" for dep in sorted(deps) if dep.split(".")[0] not in allowed | {own}]
    assert wrong == []


# distill/'s wings, lowest floor first: a module imports its own wing and the floors below, never one above
# (the stage drives prompts, targets and features; the targets build the toy world, which reads prompt sets)
DISTILL_FLOORS = ("ground", "prompts", "toyworld", "targets", "features", "stage", "__main__")


def _distill_floor(module: str) -> str:
    wing = module.split(".")[1] if module.count(".") else "ground"
    return wing if wing in DISTILL_FLOORS else "ground"  # config, errors, lock, device, inputs, packaged


def test_distill_wings_import_only_their_own_floor_and_those_below():
    graph = import_graph()
    assert {_distill_floor(m) for m in graph if m.startswith("distill.")} == set(DISTILL_FLOORS)  # every wing found
    wrong = [
        f"{module} → {dep}"
        for module, deps in graph.items()
        if module.startswith("distill.")
        for dep in sorted(deps)
        if dep.startswith("distill.")
        and DISTILL_FLOORS.index(_distill_floor(dep)) > DISTILL_FLOORS.index(_distill_floor(module))
    ]
    assert wrong == []
