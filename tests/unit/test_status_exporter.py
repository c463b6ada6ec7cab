"""``mcq status --serve``: the gauges say what ``mcq status`` exits 1 for, listener by listener."""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from consumers.runtime.status import ListenerStatus
from consumers.runtime.status_exporter import StatusGauges


def _sample(gauges: StatusGauges, name: str, labels: dict[str, str]) -> float | None:
    return gauges.registry.get_sample_value(name, labels)


def test_each_alert_mcq_status_raises_is_a_gauge_of_one_and_the_others_zero() -> None:
    gauges = StatusGauges()
    dead = ListenerStatus(name="LDAP", schedule="realtime", verdict="DEAD", reason="no live instance")
    full = ListenerStatus(name="Unity", schedule="*/3 * * * *", verdict="OK", reason="", dead_letters=5,
                          alert_after_dead_letters=3, tombstones_at_risk="deletes at risk")  # fmt: skip
    gauges.observe([dead, full])
    assert _sample(gauges, "mcq_status_alert", {"listener": "LDAP", "kind": "dead"}) == 1
    assert _sample(gauges, "mcq_status_alert", {"listener": "LDAP", "kind": "stuck"}) == 0
    assert _sample(gauges, "mcq_status_alert", {"listener": "Unity", "kind": "dead_letters"}) == 1
    assert _sample(gauges, "mcq_status_alert", {"listener": "Unity", "kind": "tombstones_at_risk"}) == 1
    assert _sample(gauges, "mcq_status_alert", {"listener": "Unity", "kind": "dead"}) == 0
    assert _sample(gauges, "mcq_status_dead_letters", {"listener": "Unity"}) == 5
    assert gauges.checked_once
    assert abs((_sample(gauges, "mcq_status_last_check_timestamp_seconds", {}) or 0) - time.time()) < 5


def test_a_listener_taken_out_of_the_registry_leaves_no_stale_alert() -> None:
    gauges = StatusGauges()
    gauges.observe([ListenerStatus(name="Old", schedule="realtime", verdict="DEAD", reason="gone")])
    gauges.observe([ListenerStatus(name="New", schedule="realtime", verdict="OK", reason="")])
    assert b'listener="Old"' not in generate_latest(gauges.registry)
    assert _sample(gauges, "mcq_status_alert", {"listener": "New", "kind": "dead"}) == 0


def test_before_the_first_check_the_exporter_is_not_ready() -> None:
    assert not StatusGauges().checked_once
