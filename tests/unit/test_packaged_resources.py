"""What mcq reads at run time comes from its own distribution (mcq.resources), the same
bytes as the checkout's folders; a file missing from an install is one line naming it and
the install; a command whose extra is not installed says which extra in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcq.cli.app import EXTRAS, missing_extra
from mcq.contract import schema_text
from mcq.resources import ResourceMissing, names, read_text
from tests import PROJECT_ROOT


@pytest.mark.parametrize(("folder", "suffix"), [("schemas", ".avsc"), ("connect", ".json"), ("examples", ".yaml")])
def test_every_packaged_file_is_the_checkouts_file(folder: str, suffix: str) -> None:
    shipped = names(folder, suffix)  # type: ignore[arg-type]
    assert shipped == sorted(p.name for p in (PROJECT_ROOT / folder).glob(f"*{suffix}"))
    for name in shipped:
        assert read_text(folder, name) == (PROJECT_ROOT / folder / name).read_text()  # type: ignore[arg-type]


def test_the_wheel_declares_every_packaged_folder_as_package_data() -> None:
    text = (PROJECT_ROOT / "pyproject.toml").read_text()
    for pattern in ("schemas/*.avsc", "connect/*.json", "examples/*.yaml", "examples/*.sql"):
        assert f'"{pattern}"' in text, pattern


def test_a_missing_resource_is_one_line_naming_it_and_the_install() -> None:
    with pytest.raises(ResourceMissing) as caught:
        read_text("schemas", "no_such_schema.avsc")
    line = str(caught.value)
    assert "\n" not in line and "schemas/no_such_schema.avsc" in line and "meta-change-queue" in line


def test_schema_text_reads_the_packaged_schema() -> None:
    assert '"name"' in schema_text("change_key")


def test_a_module_of_an_extra_names_the_extra_to_install() -> None:
    line = missing_extra(ModuleNotFoundError("No module named 'pyspark'", name="pyspark.sql"))
    assert line == "needs the 'spark' extra (pyspark is not installed): pip install 'meta-change-queue[spark]'"
    assert missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope")) is None


def test_every_extras_module_is_in_the_extra_it_is_named_for() -> None:
    import tomllib

    extras = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    distribution = {"multipart": "python-multipart", "argon2": "argon2-cffi"}
    for module, extra in EXTRAS.items():
        wanted = distribution.get(module, module)
        assert any(req.startswith(wanted) for req in extras[extra]), f"{module}: not in [{extra}]"


def test_the_base_install_needs_neither_spark_nor_the_console() -> None:
    """The modules a listener runs import nothing of the extras (a listener-only install)."""
    probe = (
        "import sys, consumers.runtime.listener, mcq.cli, mcq.cli.listen, mcq.contract, mcq.connect_rest;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{sorted(EXTRAS)!r});"
        "print(','.join(bad))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == ""
