"""Changes the normaliser withheld (``streams/normalize.py``: a large value left out of the
WAL, a TRUNCATE, a row lacking a key or captured column, a record it cannot read): what
``mcq status`` alerts on and ``mcq withheld list | ack`` shows and acknowledges.

A withheld change stays in ``<prefix>._withheld`` for good (it records what a target
missed). The operator repairs the cause (each record's reason names it), then the targets
(``mcq refresh LISTENER --from source``) and acknowledges: the consumer group
``<prefix>._withheld-ack`` moves to the topic's end, and only records after it alert.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from mcq.change import BadChange, ChangeCodec
from mcq.config import Settings
from mcq.contract import registry_client
from mcq.topics.plan import withheld_topic
from mcq.topics.read import all_watermarks, read_to_end


@dataclass(frozen=True)
class WithheldChange:
    partition: int
    offset: int
    key: str
    reason: str
    entry_time: str
    acknowledged: bool


class Withheld:
    """The withheld topic of one deployment (a topic prefix)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = withheld_topic(settings.topic_prefix)
        self.group = f"{self.topic}-ack"

    def _positions(self) -> dict[int, tuple[int, int]]:
        """partition -> (acknowledged up to, end); empty when the topic does not exist."""
        admin = AdminClient(self.settings.kafka.client_config())
        # every topic's metadata: asking for this one by name would have the broker create it
        # with its defaults when it does not exist yet
        meta = admin.list_topics(timeout=15).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return {}
        tps = [TopicPartition(self.topic, p) for p in meta.partitions]
        ends = all_watermarks(admin, tps)
        consumer = Consumer({**self.settings.kafka.client_config(), "group.id": self.group})
        try:
            committed = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=15)}
        finally:
            consumer.close()
        return {
            p: (max(committed.get(p, -1), low), high) for (_, p), (low, high) in ends.items()
        }  # -1001: nothing committed yet

    def unacknowledged(self) -> int:
        return sum(max(0, end - acked) for acked, end in self._positions().values())

    def entries(self) -> list[WithheldChange]:
        acked = {p: a for p, (a, _) in self._positions().items()}
        codec = ChangeCodec(registry_client(self.settings))
        out = []
        for msg in read_to_end(self.settings, self.topic):
            partition, offset = msg.partition() or 0, msg.offset() or 0
            try:
                change = codec.decode(self.topic, partition, offset, msg.key(), msg.value())
            except BadChange as exc:
                out.append(WithheldChange(partition, offset, "?", str(exc), "?", offset < acked.get(partition, 0)))
                continue
            if change is None:
                continue
            out.append(
                WithheldChange(
                    partition, offset, change.key.text(), change.origin,
                    change.entry_time.isoformat(timespec="seconds"), offset < acked.get(partition, 0),
                )
            )  # fmt: skip
        return out

    def acknowledge(self) -> int:
        """Acknowledge every withheld change so far; the number that were not yet."""
        positions = self._positions()
        count = sum(max(0, end - acked) for acked, end in positions.values())
        if positions:
            consumer = Consumer({**self.settings.kafka.client_config(), "group.id": self.group})
            try:
                consumer.commit(
                    offsets=[TopicPartition(self.topic, p, end) for p, (_, end) in positions.items()],
                    asynchronous=False,
                )
            finally:
                consumer.close()
        return count

    def alert(self) -> str | None:
        """The line ``mcq status`` prints (and exits 1 for) while some are unacknowledged."""
        n = self.unacknowledged()
        if not n:
            return None
        return (
            f"the normaliser withheld {n} change(s) in {self.topic} that it could not deliver whole (a large value "
            "left out of the WAL, a TRUNCATE, a row lacking a captured column...); `mcq withheld list` gives each "
            "one's reason and repair (then mcq refresh LISTENER --from source), then `mcq withheld ack`"
        )
