"""Hand-over: a second normaliser of one checkpoint takes over from the running one
without a stall of its start-up, a gap or a duplicate (a deploy, a rolling update).

The running instance holds a lease in the checkpoint directory, beaten every second
(``streams/handover_lease.py``). A new instance that finds a live lease starts Spark and
its real-time queries on a copy of the real-time checkpoint, every record held at a gate
(``streams/handover_gate.py``); once every task runs, it asks. The old instance answers
from a thread of its own: it closes its gate for good, waits until Kafka acknowledged
every record that passed it, and answers with the fences its gate recorded (per raw
partition and output topic, the highest raw offset it wrote and the keys at that offset).
The new instance opens its gate with them, so a record the old one wrote is not written
again, and makes its copy the current checkpoint.

Fallbacks: with a micro-batch (ordered) query, or when the acknowledgements do not arrive
within a second, the old instance's loop stops its queries and closes Spark's pooled
producers, which sends what they hold (``give_over``); the new one then reads the fences
from the output topics' tails (every record carries ``mcq.raw``: its raw topic, partition
and offset). With executors of their own (a cluster master) there is no gate and the
producers are not the driver's to close: the new instance starts without fences and may
write the old one's last records again (a compacted topic, applied idempotently, absorbs
them).

A lease that is not beaten for ``LEASE_S`` (or whose process is gone, on this host) is
a crash: the new instance resumes from the checkpoint at once, fenced by what landed in
the output topics (``read_landed``: what the crashed one's producer lost is written
again, what landed is not).

While held, the queries follow the running instance (``streams/handover_follow.py``): a
reader of the output topics tells the gate what landed, and a held record it covers is
dropped at once. A new instance asks once they are near the running one, so its take-over
has little left to do and its code is warm.

A standby (``standby``) starts the same way but does not ask: it waits, its queries held
at the gate and following, until the running instance's lease goes (a crash, a stop), then
takes over as from a crash, fenced by what its follower saw land. Should the follower fail,
every ``rehold_s`` it starts its held queries again on a fresh copy of the checkpoint, so
what it reads again at a take-over stays a few minutes' worth."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams.handover_follow import LandedFollower, near
from streams.handover_gate import close_for_good, fence_lines, flush_producers, gate_of, read_fences, read_landed
from streams.handover_lease import (
    Lease,
    alive,
    answer,
    ask,
    asked,
    claim,
    copy_checkpoint,
    holder,
    make_current,
    new_instance,
    wait_answer,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from mcq.config import Settings

ASK_POLL_S = 0.05
TAIL_MARGIN_MS = 30_000
"""Read the output topics' tails from this long before the old instance's oldest batch
in flight began (clocks of two hosts, a record's create time)."""
REHOLD_S = 300.0
"""A standby's held queries start again on a fresh copy of the checkpoint this often."""
EXIT_WAIT_S = 30.0
"""A stopped instance of this host whose process still runs (its producers closing) is
waited for this long before its output topics' tails are read."""


@dataclasses.dataclass
class HandOver:
    """One normaliser instance's part in hand-overs: the lease it holds, the instance it
    takes over from, the one it handed over to."""

    checkpoint: Path
    idle: bool = False
    """After a hand-over, stay up (not ready) until stopped rather than end."""
    me: dict[str, Any] = dataclasses.field(default_factory=new_instance)
    lease: Lease = dataclasses.field(init=False)
    taking_over: dict[str, Any] | None = None
    """The running instance found at start, until it answered."""
    answered: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set once ``watch`` answered an ask: the queries, held at the gate, are to stop."""
    asked_by: dict[str, Any] | None = None
    """An ask ``watch`` left to the driver's loop (``give_over``)."""
    _unwatch: threading.Event | None = None
    copy: Path | None = None
    """The checkpoint copy the take-over's queries run on (``hold``)."""
    copy_since_ms: int = 0
    handed_to: str | None = None
    standby: bool = False
    """Started beside a running instance: wait for its lease to go instead of asking."""
    rehold_s: float = REHOLD_S
    held_at: float = 0.0
    """When ``hold`` last copied the checkpoint (monotonic)."""
    follower: LandedFollower | None = None
    """What the running instance lands, told to the gate while the queries are held."""

    def __post_init__(self) -> None:
        self.lease = Lease(self.checkpoint, self.me)
        self.taking_over = holder(self.checkpoint, self.me)

    def who(self, instance: dict[str, Any]) -> str:
        return f"{instance.get('id')} (pid {instance.get('pid')} on {instance.get('host')})"

    def hold(self, spark: SparkSession, settings: Settings | None = None, topics: list[str] | None = None) -> Path:
        """Before the take-over: close the gate and copy the checkpoint the queries then
        start from, held at the gate (returns the copy's directory). With ``settings``,
        follow what the running instance lands in ``topics`` (every topic the queries
        write), so the held queries drop it as they reach it (``streams/handover_follow.py``)."""
        gate = gate_of(spark)
        gate.close()
        self.unfollow()
        if self.copy is not None:  # a standby's earlier copy: its queries have stopped
            shutil.rmtree(self.copy, ignore_errors=True)
        self.copy, self.copy_since_ms = copy_checkpoint(self.checkpoint)
        self.held_at = time.monotonic()
        if settings is not None and topics is not None:
            since_ms = self.copy_since_ms - TAIL_MARGIN_MS
            copied_ms = int(time.time() * 1000)
            self.follower = LandedFollower(settings, topics, since_ms, gate.landed, copied_ms).start()
        return self.copy

    def unfollow(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    def stand_by_again(self) -> None:
        """After handing over (a standby asked by a restarted instance): stand by for it."""
        self.lease = Lease(self.checkpoint, self.me)
        self.answered.clear()
        self.asked_by = None
        self.copy = None
        self.handed_to = None
        self.taking_over = holder(self.checkpoint, self.me)
        if self.taking_over is not None:
            log.info(f"normalize: handed over; standing by again for {self.who(self.taking_over)}")

    def stand_by(
        self, stopped: Callable[[], bool], rehold: Callable[[], None] | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        """Wait until no other instance holds the lease (``taking_over`` crashed or
        stopped); every ``rehold_s`` meanwhile, ``rehold`` starts the held queries again on
        a fresh copy (``hold``). ``waiting``: called at every look (the liveness a health
        endpoint reports: a standby waits for hours)."""
        old = self.taking_over
        assert old is not None
        log.info(
            f"normalize: standing by for {self.who(old)}, its queries held at the gate: takes over when its "
            f"lease goes (a crash, a stop)"
        )
        while not stopped():
            if waiting is not None:
                waiting()
            now = holder(self.checkpoint, self.me)
            if now is None and claim(self.checkpoint, self.me, old):
                break
            if now is None:  # another standby claimed it: stand by for it once it holds the lease
                time.sleep(ASK_POLL_S)
                continue
            if now.get("id") != old.get("id"):  # another took over meanwhile: stand by for it
                old = self.taking_over = now
                log.info(f"normalize: standing by for {self.who(old)}")
            if rehold is not None and time.monotonic() - self.held_at >= self.rehold_s:
                if self.follower is not None and self.follower.alive:
                    self.held_at = time.monotonic()  # the held queries follow: their copy is current
                else:
                    rehold()
            time.sleep(ASK_POLL_S)
        if stopped():
            return
        pid, mine = old.get("pid"), old.get("host") == self.me["host"]
        deadline = time.monotonic() + EXIT_WAIT_S
        while mine and alive(pid) and time.monotonic() < deadline and not stopped():
            time.sleep(ASK_POLL_S)  # a clean stop: its producers send what they hold as it exits

    def take_over(
        self, settings: Settings, topics: list[str], stopped: Callable[[], bool],
        spark: SparkSession | None = None, rehold: Callable[[], None] | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        """Ask the running instance to hand over, wait for its answer and hold the lease.
        ``spark``: the queries started from ``hold``'s copy wait at the gate, which opens
        with the fences of what the old instance wrote (``topics``: every topic they
        write). Without: nothing runs on the checkpoint yet. A ``standby`` does not ask:
        it waits for the lease to go (``stand_by``; ``rehold``: start the held queries
        again on a fresh copy, unless they follow; ``waiting``: called as it waits).
        After a crash the fences are what the follower saw land (``hold``), or, when it
        cannot say, what the output topics' tails hold."""
        old = self.taking_over
        if old is None:
            self.lease.hold()
            return
        began = time.monotonic()
        if self.standby:
            self.stand_by(stopped, rehold, waiting)
            old = self.taking_over or old
            began = time.monotonic()
            done = None
        else:
            if spark is not None and self.follower is not None:  # then the take-over has little left to do
                near(self.follower, gate_of(spark), stopped)
                began = time.monotonic()
            log.info(f"normalize: started beside {self.who(old)}: asking it to hand over")
            ask(self.checkpoint, self.me)
            done = wait_answer(self.checkpoint, self.me, old, stopped)
        self.taking_over = None
        if stopped():
            self.unfollow()
            if self.copy is not None:
                shutil.rmtree(self.copy, ignore_errors=True)
            return
        self.lease.hold()
        waited = time.monotonic() - began
        fences = ""
        if done is None and spark is not None and self.copy is not None:
            followed = self.follower.fences() if self.follower is not None else None
            fences = followed if followed is not None else read_landed(
                settings, topics, self.copy_since_ms - TAIL_MARGIN_MS
            )  # fmt: skip
            log.warning(
                f"normalize: {self.who(old)} {'is gone' if self.standby else 'stopped beating its lease'}: took "
                f"over {time.monotonic() - began:.2f} s later from its checkpoint; what landed of what it wrote "
                f"since is not written again ({fences.count(chr(10))} fences by raw and output partition, "
                f"{'followed' if followed is not None else 'read'} from the topics), what its producer lost is"
            )
        elif done is None:
            log.warning(f"normalize: {self.who(old)} stopped beating its lease: resuming from the checkpoint")
        elif spark is None or self.copy is None or not done.get("flushed"):
            log.info(
                f"normalize: took over from {self.who(old)} after {waited:.1f} s; it may have written its last "
                "records before its checkpoint: they may come again"
            )
        elif done.get("fences") is not None:  # its gate counted what it wrote
            fences = str(done["fences"])
            log.info(
                f"normalize: took over from {self.who(old)} after {waited:.2f} s; what it wrote after its last "
                f"checkpoint is not written again ({fences.count(chr(10))} raw partition/topic fences, its gate's)"
            )
        else:
            since = min(int(done["since_ms"]), self.copy_since_ms) - TAIL_MARGIN_MS
            fences = fence_lines(read_fences(settings, topics, since))
            log.info(
                f"normalize: took over from {self.who(old)} after {waited:.2f} s; what it wrote after its last "
                f"checkpoint is not written again ({fences.count(chr(10))} raw partition/topic fences, read from "
                f"the topics in {time.monotonic() - began - waited:.1f} s)"
            )
        self.unfollow()
        if spark is not None and self.copy is not None:
            make_current(self.checkpoint, self.copy)
            gate_of(spark).open(fences)

    def give_over(
        self, to: dict[str, Any], spark: SparkSession, queries: list[Any], realtime: Callable[[Any], bool],
        stop_all: Callable[[list[Any]], None], started: dict[str, int],
        fallback_ms: int, gate: bool,
    ) -> None:  # fmt: skip
        """Stop writing for ``to``, then answer: a micro-batch query stops between two
        batches (a batch it wrote is then committed); the real-time ones' gate closes for
        good and Kafka acknowledges the records that passed it (``gate``; else, or when
        they are not within a second, the queries stop and the producers close, sending
        what they hold).
        The answer says when the oldest batch in flight began (``started``: each run's
        start, by run id, in ms; ``fallback_ms``: how long a batch may last, for a run not
        known there). The real-time queries stop after it."""
        began = time.monotonic()
        log.info(f"normalize: handing over to {self.who(to)}")
        for query in [q for q in queries if not realtime(q)]:
            deadline = time.monotonic() + 60
            while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.02)
            query.stop()
        running = [q for q in queries if realtime(q)]
        progress = {str(q.runId): q.lastProgress for q in running}
        closed, fences = close_for_good(spark) if gate else (False, None)
        if not closed:
            stop_all(running)
        flushed = flush_producers(spark)
        stopped_ms = int(time.time() * 1000)
        since_ms = stopped_ms - fallback_ms
        for run_id, last in progress.items():  # its batch in flight began when its last one did, or later
            begun = started.get(run_id)
            with contextlib.suppress(KeyError, TypeError, ValueError):
                begun = int(datetime.fromisoformat(last["timestamp"]).timestamp() * 1000)
            since_ms = since_ms if begun is None else min(since_ms, begun)
        answer(self.checkpoint, self.me, to, since_ms, flushed, fences)  # then the lease: no gap for a crash to show in
        self.lease.release()
        self.handed_to = str(to.get("id"))
        how = (
            "its gate closed, every record it let through acknowledged"
            if closed
            else f"its queries stopped{'' if not gate else f'; {gate_of(spark).passing()} records unacknowledged'}"
        )
        log.info(f"normalize: handed over to {self.who(to)} in {time.monotonic() - began:.2f} s ({how})")
        if closed:
            stop_all(running)  # held at the gate: nothing they do is written any more
        queries.clear()

    def watch(self, spark: SparkSession | None, ordered: Callable[[], bool]) -> None:
        """Look for an ask every ``ASK_POLL_S`` in a thread of its own. With the gate
        (``spark``) and no micro-batch query (``ordered``), answer it there: close the gate
        for good, wait until Kafka acknowledged what passed it, answer with what that was
        (``answered``). Otherwise, or when that does not hold within a second, leave it to
        the driver's loop (``asked_by``: ``give_over``)."""

        stop = self._unwatch = threading.Event()

        def run() -> None:
            while self.handed_to is None and not stop.is_set():
                to = asked(self.checkpoint, self.me)
                if to is None:
                    stop.wait(ASK_POLL_S)
                    continue
                began = time.monotonic()
                if spark is not None and not ordered():
                    log.info(f"normalize: handing over to {self.who(to)}")
                    _, fences = close_for_good(spark)
                    if fences is not None:  # all it let through is in Kafka
                        answer(self.checkpoint, self.me, to, int(time.time() * 1000), True, fences)
                        self.lease.release()
                        self.handed_to = str(to.get("id"))
                        log.info(
                            f"normalize: handed over to {self.who(to)} in {time.monotonic() - began:.2f} s (its "
                            "gate closed, every record it let through acknowledged)"
                        )
                        self.answered.set()
                        return
                self.asked_by = to
                return

        threading.Thread(target=run, name="mcq-normalize-handover", daemon=True).start()

    def unwatch(self) -> None:
        """Stop ``watch``'s thread (the queries it watched for are stopping)."""
        if self._unwatch is not None:
            self._unwatch.set()
