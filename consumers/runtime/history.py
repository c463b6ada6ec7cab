"""A listener's steps in each key's history (``mcq.history``): what it did with each change
and what its target said, written through the batch's producer (flushed before the
batch's offsets commit, like everything else the batch produced)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from consumers.runtime.parking import header_of
from mcq import jsontext
from mcq.change import RAW_HEADER
from mcq.history import HistoryWriter, Step

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
        position = change.position
        event: dict[str, object] = {  # Event's fields, in its order, its unset ones left out
            "tname": change.key.tname,
            "key": key,
            "step": step,
            "at": time.time(),
            "position": f"{position.last_commit_lsn}/{position.lsn}",
            "change_type": change.change_type,
            "commit_time": change.entry_time.isoformat(),
        }
        # one per change: written as it is, no Event built and no copy to drop unset fields
        if change.txid is not None:
            event["txid"] = change.txid
        if (raw := header_of(item.msg, RAW_HEADER)) is not None:
            event["raw"] = raw
        event["logical"] = item.origin.where
        event["listener"] = self.listener
        if answer is not None:
            event["answer"] = answer
        if change.cause is not None:
            event["cause"] = change.cause
        self.writer.write(change.key.tname, key, jsontext.dumps(event))
