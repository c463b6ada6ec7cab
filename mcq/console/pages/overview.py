"""Overview: each listener's state, pending changes per lane, oldest pending age, counts and
last heartbeat; each service; refreshed on its own."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcq.console.state import verdict

if TYPE_CHECKING:
    from mcq.console.app import Console


def routes(ctx: Console) -> list[Route]:
    def overview(request: Request) -> Response:
        ctx.user(request)
        statuses = ctx.state.statuses()
        rows = [
            {
                "status": s,
                "verdict": verdict(s),
                "pending_by_lane": {
                    lane: sum(x.pending for x in s.lags if x.lane == lane) for lane in ("realtime", "bulk")
                },
            }
            for s in statuses
        ]
        return ctx.render(
            request,
            "overview.html",
            rows=rows,
            services=ctx.state.services(),
            now=time.time(),
            auto_refresh=True,
        )

    return [Route("/", overview)]
