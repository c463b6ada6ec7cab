"""Importing the core of ``mcq`` (registry model, change contract, config, Kafka/registry/Connect
clients, topics, capture, the local stack) loads no layer above it, nor Spark, ldap3 or a web
server: a listener-only install imports it. Which module may import which, a function's
imports included, is import-linter's contracts' (pyproject.toml, ``make lint``); a function
may import Spark or ldap3 when it runs, so what importing loads is checked here.

Checked in a fresh interpreter: this test process has long imported everything. And no
import cycle hides inside a function (grimp, import-linter's graph)."""

from __future__ import annotations

import json
import subprocess
import sys

SHELLS = ("mcq.cli", "mcq.console", "mcq.demo", "mcq.testing")
ABOVE_THE_CORE = ("consumers", "streams", "pyspark", "ldap3", "tests", "bench", "uvicorn", "starlette")

_PROBE = """
import importlib, json, pkgutil, sys
shells = tuple(sys.argv[1].split(","))
names = []
def walk(package):  # pkgutil.walk_packages would import the shells' packages to walk them
    names.append(package)
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
        if info.name in shells:
            continue
        if info.ispkg:
            walk(info.name)
        else:
            importlib.import_module(info.name)
            names.append(info.name)
walk("mcq")
print(json.dumps({"modules": names, "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _core_imports() -> dict[str, list[str]]:
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(SHELLS)], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, list[str]] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_the_core_imports_no_layer_above_it() -> None:
    seen = _core_imports()
    assert "mcq.config" in seen["modules"] and "mcq.registry.model" in seen["modules"]  # the walk found the core
    assert len(seen["modules"]) > 30
    above = sorted(set(seen["loaded"]) & set(ABOVE_THE_CORE))
    assert above == [], f"importing the core of mcq loaded {above}"


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in imports.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return out


def test_no_module_imports_itself_back_through_others_not_even_inside_a_function() -> None:
    """No import cycle among mcq's, streams' and consumers' modules, counting the imports a
    function makes (an import moved into a function hides a cycle; it does not remove it).
    Imports only for type checking do not count: they never run."""
    import grimp

    graph = grimp.build_graph("mcq", "streams", "consumers", exclude_type_checking_imports=True)
    assert _cycles({m: graph.find_modules_directly_imported_by(m) for m in graph.modules}) == []


def test_the_cycle_finder_finds_a_cycle_through_three_modules_and_none_in_a_chain() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
