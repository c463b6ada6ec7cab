"""The report's files, without Spark: figures in, one self-contained HTML page (every plot
embedded, no external reference) and CSV files with the same numbers out."""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streams.exceptions import ReportError
from streams.jobs.report import Figures, since_time
from streams.jobs.report_render import csv_paths, write


def test_since_reads_spans_and_times() -> None:
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    assert since_time("7d", now) == now - timedelta(days=7)
    assert since_time("24h", now) == now - timedelta(hours=24)
    assert since_time("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ReportError, match="7d, 24h, 90m"):
        since_time("last week", now)


def test_the_page_embeds_every_plot_and_the_csv_files_hold_the_same_figures(tmp_path: Path) -> None:
    f = Figures("mcq", datetime(2026, 11, 18, tzinfo=UTC), datetime(2026, 11, 25, tzinfo=UTC))
    f.changes = [("2026-11-24", "PERSON/PEOPLE", 120), ("2026-11-24", "LOGINS", 7), ("2026-11-25", "PERSON/PEOPLE", 3)]
    f.applied = [("2026-11-24", "LDAP", 127), ("2026-11-25", "LDAP", 3)]
    f.latency = [("LDAP", 130, 0.21, 0.4, 0.9, 1.5)]
    f.bulk_wait = [("LDAP", 10, 2.5)]
    f.dead_letters = [("2026-11-25", "LDAP", "rejected", 2)]
    out = tmp_path / "r" / "report.html"
    written = write(f, out)
    assert written[0] == out and len(written) == 6
    page = out.read_text()
    images = re.findall(r'<img class="plot" src="([^"]+)"', page)
    assert len(images) == 4 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from elsewhere
    assert "130 change(s) in the logical topics" in page
    with csv_paths(out)["changes"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["changes"]) for r in rows) == 130
    with csv_paths(out)["latency"].open() as fh:
        [latency] = list(csv.DictReader(fh))
    assert (latency["listener"], latency["p99_s"]) == ("LDAP", "0.9")


def test_an_empty_period_still_writes_every_file(tmp_path: Path) -> None:
    f = Figures("mcq", datetime(2026, 11, 18, tzinfo=UTC), datetime(2026, 11, 25, tzinfo=UTC))
    write(f, tmp_path / "report.html")
    assert "nothing in this period" in (tmp_path / "report.html").read_text()
    assert all(p.read_text().count("\n") == 1 for p in csv_paths(tmp_path / "report.html").values())
