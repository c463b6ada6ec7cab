"""The README's five-minute tour, run as a newcomer runs it after `make run` (`make tour`,
which .ci/run runs right after `make run`, on its stack and its campus): its shell blocks in
order in one bash, the long-running processes as background jobs of that shell, then
`kill %1 %2 %3` as its step 4 says.

What the directory must hold is read from the source with SQL, never from the code under
test: the fax number the tour's insert gave its person, on that person's LDAP entry;
and `mcq trace` follows that change from its capture into the person's entry, applied by the
LDAP listener."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import psycopg
import pytest
from ldap3 import BASE

from mcq.config import Settings
from mcq.stack import Stack
from tests import PROJECT_ROOT
from tests.support.ldap_world import ldap
from tests.support.shell import Shell, blocks
from tests.support.waiting import until

README = PROJECT_ROOT / "README.md"

pytestmark = pytest.mark.tour


def tour() -> str:
    """The README's tour section."""
    text = README.read_text()
    start = text.index("## A five-minute tour")
    return text[start : text.index("\n## ", start + 1)]


def source_fax(settings: Settings, person: int) -> str | None:
    with psycopg.connect(settings.source.dsn()) as conn:
        try:
            row = conn.execute(
                "SELECT phone_number FROM campus.directory_telephone WHERE person_id = %s AND tele_type = 'fax'",
                (person,),
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            pytest.fail("no campus world in the source: the tour runs after `make run` (make tour)")
    return None if row is None else str(row[0])


def directory_fax(settings: Settings, person: int) -> list[str]:
    """A person's fax numbers in the directory, read with ldap3 (not the tour's ldapsearch)."""
    with ldap(settings) as conn:
        dn = f"employeeNumber={person},ou=people,{settings.ldap.base_dn}"
        if not conn.search(dn, "(objectClass=*)", BASE, attributes=["facsimileTelephoneNumber"]):
            return []
        return sorted(str(v) for v in conn.entries[0]["facsimileTelephoneNumber"].values)


@pytest.mark.timeout(900)
def test_the_readme_tour_runs_as_written_and_the_directory_ends_as_the_source(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    section = tour()
    scripts = [body for lang, body in blocks(section) if lang == "sh"]
    assert len(scripts) == 2, [s.splitlines()[0] for s in scripts]
    starts, change = scripts
    assert "mcq listen LDAP" in starts and "INSERT INTO campus.directory_telephone" in change
    values = re.search(r"VALUES \((\d+), 'fax', '([^']+)'\)", change)
    assert values is not None, change
    person, number = int(values.group(1)), values.group(2)
    path = re.search(r"`(export PATH=[^`]+)`", section)
    stop = re.search(r"`(kill %1 %2 %3)`", section)
    assert path is not None and stop is not None
    background = [line for line in starts.splitlines() if line.rstrip().split("#")[0].rstrip().endswith("&")]
    foreground = [line for line in starts.splitlines() if line not in background]
    assert len(background) == 3

    console = re.search(r"Open (http://127\.0\.0\.1:\d+)", section)
    assert console is not None
    asked = httpx.get(console.group(1), follow_redirects=True, timeout=30)  # step 1: the console answers
    assert asked.status_code in (200, 401) and "mcq" in asked.text.lower(), (asked.status_code, asked.text[:300])

    shell = Shell(tmp_path)
    try:
        shell.start(f"cd {tmp_path}; " + path.group(1).replace("$PWD", str(PROJECT_ROOT)))
        shell.start("\n".join(background))  # jobs of the shell itself: `kill %1 %2 %3` names them
        shell.run("\n".join(foreground), strict=False)  # `mcq status`: a reader reads it, whatever it exits

        out = shell.run(change, timeout_s=120, strict=False)  # its ldapsearch may run before the change arrives
        said = out.rsplit("__block_", 2)[-2]  # this block's output only
        assert "INSERT 0 1" in said and "result: 0 Success" in said, said[-3000:]  # psql and ldapsearch worked
        expected = source_fax(settings, person)
        assert expected == number, expected  # the oracle, checked against the tour's insert

        def directory_is_the_source() -> None:
            assert directory_fax(settings, person) == [expected]

        until(time.monotonic() + 600, directory_is_the_source)  # the first start of each process included
        traces = [line.split("#")[0] for line in change.splitlines() if line.startswith("mcq trace")]
        assert len(traces) == 2 and "PERSON_ENTRY" in traces[1], traces

        def traced_to_ldap() -> None:
            row = shell.run(traces[0], timeout_s=120).rsplit("__block_", 2)[-2]  # this run's output only
            at = re.findall(r"change (\d+/\d+) (?:INSERT|UPDATE) committed", row)
            assert at and "normaliser captured" in row, row[-3000:]
            entry = shell.run(traces[1], timeout_s=120).rsplit("__block_", 2)[-2]
            # the same source change, in the person's entry, applied by the LDAP listener
            changes = entry.split("\n  change ")[1:]
            assert any(c.startswith(at[-1]) and "listener LDAP applied" in c for c in changes), entry[-3000:]

        until(time.monotonic() + 120, traced_to_ldap)
        shell.start(stop.group(1))
        time.sleep(2)
        assert "no such job" not in shell.log.read_text()
    finally:
        shell.close()
