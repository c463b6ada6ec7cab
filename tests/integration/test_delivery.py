"""Delivery correctness on the real stack: a listener's target ends equal to the source's
last state for everything it is interested in — after compaction removed the DELETE
records it never saw, when rows move in and out of its content rule, and under retries
across two instances. Expected states are computed from the produced change list, never
from the code under test."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from consumers.runtime.listener import ListenerRuntime
from mcq.change import Change
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import (
    World,
    change,
    expected_state,
    make_world,
    produce,
    running,
    target_state,
    wait_for,
)
from tests.integration.compaction import compact_now, wait_compacted
from tests.integration.webhook_server import replay

CAMPUS = "+1-518-"


def _catch_up(w: World, registry: Any = None) -> ListenerRuntime:
    runtime = ListenerRuntime(w.settings, w.name, registry=registry or w.registry, http_port=None)
    assert runtime.run(until_caught_up=True) == 0
    return runtime


@pytest.mark.timeout(600)
def test_a_lagging_listener_removes_keys_whose_delete_records_compaction_removed(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    # a second view of the same topic: only campus numbers (a rule on a non-key column)
    ruled = parse_registry(
        w.registry_file.read_text().replace(
            "- {listener: T, tname: PHONE}", f"- {{listener: T, tname: PHONE, rule: \"phone LIKE '{CAMPUS}%'\"}}"
        ),
        str(w.registry_file),
    )
    first = [change("PHONE", pid, f"{CAMPUS}{pid:07d}", "INSERT") for pid in range(60)]
    produce(w.settings, w.phone_topic, first)
    _catch_up(w)  # the daily run: everything is at the target
    assert target_state(w.settings, w.table) == expected_state(first)

    # the listener is away: deletes, and rows leaving the campus range, then touched again
    compact_now(w.settings, w.phone_topic)
    later = [change("PHONE", pid, None, "DELETE") for pid in range(20)]
    later += [change("PHONE", pid, f"+44-20-{pid:07d}", "UPDATE") for pid in range(20, 30)]
    later += [change("PHONE", pid, f"+44-20-{pid + 1:07d}", "UPDATE") for pid in range(20, 30)]
    produce(w.settings, w.phone_topic, later)
    wait_compacted(w, 10_000, deleted=20)

    # nothing left in the topic says "DELETE" for them: only tombstones
    _catch_up(w, ruled)
    everything = first + later
    want = {
        k: v
        for k, v in expected_state(everything).items()
        if (v.get("phone") or "").startswith(CAMPUS)  # the listener's view: its rule over the last state
    }
    assert target_state(w.settings, w.table) == want


class _Hook(BaseHTTPRequestHandler):
    """A webhook target that answers 503 to each key's first two calls, 400 with hostile
    text for the keys it refuses, and logs every accepted change in arrival order."""

    calls: dict[str, int]
    accepted: list[dict[str, Any]]
    refuse: set[int]
    lock: threading.Lock
    HOSTILE = b"[/bold] [red]x[/red] \x1b[31mred\x1b[0m \xff\xfe not utf-8 " + b"A" * (1024 * 1024)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = body["idempotency_key"].split("@")[0]
        with self.lock:
            self.calls[key] = self.calls.get(key, 0) + 1
            n = self.calls[key]
            if body["person_id"] in self.refuse:
                status, payload = 400, self.HOSTILE
            elif n <= 2:
                status, payload = 503, b"try later"
            else:
                status, payload = 200, b"{}"
                self.accepted.append(body)
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, type[_Hook]]]:
    handler = type("Hook", (_Hook,), {"calls": {}, "accepted": [], "refuse": set(), "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/changes", handler
    server.shutdown()


def _workload(seed: int, keys: int, n: int) -> list[Change]:
    """Updates, deletes and key moves (the old key's DELETE and the new key's INSERT)."""
    rnd = random.Random(seed)
    live: dict[int, str] = {}
    out: list[Change] = []
    for i in range(n):
        pid = rnd.randrange(keys)
        roll = rnd.random()
        if pid in live and roll < 0.15:
            out.append(change("PHONE", pid, None, "DELETE", tele=live.pop(pid)))
        elif pid in live and roll < 0.3:  # the key moves: tele_type is a key column
            old = live[pid]
            new = "mobile" if old == "office" else "office"
            out.append(change("PHONE", pid, None, "DELETE", tele=old))
            out.append(change("PHONE", pid, f"{CAMPUS}{i:07d}", "INSERT", tele=new))
            live[pid] = new
        else:
            tele = live.get(pid, "office")
            out.append(change("PHONE", pid, f"{CAMPUS}{i:07d}", "UPDATE" if pid in live else "INSERT", tele=tele))
            live[pid] = tele
    return out


@pytest.mark.timeout(600)
def test_retries_keep_per_key_order_across_two_instances_and_hostile_errors_are_dead_lettered(
    stack: Stack, settings: Settings, token: str, tmp_path: Path, hook: tuple[str, type[_Hook]]
) -> None:
    url, handler = hook
    w = make_world(settings, token, tmp_path)
    text = w.registry_file.read_text()
    start = text.index("    adapter: {type: table")
    end = text.index("\n", start)
    text = text[:start] + f'    adapter: {{type: webhook, settings: {{url: "{url}", timeout_s: 5}}}}' + text[end:]
    registry = parse_registry(text, str(w.registry_file))
    handler.refuse = {900, 901, 902}
    changes = _workload(seed=11, keys=40, n=400)
    hostile = [change("PHONE", pid, "x", "INSERT") for pid in sorted(handler.refuse)]
    with running(w, registry=registry, http_port=None) as one, running(w, registry=registry, http_port=None) as two:
        produce(w.settings, w.phone_topic, changes[:200] + hostile)
        time.sleep(2)  # both instances are in the middle of it when the rest arrives
        produce(w.settings, w.phone_topic, changes[200:])
        want = expected_state(changes)

        def converged() -> bool:
            with handler.lock:
                accepted = list(handler.accepted)
            return replay(accepted) == want and one.counters.dead_lettered + two.counters.dead_lettered == len(hostile)

        wait_for("every key to equal the source at the webhook", converged, 300, every=1.0)

    # the target's log: no key ever got an older state after a newer one, nor came back after its delete
    last: dict[str, tuple[int, int, str]] = {}
    for body in handler.accepted:
        key = body["idempotency_key"].split("@")[0]
        pos = (body["position"]["last_commit_lsn"], body["position"]["lsn"], body["change_type"])
        if key in last:
            assert pos[:2] > last[key][:2], f"{key}: {pos} arrived after {last[key]}"
        last[key] = pos
    # and the hostile answers are in the dead letters, the listener still ran to the end
    from consumers.runtime.dlq import DeadLetters

    letters = DeadLetters(w.settings, w.name)
    dead = letters.entries()
    assert sorted((letters.decoded(d) or {}).get("person_id") for d in dead) == sorted(handler.refuse)
    assert all("[/bold]" in d.error and "HTTP 400" in d.error for d in dead)


def _with_interest(w: World, interest: str, adapter: str | None = None) -> Any:
    text = w.registry_file.read_text().replace("- {listener: T, tname: PHONE}", interest)
    if adapter is not None:
        start = text.index("    adapter: {type: table")
        text = text[:start] + adapter + text[text.index("\n", start) :]
    return parse_registry(text, str(w.registry_file))


@pytest.mark.timeout(300)
def test_a_delayed_interest_applies_a_change_only_after_its_delay_and_soon_after(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    registry = _with_interest(w, "- {listener: T, tname: PHONE, delay_s: 5}")
    with running(w, registry=registry, http_port=None) as rt:
        wait_for("the listener to take its partitions", rt.ready, 60)
        first = change("PHONE", 1, "+1-518-0000001", "INSERT")
        produce(w.settings, w.phone_topic, [first])
        committed = first.entry_time.timestamp()
        # a newer change of the key during the delay supersedes the older one
        time.sleep(1)
        second = change("PHONE", 1, "+1-518-0000002", "UPDATE")
        produce(w.settings, w.phone_topic, [second])
        while time.time() < committed + 4.5:
            assert target_state(w.settings, w.table) == {}, "applied before its delay"
            time.sleep(0.2)
        wait_for("the delayed change", lambda: bool(target_state(w.settings, w.table)), 30, every=0.1)
        assert time.time() - (second.entry_time.timestamp() + 5) < 2.0
        assert target_state(w.settings, w.table) == {second.key.text(): second.after}
        assert rt.counters.superseded >= 1


@pytest.mark.timeout(300)
def test_a_change_not_applied_before_it_expires_goes_to_the_dead_letters_as_expired(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    from consumers.runtime.dlq import DeadLetters
    from consumers.runtime.parking import H_ERROR_KIND

    w = make_world(settings, token, tmp_path)
    import socket

    with socket.socket() as s:  # a port nobody listens on: the target is unreachable
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = _with_interest(
        w,
        "- {listener: T, tname: PHONE, expire_after_s: 3}",
        f'    adapter: {{type: webhook, settings: {{url: "http://127.0.0.1:{port}/x", timeout_s: 1}}}}',
    )
    with running(w, registry=registry, http_port=None) as rt:
        produce(w.settings, w.phone_topic, [change("PHONE", 1, "+1-518-0000001", "INSERT")])
        wait_for("the change to expire", lambda: rt.counters.dead_lettered == 1, 60)
    dead = DeadLetters(w.settings, w.name).entries()
    assert [d.headers[H_ERROR_KIND] for d in dead] == ["expired"]
    assert "expired: not applied within 3 s" in dead[0].error
