"""A listener's steps in each key's history (``mcq.history``): what it did with each change
and what its target said, written through the batch's producer (flushed before the
batch's offsets commit, like everything else the batch produced)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from consumers.runtime.parking import headers_of
from mcq.change import RAW_HEADER
from mcq.history import Event, HistoryWriter, Step

if TYPE_CHECKING:
    from consumers.runtime.delivery import Item


class Steps:
    """Records a listener's steps; does nothing without a writer (no history topic)."""

    def __init__(self, listener: str, writer: HistoryWriter | None) -> None:
        self.listener = listener
        self.writer = writer

    def __call__(self, item: Item, step: Step, answer: str | None = None) -> None:
        change = item.change
        if self.writer is None or change is None:
            return
        key = change.key.text()
        event = {  # Event's fields, written without building one (Event.json_of: one per change)
            "tname": change.key.tname,
            "key": key,
            "step": step,
            "at": time.time(),
            "position": str(change.position),
            "change_type": change.change_type,
            "commit_time": change.entry_time.isoformat(),
            "txid": change.txid,
            "raw": headers_of(item.msg).get(RAW_HEADER),
            "logical": item.origin.where,
            "listener": self.listener,
            "answer": answer,
            "cause": change.cause,
        }
        self.writer.write(change.key.tname, key, Event.json_of(event))
