"""Registry files: the sample validates; each kind of mistake is its own one-line error
with file:line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcq.registry import RegistryInvalid, load_registry
from mcq.registry.exceptions import RegistryFileError
from tests import PROJECT_ROOT

CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"
TABLE_2 = {
    "BUILDINGS", "DEPARTMENT", "GROUPS", "GROUP_MEM", "INSITE_FLOOR", "INSITE_SITE", "LOCATIONS", "LOGINS",
    "PERSON/Address", "PERSON/Dir_Orgn", "PERSON/Merge", "PERSON/PEOPLE", "PERSON/Status", "PERSON/Telephone",
    "PERSON/UDI", "UNITY_VMAIL",
}  # fmt: skip
TABLE_5 = {"ADSI", "Applix", "BEST", "CMMS", "Insite", "LDAP", "Unity"}
ENTITIES = {"PERSON_ENTRY", "GROUP_ENTRY", "ACCOUNT_ENTRY", "INSITE_PERSON"}
"""What the directory, Active Directory and INSITE listeners map: a row with its related rows."""


def test_the_campus_sample_registers_the_papers_tables_and_listeners() -> None:
    reg = load_registry(CAMPUS)
    assert {t.ref for t in reg.tables if t.entity is None} == TABLE_2
    assert {t.ref for t in reg.tables if t.entity is not None} == ENTITIES
    assert {x.name for x in reg.listeners} == TABLE_5
    assert reg.table("PERSON", "Telephone").feeds[0].table == "campus.directory_telephone"  # type: ignore[union-attr]
    assert {t.ref for t in reg.tables_of("Unity")} == {"UNITY_VMAIL", "LOGINS", "PERSON/Telephone"}
    assert {t.ref for t in reg.tables_of("LDAP")} == {"PERSON_ENTRY", "GROUP_ENTRY"}
    # every PERSON subtype the paper's LDAP listener read, except Merge, and the accounts and departments
    person = reg.table("PERSON_ENTRY", None)
    assert person is not None and person.entity is not None
    assert set(person.entity.members()) == {
        "PERSON/PEOPLE", "PERSON/Telephone", "PERSON/Address", "PERSON/Status", "PERSON/UDI", "PERSON/Dir_Orgn",
        "DEPARTMENT", "LOGINS",
    }  # fmt: skip


def test_mcq_registry_validate_passes_on_the_sample() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcq.cli", "registry", "validate", str(CAMPUS)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "20 tables/subtypes, 7 listeners" in out.stdout  # Table 2's 16 and 4 entities


def _broken(tmp_path: Path, old: str, new: str, count: int = 1) -> tuple[Path, int]:
    text = CAMPUS.read_text()
    assert old in text, old
    broken = text.replace(old, new, count)
    line = text[: text.index(old)].count("\n") + 1
    path = tmp_path / "campus.yaml"
    path.write_text(broken)
    return path, line


def _one_problem(path: Path) -> str:
    with pytest.raises(RegistryInvalid) as err:
        load_registry(path)
    assert len(err.value.problems) == 1, err.value.problems
    problem = err.value.problems[0]
    assert "\n" not in problem
    return problem


def _line_of(problem: str, path: Path) -> int:
    match = re.match(rf"{re.escape(str(path))}:(\d+): ", problem)
    assert match, problem
    return int(match.group(1))


def test_an_interest_in_an_unknown_table_names_file_and_line(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "{listener: Unity, tname: UNITY_VMAIL,", "{listener: Unity, tname: UNITY_FAX,")
    problem = _one_problem(path)
    assert _line_of(problem, path) == line
    assert "unknown table UNITY_FAX" in problem and "define it under tables" in problem


def test_an_interest_of_an_unknown_listener_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "{listener: CMMS, tname: BUILDINGS,", "{listener: CMS, tname: BUILDINGS,")
    problem = _one_problem(path)
    assert _line_of(problem, path) == line and "unknown listener 'CMS'" in problem


def test_a_duplicate_listener_name_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "  - name: Unity\n", "  - name: LDAP\n")
    with pytest.raises(RegistryInvalid) as err:
        load_registry(path)
    dupes = [p for p in err.value.problems if "duplicate listener 'LDAP'" in p]
    assert len(dupes) == 1 and _line_of(dupes[0], path) == line


def test_a_duplicate_table_subtype_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "  - tname: INSITE_FLOOR\n", "  - tname: INSITE_SITE\n")
    problem = _one_problem(path)
    assert "duplicate table/subtype 'INSITE_SITE' (first defined as item" in problem
    text = CAMPUS.read_text()
    assert line < _line_of(problem, path) == text[: text.index("  - tname: INSITE_SITE\n")].count("\n") + 1


def test_a_second_interest_of_a_listener_in_the_same_table_subtype_is_refused_at_its_line(tmp_path: Path) -> None:
    # two interests the store would key alike (interest/Unity|PERSON|Telephone): one would
    # silently replace the other when applied
    old = "  - {listener: Unity, tname: PERSON, subtype: Telephone,"
    path, line = _broken(tmp_path, old, f"  - {{listener: Unity, tname: PERSON, subtype: Telephone}}\n{old}")
    problem = _one_problem(path)
    assert "duplicate interest 'Unity in PERSON/Telephone' (first defined as item" in problem
    assert _line_of(problem, path) == line + 1


def test_interests_of_one_listener_in_different_subtypes_are_not_duplicates(tmp_path: Path) -> None:
    old = "  - {listener: Unity, tname: PERSON, subtype: Telephone,"
    path, _ = _broken(tmp_path, old, f"  - {{listener: Unity, tname: PERSON, subtype: Address}}\n{old}")
    assert len(load_registry(path).interests_of("Unity")) == 4


def test_a_key_field_mapped_to_a_missing_column_is_refused(tmp_path: Path) -> None:
    path, line = _broken(
        tmp_path,
        "keys: {person_id: person_id, aux_string: tele_type}",
        "keys: {person_id: person_id, aux_string: phone_type}",
    )
    problem = _one_problem(path)
    assert _line_of(problem, path) == line
    assert "aux_string is mapped to 'phone_type'" in problem and "campus.directory_telephone" in problem


def test_a_rule_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "rule: \"tele_type = 'campus'\"", "rule: \"tele_type = = 'campus'\"")
    problem = _one_problem(path)
    assert _line_of(problem, path) == line
    assert "rule does not parse at column" in problem


def test_a_rule_reading_a_column_no_covered_table_has_is_refused(tmp_path: Path) -> None:
    path, _ = _broken(tmp_path, "rule: \"tele_type = 'campus'\"", "rule: \"extension = '1234'\"")
    assert "rule reads extension" in _one_problem(path)


@pytest.mark.parametrize("rule", ["updated_at > '2020-01-01'", "before.updated_at IS NULL"])
def test_a_rule_reading_a_column_its_feed_does_not_watch_is_refused_naming_the_fix(tmp_path: Path, rule: str) -> None:
    """An update of only an unwatched column is housekeeping: the normaliser drops it, so a
    rule over that column could never move a row into or out of the listener's view."""
    path, line = _broken(tmp_path, "rule: \"tele_type = 'campus'\"", f'rule: "{rule}"')
    problem = _one_problem(path)
    assert _line_of(problem, path) == line
    assert "rule reads updated_at, which campus.directory_telephone (PERSON/Telephone) does not watch" in problem
    assert "never reaches Unity" in problem and "add updated_at to that feed's watch" in problem


