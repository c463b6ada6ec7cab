"""Registry texts that several unit tests plan from."""

from __future__ import annotations

# one logical key fed by two source tables, beside a table fed by one
TWO_FEEDS = """
sources:
  - name: db
    schemas: [s]
tables:
  - tname: CONTACT
    feeds:
      - source: db
        table: s.phones
        keys: {person_id: person_id, aux_string: kind}
        columns: [person_id, kind, number]
      - source: db
        table: s.addresses
        keys: {person_id: person_id, aux_string: kind}
        columns: [person_id, kind, street]
  - tname: PERSON
    feeds:
      - source: db
        table: s.people
        keys: {person_id: person_id}
        columns: [person_id, name]
  - tname: NOTE
listeners: []
"""
