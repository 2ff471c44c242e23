"""The modules of gems_core import in one direction: from a higher layer to a lower one, with
no circle anywhere. Layers, lowest first:

- ``base``: the contract with backends (``contract``, ``hookspecs``, ``configs``), settings,
  logs, the Triton and torch compatibility layer, the disk cache and host arithmetic;
- ``selection``: finding the installed backends (``plugins``, and the built-in ``cpu`` one)
  and choosing one;
- ``policy``: the chosen backend's answers, checked and frozen;
- ``runtime``: the process's selected backend and its policy;
- ``registry``: the overloads and tunable kernels the op modules declare;
- ``launch``: compiling and launching kernels (the per-thread record of a call's launches,
  background compiles, the launch cache, ahead-of-time compiles, tuning and shipped tuning
  tables, per-call plans, variant points);
- ``dispatch``: registering ops with PyTorch's dispatcher, and the native layer that replays
  the launches the launch cache recorded (with ``launches``, through which a backend's own
  kernels report theirs);
- ``kernels``: the op modules, generated pointwise code and the fused ops;
- ``tools``: warmup, coverage, ``info`` and the command line;
- ``facade``: the package ``gems_core`` itself, which nothing inside it imports.

An edge is any import statement, at module level or inside a function, absolute or
relative: ``from . import x`` is an edge to ``gems_core.x``; ``from .a import b`` one to
``gems_core.a.b`` when that is a module, else to ``gems_core.a``. The registry imports the
op modules by name when the ops are loaded (it finds them by walking ``gems_core.ops``, as
``plugins`` finds backends by entry point); no import statement names one, and the op
modules sit above it because they import it to register themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gems_core

ROOT = Path(gems_core.__file__).parent

#: lowest first: a module may import its own layer's modules (without a circle) and lower
#: layers' ones. An entry ending in ".*" covers a package and every module in it; a module's
#: own entry wins over its package's.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("_version", "contract", "hookspecs", "configs", "settings", "logs", "compat",
              "disk_cache", "host_math", "codegen.interpreted_casts")),
    ("selection", ("plugins", "selection", "backends.*")),
    ("policy", ("policy",)),
    ("runtime", ("runtime",)),
    ("registry", ("registry",)),
    ("launch", ("recording", "background", "launch_cache", "aot", "shipped", "tuning", "plan_cache",
                "variants")),
    ("dispatch", ("native.*", "dispatch", "launches")),
    ("kernels", ("ops.*", "codegen.*", "fused.*")),
    ("tools", ("warmup", "coverage", "info", "__main__")),
    ("facade", ("",)),
]


def modules() -> dict[str, Path]:
    """Every module and package of gems_core by dotted name ("" for gems_core itself)."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    for path in ROOT.rglob("*"):  # folders without __init__.py are packages too
        if path.is_dir() and any(path.glob("*.py")):
            found.setdefault(".".join(path.relative_to(ROOT).parts), path)
    return found


def _owner(name: str, known: dict[str, Path]) -> str:
    """The module of gems_core a dotted name (relative to gems_core) lies in."""
    while name not in known:
        name = name.rpartition(".")[0]
    return name


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of gems_core that module ``name`` imports anywhere in its code."""
    if path.is_dir():
        return set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(["gems_core", *base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            if target == "gems_core" or target.startswith("gems_core."):
                found.add(_owner(target.removeprefix("gems_core").removeprefix("."), known))
    found.discard(name)
    return found


def layer_of(name: str) -> int:
    best, rank = None, -1
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if entry.endswith(".*"):
                package = entry[:-2]
                if (name == package or name.startswith(package + ".")) and len(package) > rank:
                    best, rank = index, len(package)
            elif entry == name:
                return index
    if best is None:
        raise LookupError(name)
    return best


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def shown(name: str) -> str:
    return f"gems_core.{name}" if name else "gems_core"


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import circle of ``edges`` (its modules, the first repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_every_module_has_a_layer() -> None:
    missing = []
    for name in modules():
        try:
            layer_of(name)
        except LookupError:
            missing.append(shown(name))
    assert not missing, f"add these modules to LAYERS in {__file__}: {missing}"


def test_no_import_circle() -> None:
    found = cycle(graph())
    assert not found, "import circle: " + " -> ".join(map(shown, found))


def upward(edges: dict[str, set[str]]) -> list[str]:
    """The imports of ``edges`` that go to a higher layer, described."""
    found = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(name):
                found.append(f"{shown(name)} ({LAYERS[layer_of(name)][0]}) imports {shown(target)} "
                             f"({LAYERS[layer_of(target)][0]})")
    return found


def test_imports_go_down_the_layers() -> None:
    found = upward(graph())
    assert not found, "imports of a higher layer:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("mod", "from . import runtime, logs\n", {"runtime", "logs"}),
        ("mod", "def f():\n    from .launch_cache import recording\n", {"launch_cache"}),
        ("mod", "import gems_core.tuning\n", {"tuning"}),
        ("mod", "from gems_core.codegen import pointwise\n", {"codegen.pointwise"}),
        ("native.mod", "from .. import settings\nfrom .recorder import record_call\n",
         {"settings", "native.recorder"}),
        ("mod", "import gems_core\n", {""}),
    ],
)
def test_the_graph_sees_every_kind_of_import(tmp_path: Path, name: str, source: str,
                                             expected: set[str]) -> None:
    """The walk finds imports however they are written (the checks above would pass on a
    graph that missed them)."""
    path = tmp_path / "mod.py"
    path.write_text(source, encoding="utf-8")
    assert imports(name, path, modules()) == expected


def test_the_checks_catch_a_circle_and_an_upward_import() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []
    assert upward({"registry": {"runtime"}, "runtime": {"policy"}}) == []
    allowed = {"launch_cache": {"codegen.interpreted_casts"}}
    assert upward({"policy": {"tuning"}, **allowed}) == [
        "gems_core.policy (policy) imports gems_core.tuning (launch)"
    ]
    assert upward({"dispatch": {""}}) == [
        "gems_core.dispatch (dispatch) imports gems_core (facade)"
    ]
    assert layer_of("ops.x") > layer_of("registry") > layer_of("runtime") > layer_of("contract")
    assert layer_of("codegen.interpreted_casts") < layer_of("launch_cache") < layer_of("codegen.x")
