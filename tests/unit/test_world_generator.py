"""The sample world generator: deterministic, consistent, and proportional to its size."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pytest

from mcq.world import World, generate
from mcq.world.generator import COLUMNS, PRIMARY_KEYS, TABLE_ORDER, TRANSFER_COHORT, iter_keys


@pytest.fixture(scope="module")
def world() -> World:
    return generate(1000)


def column(world: World, table: str, name: str) -> list[Any]:
    i = COLUMNS[table].index(name)
    return [row[i] for row in getattr(world, table)]


def test_the_same_seed_gives_the_identical_world() -> None:
    assert generate(300, seed=7) == generate(300, seed=7)
    assert generate(300) == generate(300, seed=2004)


def test_a_different_seed_gives_a_different_world() -> None:
    a, b = generate(300, seed=1), generate(300, seed=2)
    assert a.people != b.people
    assert a.logins != b.logins


def test_sizes_scale_with_the_population() -> None:
    small, large = generate(500).counts(), generate(2000).counts()
    assert small["people"] == 500 and large["people"] == 2000
    for table in ("person_status", "directory_telephone", "addresses", "logins", "group_members", "udi"):
        assert 3 * small[table] < large[table] < 5 * small[table], table
    assert large["departments"] == 40 and small["departments"] == 10
    assert large["buildings"] == 5 and small["buildings"] == 3
    assert large["rooms"] > small["rooms"]
    assert small["unix_groups"] == large["unix_groups"] == 12


def test_every_row_matches_its_columns(world: World) -> None:
    assert tuple(world.tables()) == TABLE_ORDER
    for table, rows in world.tables().items():
        assert rows, table
        assert all(len(row) == len(COLUMNS[table]) for row in rows), table


@pytest.mark.parametrize("table", sorted(PRIMARY_KEYS))
def test_primary_keys_are_unique(world: World, table: str) -> None:
    keys = list(iter_keys(world, table))
    assert len(keys) == len(set(keys))


def test_unique_columns_are_unique(world: World) -> None:
    for table, name in [
        ("people", "id_number"),
        ("logins", "unixuid"),
        ("unix_groups", "gid"),
        ("departments", "name"),
        ("buildings", "code"),
    ]:
        values = column(world, table, name)
        assert len(values) == len(set(values)), (table, name)


def test_foreign_keys_are_consistent(world: World) -> None:
    people = set(column(world, "people", "person_id"))
    for table, name in [
        ("person_status", "person_id"),
        ("directory_telephone", "person_id"),
        ("addresses", "person_id"),
        ("directory_orgn", "person_id"),
        ("udi", "person_id"),
        ("logins", "owner"),
        ("person_merges", "new_person_id"),
        ("vmail_commands", "person_id"),
    ]:
        assert set(column(world, table, name)) <= people, table
    assert set(column(world, "person_status", "person_id")) == people
    # merged-away records are gone: their ids are not people any more
    assert not set(column(world, "person_merges", "old_person_id")) & people
    assert set(column(world, "directory_orgn", "dept_id")) <= set(column(world, "departments", "dept_id"))
    usernames = set(column(world, "logins", "username"))
    assert set(column(world, "group_members", "username")) <= usernames
    assert set(column(world, "vmail_commands", "unity_owner")) <= usernames
    assert set(column(world, "group_members", "group_name")) <= set(column(world, "unix_groups", "group_name"))
    assert set(column(world, "buildings", "site_id")) <= set(column(world, "sites", "site_id"))
    assert set(column(world, "floors", "building_id")) <= set(column(world, "buildings", "building_id"))
    floors = set(iter_keys(world, "floors"))
    assert {(r[1], r[2]) for r in world.rooms} <= floors


def test_the_population_looks_like_a_campus(world: World) -> None:
    statuses = column(world, "person_status", "status")
    employees = sum(s in ("Faculty", "Staff", "Employee") for s in statuses)
    assert 0.3 < employees / len(statuses) < 0.5
    assert set(column(world, "directory_orgn", "person_id")) == {
        p for p, s in world.person_status if s in ("Faculty", "Staff", "Employee")
    }
    assert len(set(column(world, "udi", "person_id"))) == statuses.count("Student")
    assert 0.85 < len(world.logins) / len(world.people) < 0.95
    phones = Counter(column(world, "directory_telephone", "person_id"))
    assert set(phones.values()) <= {1, 2, 3}
    assert all(re.fullmatch(r"\+1 \d{3} [2-9]\d{2} \d{4}", str(n)) for _, _, n in world.directory_telephone)
    assert all(re.fullmatch(r"RIN\d{9}", str(n)) for n in column(world, "people", "id_number"))
    years = {d.year for d in column(world, "people", "birth_date")}
    assert min(years) >= 1940 and max(years) <= 2006
    assert min(column(world, "logins", "unixuid")) == 10000


def test_some_students_transferred_in_fall_2002(world: World) -> None:
    cohorts = column(world, "logins", "admit_cohort")
    transfers = cohorts.count(TRANSFER_COHORT)
    assert TRANSFER_COHORT == "TR200209"
    assert 0.02 < transfers / len(cohorts) < 0.09


def test_usernames_are_unique_lowercase_and_email_matches(world: World) -> None:
    names = [str(u) for u in column(world, "logins", "username")]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z]+[0-9]*", n) for n in names)
    assert set(column(world, "udi", "email")) <= {f"{n}@campus.example" for n in names}


def test_ten_thousand_people_generate_quickly() -> None:
    start = time.perf_counter()
    world = generate(10_000)
    assert time.perf_counter() - start < 5
    assert world.counts()["people"] == 10_000


def test_a_negative_population_is_refused() -> None:
    with pytest.raises(ValueError):
        generate(-1)
