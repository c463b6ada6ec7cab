"""The layout tables a newcomer reads (docs/reference/layout.md, consumers/README.md) match the
tree: every path they name exists, and every folder of the tree and every sub-package of
``mcq`` has a row."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests import PROJECT_ROOT

LAYOUT = PROJECT_ROOT / "docs" / "reference" / "layout.md"


def _rows(readme: Path, heading: str | None) -> list[str]:
    text = readme.read_text()
    if heading is not None:
        text = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)`", text, re.M)


def test_every_path_the_layout_page_names_exists_and_every_folder_has_a_row() -> None:
    named = _rows(LAYOUT, None)
    assert named, "no layout table"
    assert [p for p in named if not (PROJECT_ROOT / p).exists()] == []
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    folders = {f.split("/")[0] + "/" for f in tracked if "/" in f and not f.startswith(".")}
    assert sorted(folders - set(named)) == []
    packages = {p.parent.name for p in (PROJECT_ROOT / "mcq").glob("*/__init__.py")}
    mcq_rows = " ".join(line for line in LAYOUT.read_text().splitlines() if "`mcq/" in line)
    assert sorted(p for p in packages if f"`{p}/`" not in mcq_rows and f"`mcq/{p}/`" not in mcq_rows) == []


def test_every_path_the_consumers_readme_names_exists() -> None:
    base = PROJECT_ROOT / "consumers"
    named = [p for cell in _rows(base / "README.md", None) for p in re.split(r"`, `", cell)]
    assert named
    assert [p for p in named if not (base / p).exists()] == []
    modules = {p.relative_to(base).as_posix() for p in (base / "runtime").glob("*.py") if p.name != "__init__.py"}
    text = (base / "README.md").read_text()
    assert sorted(m for m in modules if f"`{m}`" not in text) == []


def test_the_readme_stays_short_and_every_link_it_holds_resolves() -> None:
    """The README is the door (at most 200 lines); the rest is docs/, whose own links
    ``make docs`` checks strictly. Here: the README's relative links, anchors aside."""
    text = (PROJECT_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+://", t)]
    assert len(links) > 20
    assert [t for t in links if not (PROJECT_ROOT / t.split("#", 1)[0]).exists()] == []
