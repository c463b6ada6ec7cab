"""What runs beside the normaliser's queries, each for as long as they run: the history's
follower of the logical topics (``mcq trace``) and capture's keeper, which starts again the
source connectors' tasks that failed on a lost connection (``mcq/capture/keeper.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mcq.capture.keeper import CaptureKeeper
from mcq.config import Settings
from mcq.connect_rest import ConnectClient
from mcq.history.follower import CaptureFollower


@contextmanager
def following(follower: CaptureFollower, once: bool) -> Iterator[None]:
    """The history's follower of the logical topics, beside the queries (``mcq trace``);
    a run until caught up ends once the follower has caught up too."""
    follower.start()
    try:
        yield
    finally:
        follower.stop(catch_up_s=120 if once else 0)


@contextmanager
def keeping(settings: Settings, connectors: Callable[[], list[str]], once: bool) -> Iterator[None]:
    """A run until stopped restarts the source connectors' tasks failed on a lost
    connection (``mcq/capture/keeper.py``), in a thread of its own."""
    if once:
        yield
        return
    stop = threading.Event()
    with ConnectClient(settings.connect, timeout_s=10.0) as client:
        keeper = threading.Thread(target=CaptureKeeper(client, connectors).run, args=(stop,), name="capture-keeper",
                                  daemon=True)  # fmt: skip
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join(timeout=15)
