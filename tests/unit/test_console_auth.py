"""The console's gate, without servers: logins against argon2 hashes, a trusted proxy's
header believed only from the trusted address, the read-only role refused every action,
a form without the session's token refused, and the audit log recording each attempt."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from mcq.config import ConsoleSettings, ConsoleUser, Settings
from mcq.console.app import create_app
from mcq.console.audit import AuditLog
from mcq.console.auth import Authenticator, LoginThrottle, hash_password

PASSWORD = "correct horse battery staple"


def _console(**extra: Any) -> ConsoleSettings:
    users = {
        "ann": ConsoleUser(password_hash=SecretStr(hash_password(PASSWORD)), role="admin"),
        "rob": ConsoleUser(password_hash=SecretStr(hash_password(PASSWORD)), role="read"),
    }
    return ConsoleSettings(users=users, **extra)


def test_a_login_is_checked_against_the_hash_and_the_hash_is_not_the_password() -> None:
    auth = Authenticator(_console())
    hashed = auth.settings.users["ann"].password_hash.get_secret_value()
    assert hashed.startswith("$argon2id$") and PASSWORD not in hashed
    user = auth.login("ann", PASSWORD)
    assert user is not None and user.role == "admin" and user.can_act
    assert auth.login("ann", "wrong") is None
    assert auth.login("nobody", PASSWORD) is None
    rob = auth.login("rob", PASSWORD)
    assert rob is not None and not rob.can_act


def test_a_proxys_header_is_believed_only_from_a_trusted_address() -> None:
    auth = Authenticator(_console(trusted_user_header="X-Forwarded-User", trusted_role_header="X-Forwarded-Role"))
    headers = {"x-forwarded-user": "carol", "x-forwarded-role": "admin"}
    user = auth.from_proxy("127.0.0.1", headers)
    assert user is not None and (user.name, user.role, user.via) == ("carol", "admin", "proxy")
    assert auth.from_proxy("10.0.0.9", headers) is None
    assert Authenticator(_console()).from_proxy("127.0.0.1", headers) is None  # no header configured
    odd = auth.from_proxy("127.0.0.1", {"x-forwarded-user": "dan", "x-forwarded-role": "root"})
    assert odd is not None and odd.role == "read"


class _NoState:
    """The console's data side is not reached by these requests: the gate answers first."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the gate let a request through to state.{name}")


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    settings = Settings(console=_console(audit_log=tmp_path / "audit.log"))
    return TestClient(create_app(settings, state=_NoState()), follow_redirects=False)  # type: ignore[arg-type]


def _log_in(client: TestClient, user: str, password: str = PASSWORD) -> str:
    response = client.post("/login", data={"username": user, "password": password, "next": "/interests"})
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/interests"
    return user


def test_only_health_answers_anyone(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    for path in ("/", "/interests", "/tables", "/topics", "/listeners/LDAP", "/listeners/LDAP/dead-letters"):
        response = client.get(path)
        assert response.status_code == 303 and response.headers["location"].startswith("/login?next="), path
    assert client.post("/interests", data={"tname": "X"}).status_code == 303


def test_a_wrong_password_is_refused_and_recorded(client: TestClient, tmp_path: Path) -> None:
    response = client.post("/login", data={"username": "ann", "password": "nope", "next": "/"})
    assert response.status_code == 401 and "wrong user name or password" in response.text
    entry = json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])
    assert (entry["who"], entry["action"], entry["outcome"]) == ("ann", "login", "refused: wrong user or password")
    assert "nope" not in (tmp_path / "audit.log").read_text()


def test_the_read_only_role_is_refused_every_action_with_403(client: TestClient, tmp_path: Path) -> None:
    _log_in(client, "rob")
    for path in ("/interests", "/interests/remove", "/listeners/LDAP/dead-letters-requeue"):
        response = client.post(path, data={"csrf": "whatever"})
        assert response.status_code == 403, path
        assert "read-only" in response.text
    refused = [json.loads(x) for x in (tmp_path / "audit.log").read_text().splitlines()][-3:]
    assert all(e["who"] == "rob" and e["outcome"] == "refused: read-only" for e in refused)


