"""Dead letters of a listener (AQ's exception queue): browse, show the record and its
error, requeue to the retry lane, discard with a reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from consumers.exceptions import DeadLetterError
from consumers.runtime.dlq import DeadLetter, DeadLetters

if TYPE_CHECKING:
    from mcq.console.app import Console


def _letters(ctx: Console, name: str) -> DeadLetters:
    if ctx.state.registry().listener(name) is None:
        raise HTTPException(404, f"no listener {name!r} in the registry")
    return DeadLetters(ctx.settings, name)


def routes(ctx: Console) -> list[Route]:
    def browse(request: Request) -> Response:
        ctx.user(request)
        name = request.path_params["name"]
        everything = request.query_params.get("all") == "1"
        entries = _letters(ctx, name).entries(include_resolved=everything)
        return ctx.render(request, "dead_letters.html", name=name, entries=entries[::-1], everything=everything)

    def show(request: Request) -> Response:
        ctx.user(request)
        name, entry_id = request.path_params["name"], request.path_params["entry"]
        letters = _letters(ctx, name)
        try:
            entry = letters.get(entry_id)
        except DeadLetterError as exc:
            raise HTTPException(404, str(exc)) from None
        ctx.read_contents(request, "dead letter", f"{name} {entry_id}")
        return ctx.render(request, "dead_letter.html", name=name, entry=entry, change=letters.decoded(entry))

    async def act(request: Request) -> Response:
        user = ctx.admin(request)
        form = await ctx.form(request)
        name, action = request.path_params["name"], request.path_params["action"]
        ids = [str(v) for v in form.getlist("id")]
        reason = str(form.get("reason", "")).strip()
        letters = _letters(ctx, name)
        if not ids:
            ctx.flash(request, "choose at least one dead letter")
            return RedirectResponse(f"/listeners/{name}/dead-letters", 303)
        if action == "discard" and not reason:
            ctx.flash(request, "a discard needs a reason")
            return RedirectResponse(f"/listeners/{name}/dead-letters", 303)
        try:
            entries: list[DeadLetter] = [letters.get(i) for i in ids]
            done = letters.requeue(entries, reason) if action == "requeue" else letters.discard(entries, reason)
        except DeadLetterError as exc:
            ctx.audit.record(user.name, user.role, f"dlq {action}", name, f"failed: {exc}", ids=ids)
            ctx.flash(request, f"{action} failed: {exc}")
            return RedirectResponse(f"/listeners/{name}/dead-letters", 303)
        ctx.audit.record(user.name, user.role, f"dlq {action}", name, "ok", ids=ids, reason=reason)
        where = f" to {letters.topics.retry}" if action == "requeue" else ""
        ctx.flash(request, f"{action}d {done} dead letter(s){where}")
        return RedirectResponse(f"/listeners/{name}/dead-letters", 303)

    return [
        Route("/listeners/{name}/dead-letters", browse),
        Route("/listeners/{name}/dead-letters/{entry}", show),
        Route("/listeners/{name}/dead-letters-{action:str}", act, methods=["POST"]),
    ]
