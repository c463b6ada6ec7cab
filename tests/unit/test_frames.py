"""``streams.frames.union_by_name``: every frame once, in order, as a balanced tree."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from streams.frames import union_by_name


@dataclass(frozen=True)
class Frame:
    """Stands in for a DataFrame: its rows, and how deep its unions nest."""

    rows: tuple[str, ...]
    depth: int = 0

    def unionByName(self, other: Frame) -> Frame:  # pyspark's name
        return Frame(self.rows + other.rows, max(self.depth, other.depth) + 1)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 17, 33])
def test_union_keeps_every_frame_in_order(n: int) -> None:
    frames = [Frame((f"f{i}",)) for i in range(n)]
    assert union_by_name(frames).rows == tuple(f"f{i}" for i in range(n))


@pytest.mark.parametrize(("n", "depth"), [(1, 0), (2, 1), (4, 2), (16, 4), (17, 5)])
def test_unions_nest_logarithmically_not_as_a_chain(n: int, depth: int) -> None:
    assert union_by_name([Frame((str(i),)) for i in range(n)]).depth == depth


def test_union_of_no_frames_is_an_error() -> None:
    with pytest.raises(ValueError, match="no frames"):
        union_by_name([])
