"""What ``mcq reconcile`` compares: a file target read back is every batch file applied in
the order written (JSON Lines and XML alike); drift is missing, extra and different
objects, said with the fields that differ."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from consumers.file.adapter import FileAdapter
from consumers.runtime.view import ListenerView
from mcq.change import Change, ChangeKey, Position
from mcq.config import load_settings
from mcq.registry import parse_registry
from streams.jobs.reconcile import compare

REGISTRY = """
sources:
  - {{name: campus, schemas: [campus]}}
tables:
  - tname: PHONE
    feeds:
      - source: campus
        table: campus.phones
        keys: {{person_id: person_id, aux_string: kind}}
        columns: [person_id, kind, phone, secret]
listeners:
  - {{name: F, owner: x@example, adapter: {{type: file, settings: {{directory: '{dir}', format: {fmt}}}}}}}
interests:
  - {{listener: F, tname: PHONE, columns: [person_id, kind, phone], rule: "kind <> 'fax'"}}
"""


def _change(pid: int, kind: str, phone: str | None, change_type: str = "UPDATE", lsn: int = 10) -> Change:
    after = None if change_type == "DELETE" else {"person_id": str(pid), "kind": kind, "phone": phone, "secret": "s"}
    return Change(
        ChangeKey("PHONE", None, pid, None, None, kind), change_type, Position(lsn, lsn),  # type: ignore[arg-type]
        datetime.now(UTC), "campus.phones", after=after,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["jsonl", "xml"])
def test_a_file_target_reads_back_as_every_file_applied_in_order(tmp_path: Path, fmt: str) -> None:
    registry = parse_registry(REGISTRY.format(dir=tmp_path, fmt=fmt), "r.yaml")
    listener = registry.listener("F")
    assert listener is not None
    adapter = FileAdapter(listener, load_settings())
    adapter.bind(registry)
    adapter.open()
    view = ListenerView(registry, "F")
    first = [_change(1, "office", "111"), _change(2, "office", "222"), _change(3, "office", None)]
    later = [_change(1, "office", "112", lsn=20), _change(2, "office", None, "DELETE", lsn=20)]
    for batch in (first, later):
        seen = [s for c in batch if (s := view.see(c, True)[0]) is not None]
        assert adapter.apply_batch(seen) == [None] * len(seen)
    (tmp_path / "other-listener.jsonl").write_text('{"not": "ours"}\n')

    held = adapter.read_back()
    states = [_change(1, "office", "112", lsn=20), _change(3, "office", None), _change(4, "fax", "999")]
    expected = adapter.expected(view, states)
    k1, k3 = states[0].key.text(), states[1].key.text()
    assert held == {k1: {"person_id": "1", "kind": "office", "phone": "112"},
                    k3: {"person_id": "3", "kind": "office", "phone": None}}  # fmt: skip
    assert expected == held  # the column allow-list and the rule (no fax) apply to what is expected
    assert adapter.keys_of(k1) == [states[0].key]


def test_drift_is_missing_extra_and_different_with_the_fields_that_differ() -> None:
    drift = compare("L", {"a": {"x": "1"}, "b": {"x": "2", "y": "3"}, "c": {}}, {"b": {"x": "2", "y": "4"}, "d": {}})
    assert (list(drift.missing), list(drift.extra), list(drift.different)) == (["a", "c"], ["d"], ["b"])
    assert drift.total == 4 and drift.objects() == ["a", "b", "c", "d"]
    lines = drift.lines()
    assert lines[0].startswith("3 object(s) expected, 2 at the target: 2 missing, 1 extra, 1 different")
    assert "different: b: y: expected '3', found '4'" in lines
    assert compare("L", {"a": 1}, {"a": 1}).total == 0
