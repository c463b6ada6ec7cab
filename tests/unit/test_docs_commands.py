"""Every `mcq` command the README and docs/ show is one the CLI takes: its command path
exists and each option parses (a renamed command or option fails here, naming the page and
line). The tutorial and the README's tour also run end to end (test_docs_tutorial.py,
test_readme_tour.py); the how-to pages' listings hold placeholders (NAME, ID), so they are
parsed, not run."""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import click
import pytest

from mcq.cli import main
from tests import PROJECT_ROOT

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
ENDS = {">", ">>", "2>&1", "&", "|", "&&", ";", "||"}


def shown_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line, argv after ``mcq``) of each mcq command in the page's shell blocks."""
    found: list[tuple[int, list[str]]] = []
    text = page.read_text()
    for block in re.finditer(r"^```(sh|bash|console)\n(.*?)^```", text, re.M | re.S):
        first = text[: block.start(2)].count("\n") + 1
        joined = re.sub(r"\\\n", " ", block.group(2))  # a continued line is one command
        lines = block.group(2).splitlines()
        offsets = [i for i, line in enumerate(lines) if i == 0 or not lines[i - 1].endswith("\\")]
        for n, line in zip(offsets, joined.splitlines(), strict=True):
            for part in line.split(" && "):
                if not part.strip().startswith("mcq "):
                    continue  # another program's line (psql's SQL may span lines)
                words = shlex.split(part, comments=True)
                if len(words) > 1 and words[0] == "mcq":
                    args = words[1:]
                    cut = next((i for i, w in enumerate(args) if w in ENDS or w.startswith(">")), len(args))
                    found.append((first + n, args[:cut]))
    return found


def _parse(args: list[str]) -> None:
    """Resolve ``args`` down the command tree and parse the last command's options, as
    click does before it runs anything (no callback runs)."""
    with warnings.catch_warnings():  # click 8.2+ says protected_args goes in 9.0, where args holds them
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx = main.make_context("mcq", list(args))
        command: click.Command = main
        rest = [*ctx.protected_args, *ctx.args]
        while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
            name, found, rest = command.resolve_command(ctx, rest)
            assert found is not None and name is not None
            command, ctx = found, found.make_context(name, list(rest), parent=ctx)
            rest = [*ctx.protected_args, *ctx.args] if isinstance(found, click.Group) else []


def test_the_pages_show_mcq_commands_at_all() -> None:
    counted = {p.relative_to(PROJECT_ROOT).as_posix(): len(shown_commands(p)) for p in PAGES}
    assert counted["docs/how-to/operations.md"] >= 15 and counted["README.md"] >= 5, counted


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(PROJECT_ROOT).as_posix())
def test_every_mcq_command_a_page_shows_is_one_the_cli_takes(page: Path) -> None:
    refused = []
    for line, args in shown_commands(page):
        try:
            _parse(args)
        except click.BadParameter as exc:
            if "does not exist" not in str(exc):  # a file the reader makes (people.csv): the option is real
                refused.append(f"{page.name}:{line}: mcq {' '.join(args)}: {exc.format_message()}")
        except click.UsageError as exc:
            refused.append(f"{page.name}:{line}: mcq {' '.join(args)}: {exc.format_message()}")
    assert not refused, "\n".join(refused)
