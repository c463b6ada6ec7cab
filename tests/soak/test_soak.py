"""``make soak MINUTES=30`` (issue 16; never in CI): the chaos test's pipeline -- a user's
table captured by Debezium, the normaliser and a rule-filtered ``table`` listener as the
processes a user runs -- under a steady change load, while a chaos loop kills (SIGKILL)
and restarts a random component every 1-3 minutes: the listener, the normaliser, Kafka
Connect, the broker, or PostgreSQL (the source and the target's database). A clock row
written every second measures the end-to-end lag (commit in the source -> row in the
target) all along. At the end the verifier of the fault tests: the target equals the
source's last state, key by key, nothing dead-lettered; then one summary: faults
injected, changes committed and applied, duplicates, and the largest lag."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from mcq.capture.apply import apply_capture
from mcq.change import ChangeKey
from mcq.config import Settings
from mcq.registry import parse_registry
from mcq.stack import Stack
from mcq.testing.listeners import target_state
from mcq.testing.worlds import wait_slot_active
from tests.integration.pipeline import Accounts, Proc, Workload, accounts, kill_and_restart

MINUTES = float(os.environ.get("MCQ_SOAK_MINUTES", "30"))
EVERY_S = tuple(float(x) for x in os.environ.get("MCQ_SOAK_FAULT_EVERY_S", "60-180").split("-"))
VICTIMS = os.environ.get("MCQ_SOAK_VICTIMS", "listen,delayed,normalize,connect,kafka,postgres").split(",")
DELAYED = "Delayed"
DELAY_S = 5
REFUSED = 0.02  # the delayed listener's target refuses this share of its statements
CONVERGE_S = 900
CLOCK = -1  # the clock row's id (the workload leaves ids < 0 alone)
ROWS = 300

pytestmark = [pytest.mark.integration, pytest.mark.soak]


class Clock:
    """Writes the time into the clock row every second; reads how old the target's copy is
    (after ``stop_writing``, while it is older than the last time written: until the
    pipeline has caught up with the end of the load)."""

    def __init__(self, settings: Settings, schema: str, target: str) -> None:
        self.settings, self.schema, self.target = settings, schema, target
        self.stopping = threading.Event()
        self.writing = threading.Event()
        self.writing.set()
        self.last_written = 0.0
        self.lags: list[float] = []
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._write, self._read)]

    def _write(self) -> None:
        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.settings.source.dsn(), autocommit=True, connect_timeout=3) as conn:
                    while not self.stopping.wait(1.0) and self.writing.is_set():
                        now = time.time()
                        conn.execute(
                            f"INSERT INTO {self.schema}.accounts VALUES ({CLOCK}, %s, 'active', 0) "
                            "ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner",
                            (f"{now:.3f}",),
                        )
                        self.last_written = now
                    if not self.writing.is_set():
                        return
            except psycopg.OperationalError:
                self.stopping.wait(0.5)

    def _read(self) -> None:
        key = ChangeKey("ACCOUNT", pkey_number=CLOCK).text()
        while not self.stopping.wait(2.0):
            try:
                with psycopg.connect(self.settings.vendor.dsn(), connect_timeout=3) as conn:
                    row = conn.execute(f"SELECT state FROM {self.target} WHERE change_key = %s", (key,)).fetchone()
            except psycopg.Error:
                continue  # the database is down: its lag is measured once it is back
            if row and row[0]:
                seen = float(row[0]["owner"])
                if self.writing.is_set() or seen < self.last_written:
                    self.lags.append(time.time() - seen)

    def stop_writing(self) -> None:
        self.writing.clear()
        self._threads[0].join(30)

    def __enter__(self) -> Clock:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for t in self._threads:
            t.join(30)


@pytest.mark.timeout(int(MINUTES * 60) + CONVERGE_S + 900)
def test_soak_the_pipeline_under_load_while_a_random_component_is_killed_every_few_minutes(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    rnd = random.Random(int(os.environ.get("MCQ_SOAK_SEED", "16")))
    with accounts(settings, tmp_path, "soak", ROWS, seed=rnd.randrange(10**6)) as w:
        _soak(stack, _with_delayed(w), tmp_path, rnd)


def _with_delayed(w: Accounts) -> Accounts:
    """The world's registry with a second listener: every ACCOUNT change, DELAY_S late."""
    text = w.registry_file.read_text()
    listener = (
        f"  - name: {DELAYED}\n    owner: tests@example\n"
        f"    adapter: {{type: table, settings: {{table: {w.schema}.delayed}}}}\n"
    )
    text = text.replace("interests:\n", listener + "interests:\n", 1)
    text += f"  - {{listener: {DELAYED}, tname: ACCOUNT, delay_s: {DELAY_S}}}\n"
    w.registry_file.write_text(text)
    return dataclasses.replace(w, registry=parse_registry(text, str(w.registry_file)))


