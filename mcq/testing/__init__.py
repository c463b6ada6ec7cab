"""Scratch worlds for the integration tests and the benchmarks, on a running stack:

- :mod:`mcq.testing.worlds`    — a captured campus world (schema, data, registry, capture)
  under names of its own, and reading a topic's records back;
- :mod:`mcq.testing.listeners` — a listener's topics and registry for one scratch table,
  changes produced straight to them, a runtime in a thread or a ``mcq listen`` process.

Like the shells (:mod:`mcq.cli`, :mod:`mcq.demo`), it wires every layer; the core of
``mcq`` never imports it (import-linter's contracts in pyproject.toml). The benchmarks use it, so that
``bench/`` imports nothing of ``tests/``.
"""
