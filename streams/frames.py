"""DataFrame helpers the jobs share (no application shell: pyspark only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def union_by_name(frames: Sequence[DataFrame]) -> DataFrame:
    """The rows of ``frames``, in their order, matched by column name.

    Unions are paired as a balanced tree, not chained: Spark analyses the whole plan of
    every union made, so a chain of n frames analyses 1 + 2 + ... + n of them (the
    normaliser's 17 projections of the campus registry: ~3 s of its first batch) and a
    balanced tree about n log n. The optimiser flattens nested unions into one
    (``CombineUnions``) keeping the children's order, so the plan run is the same."""
    if not frames:
        raise ValueError("union_by_name of no frames")
    level = list(frames)
    while len(level) > 1:
        paired = [a.unionByName(b) for a, b in zip(level[::2], level[1::2], strict=False)]
        level = paired + level[len(paired) * 2 :]
    return level[0]


def shuffle_partitions(df: DataFrame) -> int:
    """Spark's shuffle partitions: the parallelism every step of a batch is cut to."""
    return max(1, int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 4))
