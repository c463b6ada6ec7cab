"""The interests editor's validation, without servers: the registry with the edited
interests is validated whole, and each problem is given at its field with the message
`mcq registry validate` gives for the same file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mcq.console.pages.interests import _raw, validate
from mcq.registry import RegistryInvalid, load_registry
from tests import PROJECT_ROOT

CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"


def _form(**values: str) -> dict[str, str]:
    fields = ("listener", "tname", "subtype", "rule", "columns", "delay_s", "expire_after_s", "comment")
    return {**dict.fromkeys(fields, ""), "listener": "BEST", "tname": "PERSON", "subtype": "*", **values}


def _validate_file(tmp_path: Path, interest: dict[str, object]) -> str:
    """What `mcq registry validate` says of the campus file with INTEREST added."""
    data = yaml.safe_load(CAMPUS.read_text())
    data["interests"].append(interest)
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RegistryInvalid) as caught:
        load_registry(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("rule", {"rule": "status = = 'x'"}),  # does not parse
        ("rule", {"rule": "no_such_column = 1"}),  # reads a column no covered table has
        ("tname", {"tname": "NOWHERE"}),
        ("columns", {"columns": "person_id, no_such_column"}),
        ("delay_s", {"delay_s": "-3"}),
    ],
)
def test_a_bad_interest_is_refused_at_its_field_with_the_validators_message(
    tmp_path: Path, field: str, values: dict[str, str]
) -> None:
    registry = load_registry(CAMPUS)
    raw = [i.model_dump(exclude_defaults=True) for i in registry.interests]
    new = _raw(_form(**values))
    wanted, errors = validate(registry, [*raw, new], len(raw))
    assert wanted is None
    assert list(errors) == [field], errors
    assert errors[field] in _validate_file(tmp_path, new)


def test_a_good_interest_gives_the_registry_with_it(tmp_path: Path) -> None:
    registry = load_registry(CAMPUS)
    raw = [i.model_dump(exclude_defaults=True) for i in registry.interests]
    new = _raw(_form(listener="BEST", tname="LOCATIONS", subtype="", rule=""))
    new["subtype"] = None
    wanted, errors = validate(registry, [*raw, new], len(raw))
    assert errors == {}
    assert wanted is not None and len(wanted.interests) == len(registry.interests) + 1


def test_a_second_interest_in_the_same_table_is_refused_naming_the_one_to_edit() -> None:
    registry = load_registry(CAMPUS)
    first = registry.interests[0]
    raw = [i.model_dump(exclude_defaults=True) for i in registry.interests]
    twin = {**raw[0], "rule": None}
    wanted, errors = validate(registry, [*raw, twin], len(raw))
    assert wanted is None and list(errors) == ["tname"]
    assert f"{first.listener} already has an interest in {first.tname}" in errors["tname"]