def test_a_rule_over_key_columns_and_watched_columns_is_valid(tmp_path: Path) -> None:
    # tele_type is a key column (a change of it moves the key), phone_number is watched
    path, _ = _broken(
        tmp_path, "rule: \"tele_type = 'campus'\"", "rule: \"tele_type = 'campus' AND before.phone_number LIKE '5%'\""
    )
    assert load_registry(path).interests


def test_a_bad_cron_schedule_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, 'schedule: "*/3 * * * *"', 'schedule: "every three minutes"')
    problem = _one_problem(path)
    assert _line_of(problem, path) == line and "cron expression" in problem


def test_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    path, line = _broken(
        tmp_path, "    owner: telecom@campus.example\n", "    owner: telecom@campus.example\n    pager: 555-1234\n"
    )
    problem = _one_problem(path)
    assert _line_of(problem, path) == line + 1 and "unknown setting 'pager'" in problem


def test_mcq_registry_validate_prints_each_problem_on_its_own_line(tmp_path: Path) -> None:
    path, _ = _broken(tmp_path, "{listener: Unity, tname: UNITY_VMAIL,", "{listener: Unity, tname: UNITY_FAX,")
    out = subprocess.run(
        [sys.executable, "-m", "mcq.cli", "registry", "validate", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert out.stderr.strip().startswith(f"{path}:") and len(out.stderr.strip().splitlines()) == 1


def test_yaml_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("sources:\n  - name: campus\n    schemas: [campus\n")
    with pytest.raises(RegistryFileError, match=rf"{re.escape(str(path))}:\d+: not valid YAML"):
        load_registry(path)


def test_an_allow_list_naming_a_column_no_covered_table_captures_is_refused(tmp_path: Path) -> None:
    path, line = _broken(
        tmp_path, "rule: \"tele_type = 'campus'\"", "rule: \"tele_type = 'campus'\", columns: [person_id, pin_code]"
    )
    problem = _one_problem(path)
    assert _line_of(problem, path) == line and "columns pin_code are not captured" in problem


def test_an_expiry_shorter_than_the_delay_is_refused(tmp_path: Path) -> None:
    path, line = _broken(
        tmp_path, "rule: \"tele_type = 'campus'\"", "rule: \"tele_type = 'campus'\", delay_s: 60, expire_after_s: 30"
    )
    problem = _one_problem(path)
    assert _line_of(problem, path) == line and "expire_after_s must be longer than delay_s" in problem


def test_a_negative_delay_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "rule: \"tele_type = 'campus'\"", "rule: \"tele_type = 'campus'\", delay_s: -5")
    problem = _one_problem(path)
    assert _line_of(problem, path) == line and "delay_s" in problem


def test_registry_show_prints_an_interests_rule_allow_list_delay_and_expiry() -> None:
    from mcq.cli.registry import _interest_line
    from mcq.registry.model import Interest

    line = _interest_line(
        Interest(
            listener="X",
            tname="PERSON",
            subtype="Status",
            rule="status = 'A'",
            columns=("person_id", "status"),
            delay_s=60,
            expire_after_s=3600,
        )
    )
    assert line == "PERSON/Status [status = 'A'] columns: person_id, status delay 60 s expires after 3600 s"


def test_a_topic_keeps_deletes_twice_its_slowest_listeners_gap_at_least_a_day() -> None:
    reg = load_registry(CAMPUS)
    hours = {t.ref: reg.delete_retention_s(t) / 3600 for t in reg.tables}
    assert hours["BUILDINGS"] == 48  # CMMS runs nightly
    assert hours["GROUPS"] == 24  # only real-time listeners read it
    assert hours["INSITE_PERSON"] == 48


def test_a_delete_retention_shorter_than_a_reading_listeners_gap_is_refused(tmp_path: Path) -> None:
    path, line = _broken(tmp_path, "  - tname: BUILDINGS\n", "  - tname: BUILDINGS\n    delete_retention_s: 3600\n")
    problem = _one_problem(path)
    assert "listener CMMS runs" in problem and "it would miss deletes" in problem
    assert _line_of(problem, path) == line + 1


def test_two_feeds_of_one_table_asking_for_different_raw_partitions_are_refused_at_the_second(
    tmp_path: Path,
) -> None:
    # campus.people feeds a second table: one raw topic, so one partition count
    second = """  - tname: PERSON
    subtype: Names
    feeds:
      - source: campus
        table: campus.people
        keys: {person_id: person_id}
        columns: [person_id, first_name, last_name]
        raw_partitions: 8

"""
    text = CAMPUS.read_text()
    first = "        watch: [first_name, last_name, birth_date, id_number]\n"
    text = text.replace(first, f"{first[:-1]}\n        raw_partitions: 4\n", 1)
    at = text.index("  - tname: PERSON\n    subtype: Status")
    path = tmp_path / "campus.yaml"
    path.write_text(text[:at] + second + text[at:])
    problem = _one_problem(path)
    assert _line_of(problem, path) == text[:at].count("\n") + 8
    assert "campus.people has one raw topic: table PERSON/PEOPLE's feed asks for 4 partitions" in problem
    assert "this one for 8" in problem


def test_raw_partitions_out_of_range_are_refused(tmp_path: Path) -> None:
    old = "        watch: [first_name, last_name, birth_date, id_number]\n"
    path, _ = _broken(tmp_path, old, f"{old}        raw_partitions: 0\n")
    assert "raw_partitions" in _one_problem(path)
