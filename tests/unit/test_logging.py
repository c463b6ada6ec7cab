"""Library code logs; only the shells print (mcq/logs.py). A terminal shows our INFO lines on
stdout and warnings on stderr, the message alone; the log file has them all; nothing twice."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

import pytest

from mcq.config.services import LogSettings
from mcq.logs import SHOWN, TerminalHandler, configure

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = [p for pkg in ("mcq", "streams", "consumers") for p in sorted((ROOT / pkg).rglob("*.py"))]
SHELLS = ("mcq/cli/", "mcq/console/", "mcq/demo/")
"""They talk to a person (a terminal, a page): they may print."""
PRINTS = {"mcq/logs.py"}
"""Sets up the log itself: says on stderr that it has no file."""


@pytest.fixture
def terminal(tmp_path: Path) -> tuple[list[str], list[str], Path]:
    out: list[str] = []
    err: list[str] = []
    path = tmp_path / "mcq.log"
    configure(LogSettings(file=path), TerminalHandler(out.append, err.append))
    yield out, err, path  # type: ignore[misc]
    configure(LogSettings(file=None))  # back to no handler of ours


def test_a_terminal_shows_info_on_stdout_warnings_on_stderr_and_the_file_has_both(
    terminal: tuple[list[str], list[str], Path],
) -> None:
    out, err, path = terminal
    logging.getLogger("consumers.runtime.listener").info("listener L: caught up")
    logging.getLogger("streams.runner").warning("normalize: removed 2 half-written checkpoint file(s)")
    logging.getLogger("mcq.topics.plan").error("drift x")
    logging.getLogger("streams.jobs.rebuild").debug("not for a person")
    logging.getLogger("py4j.clientserver").warning("a library's own line")
    assert out == ["listener L: caught up"]
    assert err == ["normalize: removed 2 half-written checkpoint file(s)", "drift x"]
    text = path.read_text()
    assert "INFO" in text and "consumers.runtime.listener: listener L: caught up" in text
    assert "WARNING" in text and "streams.runner" in text and "a library's own line" in text
    assert "not for a person" not in text  # INFO is the default level


def test_a_line_the_shell_printed_itself_is_not_shown_again(terminal: tuple[list[str], list[str], Path]) -> None:
    out, err, path = terminal
    logging.getLogger("mcq.cli").info("printed by _say", extra={SHOWN: True})
    assert out == [] and err == []
    assert "printed by _say" in path.read_text()


def test_json_format_writes_one_object_per_line_and_no_terminal_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out: list[str] = []
    try:
        configure(LogSettings(file=None, format="json"), TerminalHandler(out.append, out.append))
        logging.getLogger("streams.handover").warning("normalize: handing over")
    finally:
        configure(LogSettings(file=None))
    [line] = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"], record["message"]) == (
        "WARNING",
        "streams.handover",
        "normalize: handing over",
    )
    assert out == []  # a machine reads JSON only


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_library_code_takes_a_report_callback_or_prints() -> None:
    """Messages travel through each module's logger at its level, never through a ``report``
    parameter (issue 59): found ones name file:line."""
    found = []
    for path in LIBRARY:
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), rel)
        for fn in _functions(tree):
            args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
            found += [f"{rel}:{a.lineno}: parameter {a.arg!r}" for a in args if a.arg in ("report", "_report")]
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "Report" for t in node.targets):
                found.append(f"{rel}:{node.lineno}: a Report alias")
            is_print = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            if is_print and not rel.startswith(SHELLS) and rel not in PRINTS:
                found.append(f"{rel}:{node.lineno}: print()")  # type: ignore[attr-defined]
    assert not found, "\n".join(found)


def test_each_library_module_logs_under_its_own_name() -> None:
    """``logging.getLogger(__name__)``: a line's logger says which module wrote it, and a
    level can be set per package (``streams``, ``consumers.runtime``…)."""
    found = []
    for path in LIBRARY:
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("mcq/cli/") or rel in ("mcq/logs.py", "mcq/testing/logs.py") or path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger"
            if call and isinstance(node.func.value, ast.Name) and node.func.value.id == "logging":  # type: ignore[attr-defined]
                arg = node.args[0] if node.args else None  # type: ignore[attr-defined]
                # librdkafka's lines, which confluent-kafka hands to a logger of their own
                if not (isinstance(arg, ast.Name) and arg.id in ("__name__", "KAFKA_CLIENT_LOGGER")):
                    found.append(f"{rel}:{node.lineno}: getLogger({ast.unparse(arg) if arg else ''})")  # type: ignore[attr-defined]
    assert not found, "\n".join(found)
