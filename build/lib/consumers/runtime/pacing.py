"""How many records a lane takes per batch, and what a refused commit means.

A listener polls Kafka only between batches. A batch that keeps it away longer than
the consumer's ``max.poll.interval.ms`` (the listener's ``delivery.max_poll_interval_s``)
has the group remove this instance and give its partitions to the others: the batch's
commit is then refused (the member is unknown), which is right -- the next owner starts
from the group's last commit and the applied positions skip what this batch applied --
but a lane whose every batch overran would be removed at every batch.

So a removal halves the lane's batch when the batch's own work (the waits for an
unavailable target aside: a smaller batch would not have waited less) took more than
half the interval, and batches that end well within it let the size grow back to the
configured one. Pure logic: the listener feeds it times and refusals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

# a commit refused because the group removed this instance (ILLEGAL_GENERATION is not:
# a commit racing an ordinary rebalance, the instance still a member)
MEMBERSHIP_LOST = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError._MAX_POLL_EXCEEDED,
    }
)


def membership_lost(exc: KafkaException) -> bool:
    """Whether a refused commit says the group removed this instance."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() in MEMBERSHIP_LOST


@dataclass
class BatchPacer:
    """The batch size of one lane: at most ``most``, halved after an overrun."""

    most: int
    interval_s: float
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = self.most

    def removed(self, work_s: float) -> bool:
        """The group removed this instance during a batch that worked ``work_s``: whether
        the size was halved (not when the batch's work was short: the time went elsewhere)."""
        if work_s <= self.interval_s / 2 or self.size == 1:
            return False
        self.size = max(1, self.size // 2)
        return True

    def done(self, work_s: float) -> None:
        """A batch committed: a quick one lets a halved size grow back."""
        if self.size < self.most and work_s < self.interval_s / 8:
            self.size = min(self.most, self.size * 2)
