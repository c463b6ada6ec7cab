"""A listener's batch actions (the MCQ paper's refresh and flush, and replay and reconcile),
started from its page with a confirmation, run as jobs whose page shows their progress."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from mcq.console.app import Console


ACTIONS = ("refresh", "flush", "replay", "reconcile")
_TIME = re.compile(r"^[0-9T:.+\-Z ]{4,40}$")


def command(name: str, action: str, form: FormData, keys_dir: str) -> list[str]:
    """The ``mcq`` command line of ACTION for listener NAME from the posted form; a value
    that cannot be one of the command's is refused (400) before anything runs."""
    import uuid
    from pathlib import Path

    def text(field: str) -> str:
        return str(form.get(field, "")).strip()

    if action == "refresh":
        argv = ["refresh", name]
        if text("tname"):
            argv += ["--tname", text("tname")]
            if text("subtype"):
                argv += ["--subtype", text("subtype")]
        if text("where"):
            argv += ["--where", text("where")]
        if text("keys"):
            path = Path(keys_dir) / f"keys-{uuid.uuid4().hex}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text("keys") + "\n")
            argv += ["--keys", str(path)]
        if text("source") == "source":
            argv += ["--from", "source"]
        return argv
    if action == "flush":
        argv = ["flush", name, "--yes"]
        if text("before"):
            if not _TIME.match(text("before")):
                raise HTTPException(400, "before: an ISO 8601 time, e.g. 2026-11-25T12:00:00Z")
            argv += ["--before", text("before")]
        return argv
    if action == "replay":
        since = text("from") or "earliest"
        if since != "earliest" and not _TIME.match(since):
            raise HTTPException(400, "from: earliest or an ISO 8601 time")
        return ["replay", name, "--from", since]
    if action == "reconcile":
        return ["reconcile", name, *(["--repair"] if text("repair") == "on" else [])]
    raise HTTPException(404, f"no action {action!r}; actions: {', '.join(ACTIONS)}")


def routes(ctx: Console) -> list[Route]:
    async def start(request: Request) -> Response:
        user = ctx.admin(request)
        form = await ctx.form(request)
        name, action = request.path_params["name"], request.path_params["action"]
        if ctx.state.registry().listener(name) is None:
            raise HTTPException(404, f"no listener {name!r} in the registry")
        argv = command(name, action, form, str(ctx.jobs.directory))
        job = ctx.jobs.start(user.name, action, name, argv)
        ctx.audit.record(user.name, user.role, action, name, "started", job=job.id, command=job.command)
        return RedirectResponse(f"/jobs/{job.id}", 303)

    def show(request: Request) -> Response:
        ctx.user(request)
        job = ctx.jobs.get(request.path_params["job"])
        if job is None:
            raise HTTPException(404, "no such job (jobs are kept while the console runs; logs stay on disk)")
        return ctx.render(request, "job.html", job=job, auto_refresh=job.returncode is None)

    return [
        Route("/listeners/{name}/actions/{action}", start, methods=["POST"]),
        Route("/jobs/{job}", show),
    ]
