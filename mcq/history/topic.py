"""How a key finds its partition of the history topic."""

from __future__ import annotations

import zlib

from mcq.topics.plan import HISTORY_PARTITIONS, history_topic

__all__ = ["HISTORY_PARTITIONS", "history_topic", "partition_of"]


def partition_of(tname: str, key: str, partitions: int = HISTORY_PARTITIONS) -> int:
    """The partition that holds every event of one key (so that reading its history reads
    one partition, and its events keep the order each writer wrote them in)."""
    return zlib.crc32(f"{tname}\0{key}".encode()) % partitions
