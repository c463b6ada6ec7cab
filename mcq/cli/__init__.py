"""The ``mcq`` command line: a thin shell that wires the core (``mcq``), the Spark jobs
(``streams``) and the listener runtime (``consumers``) to the operator's terminal.

One module per command group, each registering its commands on :data:`main`
(``mcq/cli/app.py``, with what they share)::

    app.py           the root group, consoles, exit codes, shared options, error lines
    stack.py         mcq stack up|down|status|logs, mcq config
    registry.py      mcq registry validate|apply|diff|show
    capture.py       mcq connect render|apply|status|restart|remove
    acl.py           mcq acl plan|diff|apply|user
    provision.py     mcq helm values, mcq topics apply, mcq schemas apply
    normalize.py     mcq streams normalize
    listen.py        mcq listen, mcq status
    maintenance.py   mcq replay, mcq flush, mcq purge
    jobs.py          mcq refresh, mcq reconcile, mcq rebuild, mcq report
    dead_letters.py  mcq dlq list|show|requeue|discard, mcq withheld list|ack
    trace.py         mcq trace
    entities.py      mcq entities run, mcq map preview
    console.py       mcq console
    demo.py          mcq demo, mcq smoke, mcq world load

Exit codes: 0 success; 1 a service or pipeline step failed; 2 bad usage or
configuration (click's own convention); 3 a status command found a service down or
drift. Commands import what only they use inside their functions: every command, a
scheduled ``mcq listen`` run included, would otherwise pay for importing all of them.
"""

from mcq.cli import (  # noqa: F401  (each registers its commands on main)
    acl,
    capture,
    console,
    dead_letters,
    demo,
    entities,
    jobs,
    listen,
    maintenance,
    normalize,
    provision,
    registry,
    stack,
    trace,
)
from mcq.cli.app import main

__all__ = ["main"]
