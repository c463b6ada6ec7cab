"""Tables: every table/subtype with its feeds, its topic, who listens to it, when it was
first seen (the MCQ paper's call-stack column: the process and statement that first
logged it) and its changes per day (from the latest ``mcq report``)."""

from __future__ import annotations

import csv
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcq.config import Settings
from streams.jobs.report_render import csv_paths, default_report

if TYPE_CHECKING:
    from mcq.console.app import Console

DAYS = 7


def changes_per_day(settings: Settings) -> tuple[dict[str, list[tuple[str, int]]], str | None]:
    """The latest report's changes per day (its last DAYS days) by table/subtype, and when
    the report was made; empty without a report."""
    path = csv_paths(default_report(settings))["changes"]
    if not path.is_file():
        return {}, None
    by: dict[str, list[tuple[str, int]]] = defaultdict(list)
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            by[row["table_subtype"]].append((row["day"], int(row["changes"])))
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
    return {ref: sorted(days)[-DAYS:] for ref, days in by.items()}, made


def routes(ctx: Console) -> list[Route]:
    def tables(request: Request) -> Response:
        ctx.user(request)
        registry = ctx.state.registry()
        provenance = ctx.state.provenance()
        counts, made = changes_per_day(ctx.settings)
        rows = [
            {
                "table": t,
                "topic": t.topic(ctx.settings.topic_prefix),
                "listeners": sorted({i.listener for i in registry.interests if i.covers(t)}),
                "provenance": provenance.get(t.ref),
                "per_day": counts.get(t.ref, []),
            }
            for t in registry.tables
        ]
        return ctx.render(request, "tables.html", rows=rows, report_made=made)

    return [Route("/tables", tables)]
