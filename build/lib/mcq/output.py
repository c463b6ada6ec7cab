"""Printing text that we did not write: target errors, record values, database messages,
report lines of the runtime that quote them.

Such text may hold anything a target or a record can hold: ``[/bold]`` (which rich
would read as markup and fail on with ``MarkupError``), ANSI escape sequences (which
would recolour or rewrite the operator's terminal), lone surrogates from bytes decoded
with ``surrogateescape`` (which a UTF-8 stream refuses with ``UnicodeEncodeError``).
A listener must survive all of it, so every such line goes through :func:`plain` and is
printed with markup, highlighting and emoji codes off.
"""

from __future__ import annotations

import os
import re
import sys

from rich.console import Console
from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 and C1 control characters except tab and newline, and DEL."""


def _escape_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def plain(text: object) -> str:
    """``text`` as a string safe to print anywhere: control characters (ESC, CR, …) and
    unencodable code points (lone surrogates) shown as backslash escapes; tabs and
    newlines kept; nothing else changed."""
    s = text if isinstance(text, str) else str(text)
    s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(_escape_control, s)


def cell(text: object) -> Text:
    """A table cell holding foreign text: a :class:`rich.text.Text`, never parsed as markup."""
    return Text(plain(text))


PIPED_WIDTH = 240
"""Columns of the CLI's output written to a pipe or a file (a cron mail, grep, a log):
rich's 80 would cut a status table's cells to ``…``."""


def cli_console(stderr: bool = False) -> Console:
    """The CLI's console: a terminal's own width (or ``COLUMNS``), else ``PIPED_WIDTH``."""
    stream = sys.stderr if stderr else sys.stdout
    piped = "COLUMNS" not in os.environ and not (hasattr(stream, "isatty") and stream.isatty())
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=PIPED_WIDTH if piped else None)


def say(console: Console, line: object) -> None:
    """Print one line of foreign text: never interpreted as markup, highlighted or emoji."""
    console.print(plain(line), markup=False, highlight=False, emoji=False)
