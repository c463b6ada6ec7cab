"""One key's history (``mcq trace``): the form asks for TNAME[/Subtype] and the key fields;
the answer is each change's capture and each listener's steps. Audited as a read of
record contents (a target's answer may quote a value)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcq.history import trace
from mcq.history.show import lines, listeners_of, parse_key

if TYPE_CHECKING:
    from mcq.console.app import Console

MAX_FIELD = 500


def routes(ctx: Console) -> list[Route]:
    def page(request: Request) -> Response:
        tname = request.query_params.get("tname", "").strip()[:MAX_FIELD]
        key = request.query_params.get("key", "").strip()[:MAX_FIELD]
        if not (tname and key):
            ctx.user(request)
            return ctx.render(request, "trace.html", tname=tname, key=key, shown=None, error=None)
        try:
            wanted = parse_key(tname, key)
        except (ValueError, TypeError) as exc:
            ctx.user(request)
            return ctx.render(request, "trace.html", 400, tname=tname, key=key, shown=None, error=str(exc))
        ctx.read_contents(request, "history", str(wanted))
        listeners = listeners_of(ctx.state.registry(), wanted)
        events = trace(ctx.settings, wanted.tname, [wanted.text()], listeners)[wanted.text()]
        shown = lines(wanted, events, listeners)
        return ctx.render(request, "trace.html", tname=tname, key=key, shown=shown, error=None)

    return [Route("/trace", page)]
