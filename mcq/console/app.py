"""The console's web application: sessions, roles, CSRF, the pages' routes.

Every page needs a login (``/healthz`` and ``/metrics`` alone answer anyone); an action needs the admin
role and a form token bound to the session, and is written to the audit log whatever
its outcome.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from mcq.config import ConsoleSettings, Settings
from mcq.console.audit import AuditLog
from mcq.console.auth import MAX_NAME, Authenticator, LoginThrottle, User
from mcq.console.jobs import Jobs
from mcq.console.metrics import ConsoleMetrics
from mcq.console.pages import dead_letters, interests, jobs, listener, overview, report, tables, topics, trace
from mcq.console.state import ConsoleState

HERE = Path(__file__).parent
SESSION_COOKIE = "mcq_console"


class LoginRequired(Exception):
    """An anonymous request for a page: answered with a redirect to the login page."""


@dataclass
class Console:
    """What every page handler is given."""

    settings: Settings
    state: ConsoleState
    auth: Authenticator
    audit: AuditLog
    templates: Jinja2Templates
    jobs: Jobs

    def user(self, request: Request) -> User:
        """The user of REQUEST; anonymous requests raise :class:`LoginRequired`."""
        proxied = self.auth.from_proxy(request.client.host if request.client else None, dict(request.headers))
        if proxied is not None:
            return proxied
        session = request.session
        if "user" in session:
            user = self.auth.current(str(session["user"]), str(session.get("role", "read")), session.get("stamp"))
            if user is not None:
                return user
            session.clear()  # the user was removed, or their password changed: the session ends
        raise LoginRequired()

    def admin(self, request: Request) -> User:
        user = self.user(request)
        if not user.can_act:
            self.audit.record(user.name, user.role, request.url.path, "", "refused: read-only")
            raise HTTPException(403, f"{user.name} has the read-only role: only an admin may act")
        return user

    async def form(self, request: Request) -> FormData:
        """The posted form, once its token matches the session's (a page of ours sent it)."""
        form = await request.form()
        token = request.session.get("csrf")
        if not token or not secrets.compare_digest(str(form.get("csrf", "")), token):
            raise HTTPException(403, "the form's token does not match this session: reload the page and try again")
        return form

    def render(self, request: Request, template: str, status_code: int = 200, **values: Any) -> Response:
        session = request.session
        if "csrf" not in session:
            session["csrf"] = secrets.token_urlsafe(24)
        try:
            user: User | None = self.user(request)
        except LoginRequired:
            user = None
        context = {
            "user": user,
            "csrf": session["csrf"],
            "prefix": self.settings.topic_prefix,
            "refresh_s": self.settings.console.refresh_s,
            "flash": session.pop("flash", None),
            **values,
        }
        return self.templates.TemplateResponse(request, template, context, status_code=status_code)

    def read_contents(self, request: Request, what: str, target: str) -> User:
        """The user of a request that shows record contents (changes, dead letters), that
        read written to the audit log."""
        user = self.user(request)
        self.audit.record(user.name, user.role, f"read {what}", target, "ok")
        return user

    def flash(self, request: Request, line: str) -> None:
        request.session["flash"] = line


def create_app(settings: Settings, state: ConsoleState | None = None) -> Starlette:
    console_settings = settings.console
    audit_path = console_settings.audit_log or settings.stack.home / "logs" / "console-audit.log"
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["quote"] = lambda s: quote(str(s), safe="")
    started = Jobs(settings.stack.home / "logs" / "console-jobs")
    metrics = ConsoleMetrics(started)
    ctx = Console(
        settings,
        state or ConsoleState(settings),
        Authenticator(console_settings),
        AuditLog(
            audit_path,
            counted=metrics.audit,
            max_bytes=int(console_settings.audit_log_max_mb * 1024 * 1024),
            keep=console_settings.audit_log_keep,
        ),
        templates,
        started,
    )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    throttle = LoginThrottle(console_settings.login_free_failures, console_settings.login_lockout_max_s)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return ctx.render(request, "login.html", next=request.query_params.get("next", "/"))
        form = await request.form()
        name, password = str(form.get("username", "")), str(form.get("password", ""))
        target = str(form.get("next", "/"))
        address = request.client.host if request.client else "-"
        wait = throttle.wait_s(name[:MAX_NAME], address)
        if wait > 0:
            ctx.audit.record(name, "-", "login", "", "refused: locked out", address=address, wait_s=round(wait, 1))
            error = f"too many failed logins: try again in {wait:.0f} s"
            response = ctx.render(request, "login.html", 429, next=target, error=error)
            response.headers["Retry-After"] = str(max(1, round(wait)))
            return response
        user = await run_in_threadpool(ctx.auth.login, name, password)  # argon2: never on the event loop
        if user is None:
            throttle.failed(name, address)
            ctx.audit.record(name, "-", "login", "", "refused: wrong user or password", address=address)
            return ctx.render(request, "login.html", 401, next=target, error="wrong user name or password")
        throttle.succeeded(name, address)
        request.session.clear()
        request.session.update(
            {
                "user": user.name,
                "role": user.role,
                "stamp": ctx.auth.stamp(user.name),
                "csrf": secrets.token_urlsafe(24),
            }
        )
        ctx.audit.record(user.name, user.role, "login", "", "ok")
        return RedirectResponse(target if target.startswith("/") and not target.startswith("//") else "/", 303)

    async def logout(request: Request) -> Response:
        await ctx.form(request)
        user = ctx.user(request)
        ctx.audit.record(user.name, user.role, "logout", "", "ok")
        request.session.clear()
        return RedirectResponse("/login", 303)

    async def login_required(request: Request, exc: Exception) -> Response:
        return RedirectResponse(f"/login?next={quote(request.url.path, safe='/')}", 303)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return ctx.render(request, "error.html", exc.status_code, status=exc.status_code, detail=exc.detail)

    async def server_error(request: Request, exc: Exception) -> Response:
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        detail = f"the console failed on this page: {line[:300]} (its log has the details)"
        return ctx.render(request, "error.html", 500, status=500, detail=detail)

    routes: list[Route | Mount] = [
        Route("/healthz", health),
        Route("/metrics", metrics.endpoint),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    for page in (overview, listener, dead_letters, interests, jobs, tables, topics, report, trace):
        routes += page.routes(ctx)
    secret = console_settings.session_secret
    middleware = [
        Middleware(metrics.middleware),
        Middleware(
            SessionMiddleware,
            secret_key=secret.get_secret_value() if secret else secrets.token_urlsafe(32),
            session_cookie=SESSION_COOKIE,
            same_site="strict",
            max_age=12 * 3600,
            https_only=_secure_cookie(console_settings),
        ),
    ]
    handlers: Mapping[Any, Any] = {LoginRequired: login_required, HTTPException: http_error, Exception: server_error}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


def _secure_cookie(settings: ConsoleSettings) -> bool:
    """The session cookie's ``Secure`` flag: as configured, else on when serving TLS."""
    if settings.secure_cookie is not None:
        return settings.secure_cookie
    return settings.tls_cert is not None
