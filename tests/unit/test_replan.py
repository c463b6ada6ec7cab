"""Which raw records a registry change has normalised again on its new plan, and how its
window is kept until that has run."""

from __future__ import annotations

from pathlib import Path

from mcq.registry import parse_registry
from streams.plan import plan_normalize
from streams.registry_watch import PlanChange
from streams.replan import MARGIN_MS, affected, pending, remember
from tests.support.registries import TWO_FEEDS

PLAN = plan_normalize(parse_registry(TWO_FEEDS, "two.yaml"), "p")
REGISTRY = parse_registry(TWO_FEEDS, "two.yaml")


def test_a_changed_table_concerns_the_raw_topics_of_its_feeds_only() -> None:
    part = affected(PLAN, ["table/CONTACT"])
    assert part.raw_topics == ["mcq.raw.db.s.addresses", "mcq.raw.db.s.phones"]
    assert {f.topic for f in part.feeds} == {"p.contact"}


def test_a_table_fed_only_by_the_explicit_log_concerns_the_outbox() -> None:
    part = affected(PLAN, ["table/NOTE"])
    assert not part.feeds
    assert part.raw_topics == list(PLAN.outbox_topics)


def test_a_changed_source_concerns_every_raw_topic() -> None:
    assert affected(PLAN, ["source/db", "table/PERSON"]) == PLAN


def test_a_removed_table_concerns_nothing_of_the_new_plan() -> None:
    assert affected(PLAN, ["table/GONE"]).raw_topics == []


def test_a_window_is_kept_from_before_the_change_by_the_clock_margin(tmp_path: Path) -> None:
    assert pending(tmp_path) is None
    remember(tmp_path, PlanChange(REGISTRY, ["table/CONTACT"], 1_000_000))
    assert pending(tmp_path) == {"since_ms": 1_000_000 - MARGIN_MS, "definitions": ["table/CONTACT"]}


def test_a_second_change_before_the_first_ran_widens_its_window_and_starts_its_run_over(tmp_path: Path) -> None:
    remember(tmp_path, PlanChange(REGISTRY, ["table/CONTACT"], 1_000_000))
    (tmp_path / "replan" / "offsets").mkdir(parents=True)  # its run had begun
    remember(tmp_path, PlanChange(REGISTRY, ["table/PERSON"], 2_000_000))
    assert pending(tmp_path) == {"since_ms": 1_000_000 - MARGIN_MS, "definitions": ["table/CONTACT", "table/PERSON"]}
    assert not (tmp_path / "replan").exists()  # its topics changed: the run starts over from the window
