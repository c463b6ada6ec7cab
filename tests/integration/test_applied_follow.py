"""Two instances of one listener write applied positions to the same topic. Each passes
over the runs of records that are all its own writes (it holds them already) instead of
reading them back before every batch, yet reads every write of the other: after the
last refresh each holds what a whole read of the topic holds."""

from __future__ import annotations

import random
import time
from pathlib import Path

from confluent_kafka import Producer

from consumers.runtime.applied import AppliedPositions
from mcq.change import Position
from mcq.config import Settings
from mcq.stack import Stack
from mcq.testing.listeners import make_world
from mcq.topics.plan import apply_topics
from tests.support.applied import KEYS, Write, oracle, view_of


def _write(a: AppliedPositions, rnd: random.Random, n: int, clock: list[int]) -> list[Write]:
    """Random writes, each at a position no other write has (two instances never apply one
    change with two outcomes): keys entering and leaving the target, now and then parked."""
    done: list[Write] = []
    for _ in range(n):
        key = rnd.choice(KEYS)
        clock[0] += 10
        if rnd.random() < 0.1:
            a.mark_parked(key, Position(clock[0], 1))
            done.append(("park", key, Position(clock[0], 1), True))
        else:
            present = rnd.random() > 0.2
            a.record(key, Position(clock[0], 1), present)
            done.append(("applied", key, Position(clock[0], 1), present))
    return done


def _settled(positions: AppliedPositions, producer: Producer) -> None:
    """A batch's end as the runtime makes it: flushed (its delivery reports taken), then a
    moment for the follower's fetch to see the topic's new end, then the next batch's refresh."""
    assert producer.flush(30) == 0
    time.sleep(0.3)
    positions.refresh()


def test_an_instance_passes_over_its_own_writes_and_still_reads_every_write_of_the_other(
    stack: Stack, settings: Settings, token: str, tmp_path: Path
) -> None:
    w = make_world(settings, token, tmp_path)
    apply_topics(w.settings, w.topics.specs())
    config = {**w.settings.kafka.client_config(), "enable.idempotence": True}
    one_out, other_out = Producer(config), Producer(config)
    one = AppliedPositions(w.settings, w.topics.applied, one_out)
    other = AppliedPositions(w.settings, w.topics.applied, other_out)
    rnd, clock, writes, own = random.Random(5), [1000], [], 0
    one.catch_up()
    other.catch_up()
    try:
        for round_ in range(12):
            # mostly batches of its own alone (a listener alone in its group), now and then the other's
            before = one._follower.read
            batch = _write(one, rnd, 200, clock)
            writes += batch
            own += len(batch)
            _settled(one, one_out)
            if round_ % 4 == 3:
                writes += _write(other, rnd, 150, clock)
                _settled(other, other_out)
                _settled(one, one_out)
                assert one._follower.read > before  # the other's writes were read, not passed over
        # not every own write was read back: the runs of them alone were passed over
        assert one._follower.read < own / 2, (one._follower.read, own)
        one.catch_up()
        other.catch_up()
        whole = AppliedPositions(w.settings, w.topics.applied, one_out)
        whole.catch_up()
        try:
            want = oracle(writes)
            assert {text: v[:2] for text, v in view_of(whole).items() if v[0] is not None} == want
            assert view_of(one) == view_of(whole) and view_of(other) == view_of(whole)
        finally:
            whole.close(save=False)
    finally:
        one.close(save=False)
        other.close(save=False)
