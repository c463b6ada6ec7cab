"""The key of a change as people read it: printed, and read back."""

from __future__ import annotations

from mcq.change import ChangeKey


def test_a_key_as_printed_reads_back_as_the_same_key() -> None:
    for key in (
        ChangeKey("PERSON_ENTRY", None, 2),
        ChangeKey("PERSON", "Telephone", 7, aux_string="campus, home"),
        ChangeKey("GROUP_MEM", None, None, "staff=x, y", None, "ada"),
        ChangeKey("LOGINS", None, 1, "ada", 5001),
    ):
        assert ChangeKey.from_str(str(key)) == key
