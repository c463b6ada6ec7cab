"""The result every benchmark prints: a caption and a Markdown table (``bench.run`` takes
the ``| ... |`` lines for BENCHMARKS.md)."""

from __future__ import annotations


def print_table(caption: str, columns: list[str], rows: list[str]) -> None:
    print(f"\n{caption}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    print("\n".join(rows))