def test_an_action_without_the_sessions_form_token_is_refused(client: TestClient) -> None:
    _log_in(client, "ann")
    response = client.post("/interests/remove", data={"id": "LDAP|PERSON|", "csrf": "forged"})
    assert response.status_code == 403 and "token" in response.text
    response = client.post("/logout", data={})
    assert response.status_code == 403


def test_the_login_page_token_and_logout(client: TestClient) -> None:
    page = client.get("/login").text
    assert 'name="password"' in page and "<script" not in page
    _log_in(client, "ann")
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
    assert token is not None
    response = client.post("/logout", data={"csrf": token.group(1)})
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert client.get("/interests").status_code == 303  # logged out


def test_metrics_answer_anyone_and_count_requests_by_route_template_and_audit_outcomes(client: TestClient) -> None:
    client.get("/listeners/LDAP")  # anonymous: redirected to the login page
    client.post("/login", data={"username": "ann", "password": "wrong", "next": "/"})
    _log_in(client, "rob")
    client.post("/listeners/LDAP/dead-letters-requeue", data={"csrf": "x"})  # read-only: refused
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    # a page's series carry its route template, never the listener's name
    assert 'mcq_console_requests_total{method="GET",route="/listeners/{name}",status="303"} 1.0' in text
    assert "LDAP" not in text and "rob" not in text and "ann" not in text
    assert 'mcq_console_audited_total{action="login",outcome="refused"} 1.0' in text
    assert 'mcq_console_audited_total{action="login",outcome="ok"} 1.0' in text
    assert 'mcq_console_audited_total{action="page action",outcome="refused"} 1.0' in text
    assert 'mcq_console_request_seconds_count{route="/login"} 2.0' in text


def test_failed_logins_lock_out_the_name_with_a_doubling_wait_and_a_success_clears_it() -> None:
    now = [1000.0]
    throttle = LoginThrottle(free=3, max_s=60, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.wait_s("ann", "10.0.0.1") == 0
        throttle.failed("ann", "10.0.0.1")
    assert throttle.wait_s("ann", "10.0.0.1") == 1.0
    assert throttle.wait_s("ann", "10.0.0.2") == 1.0  # by name, from any address
    assert throttle.wait_s("bob", "10.0.0.1") == 1.0  # and by address, for any name
    assert throttle.wait_s("bob", "10.0.0.2") == 0
    now[0] += 1.0
    throttle.failed("ann", "10.0.0.1")
    assert throttle.wait_s("ann", "10.0.0.1") == 2.0
    for _ in range(20):
        throttle.failed("ann", "10.0.0.1")
    assert throttle.wait_s("ann", "10.0.0.1") == 60  # capped
    throttle.succeeded("ann", "10.0.0.1")
    assert throttle.wait_s("ann", "10.0.0.1") == 0


def test_after_three_wrong_passwords_even_the_right_one_waits_and_is_told_when(
    client: TestClient, tmp_path: Path
) -> None:
    for _ in range(3):
        assert client.post("/login", data={"username": "ann", "password": "x", "next": "/"}).status_code == 401
    locked = client.post("/login", data={"username": "ann", "password": PASSWORD, "next": "/"})
    assert locked.status_code == 429 and "too many failed logins" in locked.text
    assert int(locked.headers["retry-after"]) >= 1
    entry = json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])
    assert entry["outcome"] == "refused: locked out"


def test_the_password_is_checked_off_the_event_loop(monkeypatch: pytest.MonkeyPatch, client: TestClient) -> None:
    import asyncio

    where: list[bool] = []
    real = Authenticator.login

    def login(self: Authenticator, name: str, password: str) -> Any:
        try:
            asyncio.get_running_loop()
            where.append(True)
        except RuntimeError:
            where.append(False)
        return real(self, name, password)

    monkeypatch.setattr(Authenticator, "login", login)
    _log_in(client, "ann")
    assert where == [False]  # in a worker thread: the event loop serves other requests meanwhile


