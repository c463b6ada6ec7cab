"""Which running real-time queries a registry change touches (streams/reshape.py): only
those whose raw topic's feeds differ; the outbox's and the ordered query's as units."""

from __future__ import annotations

from mcq.registry import parse_registry
from mcq.testing.worlds import campus_registry_yaml
from streams.plan import NormalizePlan, plan_normalize
from streams.realtime import split_plan
from streams.reshape import reshape

CAMPUS = campus_registry_yaml("w_x", "abc")
RAW = "mcq.raw.tabc.w_x."
SECOND_FEED = """
  - tname: CONTACT
    comment: one key fed by two source tables
    feeds:
      - {source: tabc, table: w_x.directory_telephone, keys: {person_id: person_id, aux_string: tele_type},
         columns: [person_id, tele_type, phone_number]}
      - {source: tabc, table: w_x.addresses, keys: {person_id: person_id, aux_string: addr_type},
         columns: [person_id, addr_type, street]}
"""


def _parts(text: str) -> tuple[NormalizePlan, NormalizePlan | None]:
    return split_plan(plan_normalize(parse_registry(text, "r.yaml"), "t"))


def test_a_watch_change_restarts_only_its_raw_topics_query() -> None:
    before = _parts(CAMPUS)
    after = _parts(CAMPUS.replace("watch: [phone_number]", "watch: [phone_number, updated_at]", 1))
    change = reshape(*before[:1], before[1], {}, after[0], after[1], {})
    assert change.stop == change.start == (RAW + "directory_telephone",)
    assert not change.ordered and change.kept == 16


def test_a_table_stored_again_restarts_its_query_as_its_definition_time_moved() -> None:
    plan, ordered = _parts(CAMPUS)
    telephone = next(f.ref for f in plan.feeds if f.raw_topic.endswith("directory_telephone"))
    change = reshape(plan, ordered, {telephone: 1}, plan, ordered, {telephone: 2})
    assert change.stop == change.start == (RAW + "directory_telephone",)


def test_a_removed_table_stops_its_query_and_starts_none() -> None:
    cut = slice(CAMPUS.index("  - tname: BUILDINGS"), CAMPUS.index("  - tname: DEPARTMENT"))
    text = (CAMPUS[: cut.start] + CAMPUS[cut.stop :]).replace(
        "  - {listener: CMMS, tname: BUILDINGS, subtype: null}\n", ""
    )
    change = reshape(*_parts(CAMPUS), {}, *_parts(text), {})
    assert change.stop == (RAW + "buildings",) and change.start == () and change.kept == 16


def test_a_table_fed_by_two_raw_topics_starts_the_ordered_query_and_leaves_the_real_time_ones() -> None:
    text = CAMPUS.replace("\nlisteners:", SECOND_FEED + "\nlisteners:", 1)
    before, after = _parts(CAMPUS), _parts(text)
    assert before[1] is None and after[1] is not None
    change = reshape(*before, {}, *after, {})
    assert change.ordered and change.stop == change.start == () and change.kept == 17


def test_an_unchanged_plan_touches_nothing() -> None:
    change = reshape(*_parts(CAMPUS), {}, *_parts(CAMPUS), {})
    assert (change.stop, change.start, change.ordered, change.kept) == ((), (), False, 17)
