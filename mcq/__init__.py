"""mcq — the Meta Change Queue rebuilt on Kafka, Debezium and Spark.

The layers, bottom up::

    mcq (the core)     config, errors, logs, the change contract, the registry, capture,
                       topics, ACLs, the Connect/registry/Kafka clients, the local stack
        ▲                          ▲
    streams/ (Spark jobs)      consumers/ (listeners and their adapters)
        ▲                          ▲
    mcq.cli, mcq.console, mcq.demo (shells: they wire the layers to a terminal or browser)

The core imports nothing above it: import-linter's contracts in pyproject.toml (``make lint``).
"""

import logging

# a library logs nowhere until a shell says where (mcq.logs)
logging.getLogger("mcq").addHandler(logging.NullHandler())

__version__ = "0.1.0"