def _refuse_some(s: Settings, table: str) -> None:
    """The target refuses REFUSED of its statements (a flaky directory, a busy database)."""
    with psycopg.connect(s.vendor.dsn(), autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION {table}_flaky() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF random() < {REFUSED} THEN RAISE EXCEPTION 'soak: the target refuses this time'; END IF; "
            "RETURN NULL; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER flaky BEFORE INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_flaky()"
        )


def _soak(stack: Stack, w: Accounts, tmp_path: Path, rnd: random.Random) -> None:
    s, schema, target = w.settings, w.schema, w.target
    delayed = dataclasses.replace(w, listener=DELAYED, target=f"{schema}.delayed", rule=None)
    procs = {
        "normalize": Proc(["streams", "normalize", "--http-port", "0",
                           "--registry", str(w.registry_file), "--checkpoint-interval",
                           "10 seconds", "--checkpoint", str(tmp_path / "ckpt")], w.env, tmp_path / "normalize.log"),
        "listen": Proc(["listen", w.listener, "--registry", str(w.registry_file), "--http-port", "0"], w.env,
                       tmp_path / "listen.log"),
        "delayed": Proc(["listen", DELAYED, "--registry", str(w.registry_file), "--http-port", "0"], w.env,
                        tmp_path / "delayed.log"),
    }  # fmt: skip
    faults: Counter[str] = Counter()
    notes: list[str] = []
    started = time.monotonic()
    try:
        apply_capture(w.registry, s)
        wait_slot_active(s, w.slot)
        for p in procs.values():
            p.start()
        deadline = time.monotonic() + 300
        while not (target_state(s, target) and target_state(s, delayed.target)):
            for p in procs.values():
                p.running()
            assert time.monotonic() < deadline, f"nothing reached {target} and {delayed.target} in 300 s"
            time.sleep(2)
        _refuse_some(s, delayed.target)
        workload = Workload(s, schema, seed=rnd.randrange(10**6), next_id=ROWS)
        with workload.running(), Clock(s, schema, target) as clock:
            end = time.monotonic() + MINUTES * 60
            while (now := time.monotonic()) < end:
                time.sleep(min(rnd.uniform(*EVERY_S), max(0.0, end - now)))
                if time.monotonic() >= end:
                    break
                victim = rnd.choice(VICTIMS)
                at = time.monotonic() - started
                if victim in procs:
                    procs[victim].kill(listener=victim != "normalize")
                    time.sleep(3)
                    procs[victim].start()
                    notes.append(f"{at / 60:.1f} min: {victim} SIGKILLed and started again")
                else:
                    kill_and_restart(stack, victim, notes)
                    notes[-1] = f"{at / 60:.1f} min: {notes[-1]}"
                faults[victim] += 1
                print(notes[-1], flush=True)
                for p in procs.values():
                    p.running()
            workload.stopping.set()
            clock.stop_writing()
            load_ended = time.monotonic()
            for world in (w, delayed):
                expected = world.source_view()
                while (got := target_state(s, world.target)) != expected:
                    for p in procs.values():
                        p.running()
                    if time.monotonic() > load_ended + CONVERGE_S:
                        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
                        different = [k for k in expected.keys() & got.keys() if expected[k] != got[k]]
                        raise AssertionError(f"{world.listener}: {len(missing)} missing, {len(extra)} extra, "
                                             f"{len(different)} different after {notes}")  # fmt: skip
                    time.sleep(1)
            converged_s = time.monotonic() - load_ended
        counted = procs["listen"].counted + procs["listen"].metrics()
        assert counted["dead_lettered"] == 0, procs["listen"].log.read_text()[-3000:]
        late = procs["delayed"].counted + procs["delayed"].metrics()
        assert late["dead_lettered"] == 0, procs["delayed"].log.read_text()[-3000:]
        lags = sorted(clock.lags)
        summary = {
            "minutes": MINUTES,
            "faults": dict(faults),
            "changes_committed": workload.committed,
            "workload_connection_losses": workload.failures,
            "target_rows": len(w.source_view()),
            "applied": counted["applied"],
            "duplicates_skipped": counted["skipped"],
            "failed_attempts": counted["failed"],
            "dead_lettered": counted["dead_lettered"],
            "lag_p50_s": round(lags[len(lags) // 2], 2) if lags else None,
            "lag_p99_s": round(lags[int(len(lags) * 0.99)], 2) if lags else None,
            "lag_max_s": round(lags[-1], 2) if lags else None,
            "converged_after_load_s": round(converged_s, 1),
            "delayed_target_rows": len(delayed.source_view()),
            "delayed_applied": late["applied"],
            "delayed_duplicates_skipped": late["skipped"],
            "delayed_failed_attempts": late["failed"],
            "delayed_dead_lettered": late["dead_lettered"],
        }
        print("\n".join(["soak faults:", *notes, "soak summary: " + json.dumps(summary)]))
        (tmp_path / "soak-summary.json").write_text(json.dumps({**summary, "faults_log": notes}, indent=2))
    finally:
        for p in procs.values():
            p.stop()
        stack.up()  # whatever a failed restart left down
