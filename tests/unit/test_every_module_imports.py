"""Every module of the package imports: a lazily imported module that moved or never
existed (``from mcq.smoke import …`` inside a function) fails here, not on a user's
machine. mypy reports the same for imports it can see (no ``ignore_missing_imports``
for mcq's own packages)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil

import pytest

PACKAGES = ("mcq", "streams", "consumers")


def _modules() -> list[str]:
    names: list[str] = []
    for top in PACKAGES:
        package = importlib.import_module(top)
        names.append(top)
        found = pkgutil.walk_packages(package.__path__, prefix=f"{top}.")
        names += [m.name for m in found if not m.name.endswith(".__main__")]  # runs the CLI
    return sorted(names)


MODULES = _modules()


def test_the_walk_finds_the_packages_modules() -> None:
    assert {"mcq.cli.demo", "mcq.demo.smoke", "streams.normalize", "consumers.runtime.listener"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name: str) -> None:
    importlib.import_module(name)


def _lazy_imports() -> list[tuple[str, str]]:
    """``(module, imported)`` for every ``import``/``from … import`` of our own packages,
    including those inside functions (read from the source, not executed)."""
    found: list[tuple[str, str]] = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        with open(spec.origin, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), spec.origin)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found += [(name, t) for t in targets if t.split(".")[0] in PACKAGES]
    return found


def test_every_import_of_our_own_modules_names_one_that_exists() -> None:
    missing = [
        f"{module} imports {target}" for module, target in _lazy_imports() if importlib.util.find_spec(target) is None
    ]
    assert not missing, "; ".join(missing)
