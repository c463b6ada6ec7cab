"""Where a listener's tables were normalised when none of its topics exist under its own
topic prefix: the prefixes that hold every one of them, and no prefix that holds only a
name that happens to end the same way."""

from __future__ import annotations

from mcq.topics.plan import prefixes_holding


def test_the_prefix_holding_every_topic_of_the_listener_is_named() -> None:
    existing = frozenset({"mcq.person", "mcq.person.telephone", "mcq.group", "prod.person", "prod.group", "mine.x"})
    assert prefixes_holding(["mine.person", "mine.group"], "mine", existing) == ["mcq", "prod"]


def test_the_prefix_most_like_the_listeners_comes_first() -> None:
    existing = frozenset({f"{p}.person" for p in ("mcq", "prod", "tl2deaa059ee", "tl2d0aa059ff", "zz")})
    assert prefixes_holding(["tl2deaa059eex.person"], "tl2deaa059eex", existing)[:2] == ["tl2deaa059ee", "tl2d0aa059ff"]


def test_a_prefix_holding_only_some_of_the_topics_is_not_named() -> None:
    existing = frozenset({"old.person", "mcq.person", "mcq.group"})
    assert prefixes_holding(["mine.person", "mine.group"], "mine", existing) == ["mcq"]


def test_a_longer_topic_ending_the_same_way_is_a_candidate_only_when_it_holds_them_all() -> None:
    # "mcq.staff.person" ends in ".person" (a table STAFF, subtype PERSON), but "mcq.staff.group" is not there
    existing = frozenset({"mcq.staff.person", "mcq.person", "mcq.group"})
    assert prefixes_holding(["mine.person", "mine.group"], "mine", existing) == ["mcq"]
    assert prefixes_holding(["mine.person"], "mine", existing) == ["mcq", "mcq.staff"]


def test_nothing_is_named_when_no_other_prefix_holds_them_or_the_names_are_not_under_the_prefix() -> None:
    assert prefixes_holding(["mine.person"], "mine", frozenset({"mine.person", "other.group"})) == []
    assert prefixes_holding(["elsewhere.person"], "mine", frozenset({"mcq.person"})) == []
    assert prefixes_holding([], "mine", frozenset({"mcq.person"})) == []
