"""Capture: the Debezium PostgreSQL connectors generated from the registry, and the
explicit-log outbox (``mcq_log_insert/update/delete``) installed in the source database,
and the keeper that starts again a connector's task failed on a lost connection."""
