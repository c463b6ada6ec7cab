"""The operator's console (``mcq console``): the MCQ paper's web tool and Oracle AQ's queue
statistics, server-rendered, every asset shipped in the package (no CDN).

``auth``      logins (argon2 hashes from the settings, or a trusted reverse proxy's header), roles
``audit``     every action as one JSON line: who, what, when, the outcome
``state``     what the pages read: the registry (followed), listeners' status, services
``metrics``   Prometheus ``/metrics``: requests by route template, logins and actions by
              outcome, jobs by state
``app``       the Starlette application: sessions, CSRF, roles, the routes of ``pages``
``pages/``    one module per page, each with its ``routes()``: overview, listener, dead
              letters, interests, tables, topics

It is a shell over the core: every figure and action comes from the same functions the CLI
uses (``consumers.runtime.status``, ``consumers.runtime.dlq``, ``mcq.registry.store``).
"""
