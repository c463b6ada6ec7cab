"""Foreign text (target errors, record values, database messages) is printed as it is:
never read as rich markup, never able to recolour the terminal or crash the printer."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table

from mcq.cli import app as cli
from mcq.output import cell, plain, say

NASTY = [
    "[/bold] [red",
    "HTTP 400: <html>[/…] closing tag without opening [/]</html>",
    "\x1b[31mred\x1b[0m and a bell \x07 and a carriage return\r over it",
    "invalid utf-8 decoded with surrogateescape: " + b"\xff\xfe".decode("utf-8", "surrogateescape"),
    "a lone surrogate \ud800 and C1 \x9b31m",
    ":smile: [link=http://x]y[/link] [bold magenta]z",
    "x" * 1_000_000,
]


def _strict_utf8_console() -> tuple[Console, io.BytesIO]:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    return Console(file=stream, highlight=False, soft_wrap=True, width=100), raw


@pytest.mark.parametrize("text", NASTY)
def test_say_prints_any_foreign_text_literally_without_raising(text: str) -> None:
    console, raw = _strict_utf8_console()
    say(console, text)
    out = raw.getvalue().decode("utf-8")
    assert "\x1b" not in out and "\r" not in out  # nothing reaches the terminal as a control
    assert out.rstrip("\n") == plain(text)


def test_plain_keeps_markup_like_text_and_escapes_only_controls_and_surrogates() -> None:
    assert plain("[/bold] [red") == "[/bold] [red"
    assert plain("\x1b[31m") == "\\x1b[31m"
    assert plain("tab\tand\nnewline") == "tab\tand\nnewline"
    assert plain(b"\xff".decode("utf-8", "surrogateescape")) == "\\udcff"
    assert plain(ValueError("[/x]")) == "[/x]"


def test_table_cells_of_foreign_text_are_not_markup() -> None:
    console, raw = _strict_utf8_console()
    table = Table("error")
    for text in NASTY[:6]:
        table.add_row(cell(text))
    console.print(table)
    assert "[/bold] [red" in raw.getvalue().decode("utf-8")


@pytest.mark.parametrize("text", NASTY)
def test_the_cli_report_function_never_interprets_markup(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli._say(text)
    cli._err(f"mcq listen: {text}")
    captured = capsys.readouterr()
    assert plain(text)[:200] in captured.out and plain(text)[:200] in captured.err
