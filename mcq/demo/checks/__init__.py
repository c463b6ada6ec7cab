"""Checks of targets against the source: the oracle of ``mcq demo`` and of the integration
tests that run the whole pipeline.

A check derives what a target must hold straight from the source database — plain SQL
over the tables the registry's feeds name — and from what the target is documented to
hold, written out here on its own. It never goes through a listener's code (the
adapters' entry builders, Push_Person, the projections and views of ``consumers/``):
an oracle that computed the expected state with the code under test would repeat that
code's bugs instead of finding them.

What a listener may see comes from the registry, read as the README documents it: the
logical tables its interests cover, the rows that pass their content rules and only the
columns their allow-lists name (every captured column when none does). A row at rest is
not a change: a rule reading ``change_type`` or ``before.<column>`` finds NULL.
"""

from mcq.demo.checks.files import changes_in_jsonl, changes_in_xml, check_files, compare_files, read_files, replay
from mcq.demo.checks.insite import InsitePerson, check_insite, compare_insite, insite_people
from mcq.demo.checks.ldap import WantedEntry, check_ldap, compare_entries, ldap_groups, ldap_people, postal_address
from mcq.demo.checks.view import Check, Row, Seen, View, feed_key, read_tables, read_view, visible

__all__ = [
    "Check",
    "InsitePerson",
    "Row",
    "Seen",
    "View",
    "WantedEntry",
    "changes_in_jsonl",
    "changes_in_xml",
    "check_files",
    "check_insite",
    "check_ldap",
    "compare_entries",
    "compare_files",
    "compare_insite",
    "feed_key",
    "insite_people",
    "ldap_groups",
    "ldap_people",
    "postal_address",
    "read_files",
    "read_tables",
    "read_view",
    "replay",
    "visible",
]
