"""A listener: its interests (rules, column allow-lists), schedule, delivery policy, lag per
topic and lane, and its recent errors (unresolved dead letters)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.runtime.dlq import DeadLetters
from mcq.console.state import verdict

if TYPE_CHECKING:
    from mcq.console.app import Console


def routes(ctx: Console) -> list[Route]:
    def listener(request: Request) -> Response:
        ctx.user(request)
        name = request.path_params["name"]
        registry = ctx.state.registry()
        definition = registry.listener(name)
        if definition is None:
            raise HTTPException(404, f"no listener {name!r} in the registry")
        status = ctx.state.statuses([name])[0]
        letters = DeadLetters(ctx.settings, name).entries()
        return ctx.render(
            request,
            "listener.html",
            listener=definition,
            interests=registry.interests_of(name),
            status=status,
            verdict=verdict(status),
            errors=letters[-10:][::-1],
            dead_letters=len(letters),
            jobs=ctx.jobs.of(name),
            now=time.time(),
            auto_refresh=True,
        )

    return [Route("/listeners/{name}", listener)]