def test_a_huge_user_name_or_password_is_refused_unread_and_logged_cut(client: TestClient, tmp_path: Path) -> None:
    name = "a" * 100_000
    response = client.post("/login", data={"username": name, "password": PASSWORD, "next": "/"})
    assert response.status_code == 401
    entry = json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])
    assert len(entry["who"]) <= 201
    assert Authenticator(_console()).login("ann", PASSWORD + "x" * 2000) is None


def test_the_audit_log_is_rotated_by_size_keeping_the_newest_files(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log", max_bytes=1000, keep=2)
    for i in range(60):
        log.record("ann", "admin", "dlq discard", f"L{i}", "ok")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    assert json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])["target"] == "L59"


def test_a_method_no_one_uses_is_counted_as_other_never_as_its_own_series(client: TestClient) -> None:
    for method in ("FOO", "BAR1", "X" * 50):
        client.request(method, "/healthz")
    text = client.get("/metrics").text
    assert 'method="other"' in text and "FOO" not in text and "BAR1" not in text


def test_the_session_cookie_is_secure_when_the_console_serves_tls(tmp_path: Path) -> None:
    secure = Settings(console=_console(audit_log=tmp_path / "a.log", tls_cert=tmp_path / "c", tls_key=tmp_path / "k"))
    app = TestClient(create_app(secure, state=_NoState()), follow_redirects=False)  # type: ignore[arg-type]
    response = app.post("/login", data={"username": "ann", "password": PASSWORD, "next": "/"})
    assert "secure" in response.headers["set-cookie"].lower()
    plain = Settings(console=_console(audit_log=tmp_path / "b.log"))
    app = TestClient(create_app(plain, state=_NoState()), follow_redirects=False)  # type: ignore[arg-type]
    response = app.post("/login", data={"username": "ann", "password": PASSWORD, "next": "/"})
    assert "secure" not in response.headers["set-cookie"].lower()


def test_a_session_ends_when_its_user_is_removed_or_given_a_new_password_and_a_demotion_counts_at_once(
    tmp_path: Path,
) -> None:
    secret = SecretStr("one secret for every process")
    base = _console(audit_log=tmp_path / "audit.log", session_secret=secret)

    def app(console: ConsoleSettings) -> TestClient:
        return TestClient(create_app(Settings(console=console), state=_NoState()), follow_redirects=False)  # type: ignore[arg-type]

    first = app(base)
    _log_in(first, "ann")
    cookies = dict(first.cookies)
    users = dict(base.users)
    demoted = app(base.model_copy(update={"users": {**users, "ann": users["ann"].model_copy(update={"role": "read"})}}))
    demoted.cookies.update(cookies)
    token = re.search(r'name="csrf" value="([^"]+)"', demoted.get("/login").text)
    assert token is not None
    refused = demoted.post("/listeners/LDAP/dead-letters-requeue", data={"csrf": token.group(1)})
    assert refused.status_code == 403 and "read-only" in refused.text
    removed = app(base.model_copy(update={"users": {"rob": users["rob"]}}))
    removed.cookies.update(cookies)
    assert removed.get("/interests").status_code == 303  # to the login page
    renewed = ConsoleUser(password_hash=SecretStr(hash_password("a new one")), role="admin")
    changed = app(base.model_copy(update={"users": {**users, "ann": renewed}}))
    changed.cookies.update(cookies)
    assert changed.get("/interests").status_code == 303


def test_reading_record_contents_is_audited_for_every_role(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mcq.console.pages import topics
    from mcq.registry import load_registry
    from tests import PROJECT_ROOT

    class CampusState:
        def registry(self) -> Any:
            return load_registry(PROJECT_ROOT / "examples" / "campus.yaml")

    monkeypatch.setattr(topics, "read", lambda *args: [])
    settings = Settings(console=_console(audit_log=tmp_path / "audit.log"))
    client = TestClient(create_app(settings, state=CampusState()), follow_redirects=False)  # type: ignore[arg-type]
    _log_in(client, "rob")
    response = client.get("/topics/mcq.logins?partition=1&offset=7&key=zz")
    assert response.status_code == 200, response.text
    entry = json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])
    assert (entry["who"], entry["role"], entry["action"]) == ("rob", "read", "read records")
    assert entry["target"] == "mcq.logins[1]@7 key~zz"
