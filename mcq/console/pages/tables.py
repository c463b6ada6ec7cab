"""Tables: every table/subtype with its feeds, its topic, who listens to it and when it was
first seen (the MCQ paper's call-stack column: the process and statement that first
logged it)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcq.console.app import Console


def routes(ctx: Console) -> list[Route]:
    def tables(request: Request) -> Response:
        ctx.user(request)
        registry = ctx.state.registry()
        provenance = ctx.state.provenance()
        rows = [
            {
                "table": t,
                "topic": t.topic(ctx.settings.topic_prefix),
                "listeners": sorted({i.listener for i in registry.interests if i.covers(t)}),
                "provenance": provenance.get(t.ref),
            }
            for t in registry.tables
        ]
        return ctx.render(request, "tables.html", rows=rows)

    return [Route("/tables", tables)]
