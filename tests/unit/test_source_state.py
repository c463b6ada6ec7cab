"""How ``mcq refresh --from source`` splits a source table among Spark tasks (pure logic)."""

from __future__ import annotations

import re

import pytest

from streams.source_state import BLOCKS_PER_TASK, block_ranges


def _blocks(clause: str, last_block: int) -> set[int]:
    """The blocks ``0..last_block`` a WHERE clause of ctid bounds selects."""
    low = re.search(r"ctid >= '\((\d+),0\)'", clause)
    high = re.search(r"ctid < '\((\d+),0\)'", clause)
    return set(range(int(low.group(1)) if low else 0, int(high.group(1)) if high else last_block + 1))


@pytest.mark.parametrize("blocks", [0, 1, BLOCKS_PER_TASK, BLOCKS_PER_TASK + 1, 10_001, 123_457])
@pytest.mark.parametrize("parallelism", [1, 2, 3, 8])
def test_every_block_is_read_by_exactly_one_task_and_rows_added_meanwhile_by_the_last(
    blocks: int, parallelism: int
) -> None:
    clauses = block_ranges(blocks, parallelism)
    assert 1 <= len(clauses) <= parallelism
    grown = blocks + 500  # the table grows while it is read
    seen: list[int] = [b for clause in clauses for b in _blocks(clause, grown)]
    assert sorted(seen) == list(range(grown + 1))


def test_a_small_table_is_one_read_and_a_large_one_uses_every_task_slot() -> None:
    assert block_ranges(BLOCKS_PER_TASK - 1, 8) == [""]
    assert len(block_ranges(100 * BLOCKS_PER_TASK, 2)) == 2
    assert len(block_ranges(3 * BLOCKS_PER_TASK, 8)) == 3
