"""mkdocs hook: the reference tables generated from the code, so they cannot drift from it.

A page holds a marker (``<!-- generated: NAME -->``) where a table goes:

- ``settings``: every setting of ``mcq.config.Settings`` (from the pydantic models and
  their attribute docstrings), with its environment variable and default;
- ``registry``: every field of the registry file (``mcq.registry.model``);
- ``metrics``: every Prometheus metric mcq's processes serve (read from the calls that
  define them, so no process needs to run);
- ``errors``: every error class, what ``mcq`` exits with and whether trying again helps.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
import re
import textwrap
import types
import typing
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]


def field_docs(cls: type[BaseModel]) -> dict[str, str]:
    """A model's attribute docstrings (the string below a field), its bases' too."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass.__module__.startswith("pydantic"):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        except (OSError, TypeError):
            continue
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    for name, field in cls.model_fields.items():
        if field.description and name not in docs:
            docs[name] = field.description
    return docs


def type_text(annotation: Any) -> str:
    """A field's type as a reader of YAML or of the environment thinks of it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in args)
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (tuple, list, set, frozenset) and args:
        return f"list of {type_text(args[0])}"
    if origin is dict and args:
        return f"map of {type_text(args[0])} to {type_text(args[1])}"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type):
        return {"str": "text", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return re.sub(r"\b[a-z_]+(\.[a-z_]+)*\.", "", str(annotation))


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, SecretStr):
        return "(a secret)"
    if isinstance(value, BaseModel):
        return "(its section)"
    if value in (None, "", [], {}):
        return "—" if value is None else f"`{value!r}`"
    if isinstance(value, Path):  # a path of the machine the site is built on
        return f"`{str(value).replace(str(ROOT), '<checkout>')}`"
    return f"`{value!r}`".replace("|", "\\|")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds: itself, or its arguments' (lists, dicts, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def model_table(cls: type[BaseModel], env: str | None) -> list[str]:
    docs = field_docs(cls)
    head = "| field | environment | type | default | meaning |" if env else "| field | type | default | meaning |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, field in cls.model_fields.items():
        key = field.alias or name
        row = [f"`{key}`"]
        if env:
            row.append(f"`{env}{name.upper()}`")
        row += [cell(type_text(field.annotation)), default_text(field), cell(docs.get(name, ""))]
        out.append("| " + " | ".join(row) + " |")
    return out


def settings_md() -> str:
    from mcq.config import Settings

    lines = [
        "Each setting comes from the environment (`MCQ_<SECTION>__<FIELD>`), or from the YAML "
        "file `MCQ_CONFIG` names (else `./mcq.yaml`); the environment wins. `mcq config` prints "
        "the effective values, secrets masked.",
        "",
        "## Top level",
        "",
    ]
    top = [n for n, f in Settings.model_fields.items() if not models_in(f.annotation)]
    docs = field_docs(Settings)
    lines += ["| setting | environment | type | default | meaning |", "|---|---|---|---|---|"]
    for name in top:
        f = Settings.model_fields[name]
        lines.append(
            f"| `{name}` | `MCQ_{name.upper()}` | {cell(type_text(f.annotation))} | {default_text(f)} | "
            f"{cell(docs.get(name, ''))} |"
        )
    for name, f in Settings.model_fields.items():
        models = models_in(f.annotation)
        if not models:
            continue
        keyed = typing.get_origin(f.annotation) is dict
        title = f"{name}.<NAME>" if keyed else name
        env = f"MCQ_{name.upper()}__<NAME>__" if keyed else f"MCQ_{name.upper()}__"
        lines += ["", f"## `{title}`", ""]
        if docs.get(name):
            lines += [docs[name], ""]
        elif models[0].__doc__:
            lines += [" ".join(inspect.cleandoc(models[0].__doc__).split()), ""]
        lines += model_table(models[0], env)
    return "\n".join(lines) + "\n"


def registry_md() -> str:
    from mcq.registry.model import Registry

    seen: list[type[BaseModel]] = []

    def walk(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.append(cls)
        for f in cls.model_fields.values():
            for m in models_in(f.annotation):
                walk(m)

    walk(Registry)
    lines: list[str] = []
    for cls in seen:
        lines += [f"## {cls.__name__}", ""]
        if cls.__doc__:
            lines += [" ".join(inspect.cleandoc(cls.__doc__).split()), ""]
        lines += [*model_table(cls, None), ""]
    lines += ["## Adapter settings, by type", ""]
    lines += ["A listener's `adapter: {type: T, settings: {...}}`; the types installed here:", ""]
    for ep in sorted(entry_points(group="mcq.adapters"), key=lambda e: e.name):
        adapter = ep.load()
        lines += [f"### `{ep.name}`", "", f"`{ep.value}`", ""]
        lines += [*model_table(adapter.settings_model, None), ""]
    return "\n".join(lines)


_PROCESS = {
    "consumers/runtime/health.py": "`mcq listen NAME` (`/metrics`, port 8080)",
    "consumers/runtime/status_exporter.py": "`mcq status --serve`",
    "streams/metrics.py": "`mcq streams normalize` (`/metrics`, port 8090)",
    "streams/entities/job.py": "`mcq entities run` (`/metrics`, port 8091)",
    "mcq/console/metrics.py": "`mcq console` (`/metrics`)",
}


def metrics_md() -> str:
    lines = ["| metric | kind | labels | meaning | served by |", "|---|---|---|---|---|"]
    for module, process in _PROCESS.items():
        tree = ast.parse((ROOT / module).read_text())
        for node in ast.walk(tree):
            kinds = {"Counter": "Counter", "Gauge": "Gauge", "Histogram": "Histogram", "GaugeMetricFamily": "Gauge"}
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) in kinds):
                continue
            args = node.args
            if len(args) < 2 or not all(isinstance(a, ast.Constant) for a in args[:2]):
                continue
            kind = kinds[node.func.id]  # type: ignore[attr-defined]
            name = args[0].value + ("_total" if kind == "Counter" else "")  # type: ignore[attr-defined,operator]
            labels = ""
            given = args[2] if len(args) > 2 else next((k.value for k in node.keywords if k.arg == "labels"), None)
            if isinstance(given, ast.List | ast.Tuple):
                labels = ", ".join(f"`{e.value}`" for e in given.elts if isinstance(e, ast.Constant))
            lines.append(f"| `{name}` | {kind.lower()} | {labels} | {cell(args[1].value)} | {process} |")  # type: ignore[attr-defined]
    return "\n".join(lines) + "\n"


def errors_md() -> str:
    from mcq.errors import McqError

    with warnings.catch_warnings():  # third parties' deprecation notices, nothing of ours
        warnings.simplefilter("ignore")
        for package in ("mcq", "streams", "consumers"):
            root = importlib.import_module(package)
            for info in pkgutil.walk_packages(root.__path__, package + "."):
                if info.name.endswith(("__main__", ".submit")) or ".cli" in info.name or ".console" in info.name:
                    continue
                importlib.import_module(info.name)
    rows = []

    def walk(cls: type[McqError], depth: int) -> None:
        doc = " ".join(inspect.cleandoc(cls.__doc__ or "").split())
        retriable = "yes" if cls.retriable else "no"
        indent = "&nbsp;" * 4 * depth
        rows.append(f"| {indent}`{cls.__name__}` | `{cls.__module__}` | {cls.exit_code} | {retriable} | {cell(doc)} |")
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            walk(sub, depth + 1)

    walk(McqError, 0)
    return "\n".join(["| error | module | exit code | retriable | meaning |", "|---|---|---|---|---|", *rows]) + "\n"


GENERATED = {"settings": settings_md, "registry": registry_md, "metrics": metrics_md, "errors": errors_md}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for name, make in GENERATED.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
