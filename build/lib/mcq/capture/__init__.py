"""Capture: the Debezium PostgreSQL connectors generated from the registry, and the
explicit-log outbox (``mcq_log_insert/update/delete``) installed in the source database."""
