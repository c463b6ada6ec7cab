"""Read a registry YAML file, remembering the line of every value, and validate it.

Every problem comes back as one line ``file:line: where: what is wrong``, all of them at
once, so a user fixes a file in one pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mcq.registry.exceptions import RegistryFileError, RegistryInvalid
from mcq.registry.model import Registry

Path_ = tuple[str | int, ...]


def _plain(node: yaml.Node, path: Path_, lines: dict[Path_, int], loader: yaml.SafeLoader) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _plain(value_node, (*path, key), lines, loader)
            lines[(*path, key)] = key_node.start_mark.line + 1  # the key's line reads best
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, (*path, i), lines, loader) for i, item in enumerate(node.value)]
    return loader.construct_object(node)


def read_yaml(text: str, name: str) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML into plain data and a map of value path -> line number."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:  # a character YAML does not allow, found as the reader starts
        raise RegistryFileError(f"{name}: not valid YAML: {_one_line(str(exc))}") from None
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else 0
        raise RegistryFileError(f"{name}:{line}: not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:  # a character YAML does not allow (its reader's error has no mark)
        raise RegistryFileError(f"{name}: not valid YAML: {_one_line(str(exc))}") from None
    finally:
        loader.dispose()
    lines: dict[Path_, int] = {}
    if node is None:
        return {}, lines
    try:
        return _plain(node, (), lines, yaml.SafeLoader("")), lines
    except yaml.MarkedYAMLError as exc:  # a value no safe type takes (an unknown tag)
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise RegistryFileError(f"{name}:{line}: not valid YAML: {_one_line(str(exc.problem))}") from None


def _one_line(text: str) -> str:
    """TEXT with line breaks and other control characters escaped: one problem, one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _line(lines: dict[Path_, int], path: Path_) -> int:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def _where(path: Path_, data: Any) -> str:
    """A readable location: tables[PERSON/Telephone].feeds[0].keys.person_id"""
    parts: list[str] = []
    node = data
    for step in path:
        if isinstance(step, int) and isinstance(node, list) and step < len(node):
            item = node[step]
            label = None
            if isinstance(item, dict):
                if "tname" in item and "listener" not in item:
                    label = f"{item['tname']}" + (f"/{item['subtype']}" if item.get("subtype") else "")
                elif "listener" in item:
                    label = f"{item['listener']}->{item.get('tname')}"
                else:
                    label = item.get("name") or item.get("table")
            parts[-1] += f"[{label or step}]" if parts else f"[{step}]"
            node = item
        else:
            parts.append(str(step))
            node = node.get(step) if isinstance(node, dict) else None
    return ".".join(parts)


def locate(text: str, name: str, problems: list[tuple[tuple[str | int, ...], str]]) -> list[str]:
    """Problems found outside the registry's own checks (a server's schema), each as
    ``file:line: where: what``."""
    data, lines = read_yaml(text, name)
    return [f"{name}:{_line(lines, p)}: {_where(p, data)}: {m}" for p, m in problems]


def parse_registry(text: str, name: str = "<registry>") -> Registry:
    """Parse and validate registry YAML; raise :class:`RegistryInvalid` listing every problem."""
    data, lines = read_yaml(text, name)
    if not isinstance(data, dict):
        raise RegistryFileError(f"{name}:1: a registry is a mapping with sources, tables, listeners, interests")
    try:
        registry = Registry.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown setting {loc[-1]!r}"
            elif err["type"] == "missing":
                msg = f"{loc[-1]} is required"
            problems.append(f"{name}:{_line(lines, loc)}: {_one_line(f'{_where(loc, data)}: {msg}')}")
        raise RegistryInvalid(problems) from None
    cross = registry.problems()
    if cross:
        raise RegistryInvalid([f"{name}:{_line(lines, p)}: {_one_line(f'{_where(p, data)}: {m}')}" for p, m in cross])
    return registry


def load_registry(path: Path | str) -> Registry:
    """Read and validate a registry file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise RegistryFileError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_registry(text, str(path))
