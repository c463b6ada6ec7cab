"""The ``webhook`` adapter: each change POSTed as JSON with an idempotency key."""
