"""Shells that prove the whole product on a running stack, as a new user meets it:

- :mod:`mcq.demo.smoke`  — ``mcq smoke``: capture, the schema registry and Spark each do
  real work together (a table, a connector, an Avro round trip, a Spark read);
- :mod:`mcq.demo.run`    — ``mcq demo``: the campus world end to end, narrated, then checked;
- :mod:`mcq.demo.checks` — the oracle of the demo, the benches and the integration tests:
  what each target must hold, derived from the source tables, never from ``consumers/``.

Like :mod:`mcq.cli` and :mod:`mcq.console`, this package wires the layers (``streams``,
``consumers``, Spark, ldap3); the core of ``mcq`` never imports it
(import-linter's contracts in pyproject.toml).
"""
