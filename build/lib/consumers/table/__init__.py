"""The ``table`` adapter: each key's last state as a row of a PostgreSQL table."""
