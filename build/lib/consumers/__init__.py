"""Listeners: one consumer group per listener, applying changes through an adapter.

``consumers.runtime`` is the loop (ack by commit, retries, parking, dead letters, lanes,
heartbeat); ``consumers.adapter`` the interface a target implements; one sub-package per
built-in adapter kind.
"""

import logging

logging.getLogger("consumers").addHandler(
    logging.NullHandler()
)  # a library logs nowhere until a shell says where (mcq.logs)
