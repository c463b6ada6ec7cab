"""The interests editor: add, edit or remove a listener's interest (table/subtype, content
rule, column allow-list, delay, expiry). A change is validated like ``mcq registry
validate`` (the same messages, each shown at its field) and applied to the registry store,
which running listeners follow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from mcq.registry import Registry, RegistryError
from mcq.registry.model import Interest
from mcq.registry.store import definition_key

if TYPE_CHECKING:
    from mcq.console.app import Console

FIELDS = ("listener", "tname", "subtype", "rule", "columns", "delay_s", "expire_after_s", "comment")


def interest_id(interest: Interest) -> str:
    return definition_key(interest).removeprefix("interest/")


def _form_values(form: FormData) -> dict[str, str]:
    return {f: str(form.get(f, "")).strip() for f in FIELDS}


def _raw(values: dict[str, str]) -> dict[str, Any]:
    """The interest as the registry file would hold it: blanks are left out (subtype: blank
    is the table without subtype, ``*`` every subtype)."""
    raw: dict[str, Any] = {"listener": values["listener"], "tname": values["tname"]}
    raw["subtype"] = values["subtype"] or None
    for name in ("rule", "delay_s", "expire_after_s", "comment"):
        if values[name]:
            raw[name] = values[name]
    if values["columns"]:
        raw["columns"] = [c.strip() for c in values["columns"].split(",") if c.strip()]
    return raw


def validate(registry: Registry, interests: list[dict[str, Any]], at: int) -> tuple[Registry | None, dict[str, str]]:
    """The registry with these interests, or the problems of interest AT by field (the
    messages ``mcq registry validate`` gives)."""
    data = registry.model_dump()
    data["interests"] = interests
    try:
        wanted = Registry.model_validate(data)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for err in exc.errors():
            loc = err["loc"]
            if len(loc) >= 3 and loc[0] == "interests" and loc[1] == at:
                errors.setdefault(str(loc[2]), err["msg"].removeprefix("Value error, "))
            elif len(loc) >= 2 and loc[0] == "interests" and loc[1] == at:
                errors.setdefault("listener", err["msg"])
        return None, errors or {"listener": str(exc)}
    ids = [interest_id(i) for i in wanted.interests]
    if ids.count(ids[at]) > 1:
        mine = wanted.interests[at]
        what = f"{mine.tname}/{mine.subtype if mine.subtype is not None else '-'}"
        return None, {"tname": f"{mine.listener} already has an interest in {what}: edit that one"}
    problems = {str(p[2]): m for p, m in wanted.problems() if len(p) >= 3 and p[0] == "interests" and p[1] == at}
    other = [m for p, m in wanted.problems() if not (len(p) >= 2 and p[0] == "interests" and p[1] == at)]
    if problems:
        return None, problems
    if other:
        return None, {"listener": "; ".join(other)}
    return wanted, {}


def routes(ctx: Console) -> list[Route]:
    def page(request: Request, status_code: int = 200, **values: Any) -> Response:
        registry = ctx.state.registry()
        return ctx.render(
            request,
            "interests.html",
            status_code,
            registry=registry,
            interest_id=interest_id,
            form=values.get("form") or {"subtype": "*"},
            errors=values.get("errors") or {},
            editing=values.get("editing"),
        )

    def show(request: Request) -> Response:
        ctx.user(request)
        editing = request.query_params.get("edit")
        if not editing:
            return page(request)
        found = [i for i in ctx.state.registry().interests if interest_id(i) == editing]
        if not found:
            raise HTTPException(404, f"no interest {editing!r}")
        i = found[0]
        values = {
            "listener": i.listener,
            "tname": i.tname,
            "subtype": i.subtype or "",
            "rule": i.rule or "",
            "columns": ", ".join(i.columns or ()),
            "delay_s": "" if i.delay_s is None else f"{i.delay_s:g}",
            "expire_after_s": "" if i.expire_after_s is None else f"{i.expire_after_s:g}",
            "comment": i.comment,
        }
        return page(request, form=values, editing=editing)

    async def save(request: Request) -> Response:
        user = ctx.admin(request)
        form = await ctx.form(request)
        values = _form_values(form)
        editing = str(form.get("editing", "")) or None
        registry = ctx.state.registry()
        current = [i for i in registry.interests]
        raw_all: list[dict[str, Any]] = [i.model_dump(exclude_defaults=True) for i in current]
        ids = [interest_id(i) for i in current]
        if editing is not None:
            if editing not in ids:
                raise HTTPException(404, f"no interest {editing!r} (it was removed meanwhile?)")
            at = ids.index(editing)
            raw_all[at] = _raw(values)
        else:
            at = len(raw_all)
            raw_all.append(_raw(values))
        wanted, errors = validate(registry, raw_all, at)
        action = "edit interest" if editing else "add interest"
        target = f"{values['listener']} {values['tname']}/{values['subtype'] or '-'}"
        if wanted is None:
            ctx.audit.record(user.name, user.role, action, target, "refused: invalid", errors=errors)
            return page(request, 422, form=values, errors=errors, editing=editing)
        try:
            applied = ctx.state.store.apply(wanted)
            lines = applied.lines() + applied.notes()
        except RegistryError as exc:
            ctx.audit.record(user.name, user.role, action, target, f"failed: {exc}")
            return page(request, 503, form=values, errors={"listener": str(exc)}, editing=editing)
        ctx.audit.record(user.name, user.role, action, target, "ok", changes=lines, rule=values["rule"])
        ctx.flash(request, "; ".join(lines) or "no change")
        return RedirectResponse("/interests", 303)

    async def remove(request: Request) -> Response:
        user = ctx.admin(request)
        form = await ctx.form(request)
        gone = str(form.get("id", ""))
        registry = ctx.state.registry()
        kept = [i for i in registry.interests if interest_id(i) != gone]
        if len(kept) == len(registry.interests):
            raise HTTPException(404, f"no interest {gone!r} (it was removed meanwhile?)")
        wanted = Registry.model_validate({**registry.model_dump(), "interests": [i.model_dump() for i in kept]})
        applied = ctx.state.store.apply(wanted)
        lines = applied.lines() + applied.notes()
        ctx.audit.record(user.name, user.role, "remove interest", gone, "ok", changes=lines)
        ctx.flash(request, "; ".join(lines) or "no change")
        return RedirectResponse("/interests", 303)

    return [
        Route("/interests", show),
        Route("/interests", save, methods=["POST"]),
        Route("/interests/remove", remove, methods=["POST"]),
    ]
