"""The tests' own layout: what several test modules use lives in ``tests/support/``, so no
test module imports another (one would load the other's fixtures and module setup, and a
helper would be found only by knowing which test first needed it)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in TREE, a function's too; a relative
    import resolved against PACKAGE (the dotted package of the file)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def test_no_test_module_imports_another_test_module() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        package = ".".join(path.relative_to(TESTS.parent).parent.parts)
        for line, name in _imported_modules(ast.parse(path.read_text(), str(path)), package):
            if _is_test_module(name) and (TESTS / Path(*name.split(".")[1:])).with_suffix(".py").exists():
                offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {name}")
    assert offenders == [], "move what they share into tests/support/:\n" + "\n".join(offenders)


def test_the_check_finds_an_import_of_a_test_module_absolute_relative_or_inside_a_function() -> None:
    tree = ast.parse(
        "from tests.integration.test_normalize import decode_topic\n"
        "from .test_ldap import world\n"
        "def f():\n    import tests.unit.test_config\n"
        "from tests.support.logical import last_state\n"
    )
    names = [n for _, n in _imported_modules(tree, "tests.integration") if _is_test_module(n)]
    assert names == ["tests.integration.test_normalize", "tests.integration.test_ldap", "tests.unit.test_config"]
