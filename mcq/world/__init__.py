"""The sample world: a realistic campus identity database to capture changes from.

It stands in for the paper's SIMON, the central database whose changes the Meta Change
Queue fans out: people with statuses, telephones, addresses, departmental affiliations
and directory information; computer accounts and Unix groups; and the space inventory
(sites, buildings, floors, rooms), plus two event tables (person merges, voice-mail
commands). ``schema.sql`` holds the DDL (every table ``REPLICA IDENTITY FULL`` so
Debezium sees before-images); ``examples/campus.yaml`` maps its tables to the paper's
logical tables.

:func:`generate` builds a deterministic world of any size from a seed, and
:func:`create_schema` plus :func:`load` put it into PostgreSQL::

    world = generate(10_000)
    create_schema(conn, "campus")
    load(conn, "campus", world)  # each table's count logged at INFO
"""

from mcq.world.generator import World, generate
from mcq.world.loader import create_schema, load

__all__ = ["World", "create_schema", "generate", "load"]
