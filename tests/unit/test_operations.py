"""What an operator relies on without reading code: status alerts on dead letters, work
items never expire by age, a listener's health endpoint stays local and names a taken
port."""

from __future__ import annotations

import socket

import pytest

from consumers.runtime.health import HealthAddressTaken, HealthServer, ListenerMetrics
from consumers.runtime.status import ListenerStatus
from mcq.cli.app import DEFAULT_HTTP_PORT, NORMALIZE_HTTP_PORT, _health_port
from mcq.registry.model import Delivery
from mcq.topics.listener import ListenerTopics
from mcq.topics.plan import REFRESH_CONFIG


def _status(dead_letters: int, threshold: int | None, verdict: str = "OK") -> ListenerStatus:
    return ListenerStatus(
        "Insite",
        "realtime",
        verdict,
        "",
        counters={"failed": 7},
        dead_letters=dead_letters,
        alert_after_dead_letters=threshold,
    )


def test_status_alerts_when_unresolved_dead_letters_reach_the_threshold() -> None:
    assert _status(2, 3).dead_letter_alert is None and not _status(2, 3).failing
    alert = _status(3, 3).dead_letter_alert
    assert alert == "listener Insite: 3 unresolved dead letter(s), alert threshold 3; inspect with: mcq dlq list Insite"
    assert _status(3, 3).failing and _status(4, 3).failing
    assert _status(10**6, None).dead_letter_alert is None  # null: shown, never alerted
    assert _status(1, 3).failed == 7


def test_a_single_dead_letter_alerts_by_default() -> None:
    assert Delivery().alert_after_dead_letters == 1
    with pytest.raises(ValueError):
        Delivery(alert_after_dead_letters=0)
    assert Delivery(alert_after_dead_letters=None).alert_after_dead_letters is None


def test_work_item_topics_never_expire_by_age_or_size() -> None:
    topics = ListenerTopics("mcq", "LDAP")
    work = {topics.retry, topics.bulk, topics.dlq}
    for spec in topics.specs():
        if spec.name in work:
            assert spec.config["retention.ms"] == "-1" and spec.config.get("retention.bytes", "-1") == "-1", spec
    assert REFRESH_CONFIG["retention.ms"] == "-1" and REFRESH_CONFIG["cleanup.policy"] == "delete"


def test_health_endpoint_on_a_taken_port_names_the_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(HealthAddressTaken) as err:
            HealthServer("127.0.0.1", port, lambda: True, lambda: True, ListenerMetrics("T").registry)
    assert str(err.value) == f"health endpoint 127.0.0.1:{port}: port {port} is already in use by another process"


def test_the_health_endpoint_serves_its_documents_as_json_and_404_for_anything_else() -> None:
    import httpx

    runs = [{"name": "mcq-normalize-realtime raw.t", "run_id": "r1", "started": "2026-12-02T11:00:00.000+00:00"}]
    server = HealthServer(
        "127.0.0.1", 0, lambda: True, lambda: True, ListenerMetrics("T").registry, {"/queries": lambda: runs}
    )
    server.start()
    try:
        answer = httpx.get(server.address + "/queries", timeout=5)
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        assert answer.json() == runs
        assert httpx.get(server.address + "/nothing", timeout=5).status_code == 404
    finally:
        server.stop()


def test_catch_up_runs_serve_health_only_when_a_port_is_given() -> None:
    assert _health_port(None, no_http=False, one_off=False) == DEFAULT_HTTP_PORT
    assert _health_port(None, no_http=False, one_off=True) is None
    assert _health_port(0, no_http=False, one_off=True) == 0
    assert _health_port(9000, no_http=True, one_off=False) is None
    assert _health_port(None, no_http=False, one_off=False, default=NORMALIZE_HTTP_PORT) == NORMALIZE_HTTP_PORT


def test_listen_binds_the_health_endpoint_to_loopback_by_default() -> None:
    from mcq.cli.listen import listen

    [host] = [p for p in listen.params if p.name == "http_host"]
    assert host.default == "127.0.0.1"


def test_cli_output_to_a_pipe_is_not_cut_to_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcq.output import PIPED_WIDTH, cli_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli_console().width == PIPED_WIDTH  # pytest's captured stdout is no terminal
    monkeypatch.setenv("COLUMNS", "100")
    assert cli_console().width == 100  # what the user asked for
