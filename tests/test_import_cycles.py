"""No import cycles among the project's modules (``host``, ``controller``, ``switch``, ``testbed``).

Every ``import`` counts, at module level or inside a function (a function-level import that closes a cycle is a
cycle moved out of sight, not removed). A module that imports a sibling module of its package depends on that
module, not on the package's ``__init__``; ``from pkg import name`` of a name defined in ``pkg/__init__.py``
depends on the ``__init__``. Compiled extension modules (``_name.c`` / ``_name*.so`` beside a package's modules)
are modules too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: import name -> directory in the repository
PACKAGES = {"host": "host", "controller": "controller", "switch": "switch", "testbed": "mininet"}


def modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (extension modules map to their C source or library)."""
    found: dict[str, Path] = {}
    for name, directory in PACKAGES.items():
        for path in sorted((ROOT / directory).rglob("*")):
            rel = path.relative_to(ROOT / directory)
            if path.suffix == ".py":
                parts = [name, *rel.with_suffix("").parts]
                if parts[-1] == "__init__":
                    parts.pop()
            elif path.name.startswith("_") and path.suffix in (".c", ".so"):
                parts = [name, *rel.parent.parts, path.name.split(".")[0]]
            else:
                continue
            found.setdefault(".".join(parts), path)
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports anywhere in its source."""
    if path.suffix != ".py":
        return set()
    is_package = path.name == "__init__.py"
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            targets += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    deps = set()
    for target in targets:
        while target and target not in known:  # a name inside a module: the module
            target = target.rpartition(".")[0]
        if target and target != module:
            deps.add(target)
    return deps


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_is_what_the_sources_say():
    known = modules()
    assert "host.transport._txlane" in known and "testbed.run" in known
    assert "host.policy" in imports("host.transport.endpoint", known["host.transport.endpoint"], known)


def test_no_import_cycles():
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    found = cycles(graph)
    detail = ["  " + ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(detail)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_switch_back_end_reads_only_the_typed_ir():
    """The embedded target's back end (analyses, code generator, P4Info) consumes the typed IR (switch.midend.ir,
    switch.midend.tir), never the syntax tree nor the stages that build it (docs/switch-target.md)."""
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    front = {"switch.frontend.p4ast", "switch.frontend.parser", "switch.frontend.lexer", "switch.frontend.preprocess",
             "switch.frontend.inline", "switch.frontend.check", "switch.frontend.lower"}
    assert front <= set(known)
    for back in ("switch.backend.codegen", "switch.midend.analysis", "switch.backend.p4info", "switch.midend.tir",
                 "switch.midend.ir"):
        assert not reachable(graph, back) & front, f"{back} reaches {sorted(reachable(graph, back) & front)}"
    assert {"switch.midend.tir", "switch.midend.ir"} <= reachable(graph, "switch.backend.codegen")


#: the switch's stages (docs/switch-target.md, "The pipeline in folders") -> the stages each may import
SWITCH_STAGES = {
    "switch.errors": set(),
    "switch.midend": {"switch.errors"},
    "switch.frontend": {"switch.errors", "switch.midend"},
    "switch.backend": {"switch.errors", "switch.midend"},
    "switch.target": {"switch.errors", "switch.midend", "switch.frontend", "switch.backend"},
    "switch.daemon": {"switch.errors", "switch.midend", "switch.frontend", "switch.backend", "switch.target"},
    "switch.compile": {"switch.errors", "switch.frontend", "switch.backend"},
}


def stage_violations(graph: dict[str, set[str]], stages: dict[str, set[str]]) -> list[str]:
    """Each import of a module of one stage by a module of another that ``stages`` does not allow, and each module
    of the package that belongs to no stage (``switch`` itself, the package, is not a stage)."""
    def stage(module: str) -> str | None:
        return next((s for s in stages if module == s or module.startswith(s + ".")), None)

    found = []
    for m in sorted(graph):
        if not m.startswith("switch."):
            continue
        here = stage(m)
        if here is None:
            found.append(f"{m}: in no stage")
            continue
        for d in sorted(graph[m]):
            there = stage(d)
            if there is not None and there != here and there not in stages[here]:
                found.append(f"{m} imports {d}: {here} may import only {sorted(stages[here])}")
    return found


def test_the_stage_rule_sees_a_backward_import():
    graph = {"switch.midend.ir": {"switch.frontend.p4ast"}, "switch.frontend.p4ast": {"switch.errors"},
             "switch.errors": set(), "switch.misc": set()}
    assert stage_violations(graph, SWITCH_STAGES) == [
        "switch.midend.ir imports switch.frontend.p4ast: switch.midend may import only ['switch.errors']",
        "switch.misc: in no stage"]


def test_switch_stages_import_in_pipeline_order():
    """The folders show the pipeline: the midend imports no other stage, the front end and the back end only the
    midend (never each other), the target the compiler's stages, the daemon the target; a new module of the switch
    belongs to one of them."""
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    assert {s for s in SWITCH_STAGES if s in known or any(m.startswith(s + ".") for m in known)} == set(SWITCH_STAGES)
    found = stage_violations(graph, SWITCH_STAGES)
    assert not found, "\n".join(found)
