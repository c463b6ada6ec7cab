"""The latest report (``mcq report``): its HTML page and CSV files, as written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from streams.jobs.report_render import csv_paths, default_report

if TYPE_CHECKING:
    from mcq.console.app import Console


def routes(ctx: Console) -> list[Route]:
    def latest(request: Request) -> Response:
        ctx.user(request)
        path = default_report(ctx.settings)
        if not path.is_file():
            raise HTTPException(404, f"no report yet ({path}): run `mcq report`")
        return FileResponse(path, media_type="text/html")

    def figures(request: Request) -> Response:
        ctx.user(request)
        name = request.path_params["name"]
        paths = csv_paths(default_report(ctx.settings))
        if name not in paths or not paths[name].is_file():
            raise HTTPException(404, f"no figures {name!r}; figures: {', '.join(paths)}")
        return FileResponse(paths[name], media_type="text/csv", filename=paths[name].name)

    return [Route("/report", latest), Route("/report/{name}.csv", figures)]
