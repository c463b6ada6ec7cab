"""Apply rate of the campus's directories as declared in YAML (examples/campus.yaml): the
``LDAP`` listener into OpenLDAP and, with ``--ad``, the ``ADSI`` listener into the local
stack's Samba Active Directory.

Method: a captured campus world (``--people``), normalised once; ``mcq entities run
--until-caught-up`` assembles the entities the listeners map (``PERSON_ENTRY``: a person
with telephones, addresses, status, e-mail, departments and logins; ``GROUP_ENTRY``: a
Unix group with its members; ``ACCOUNT_ENTRY``: an account with its owner), timed on its
own. Then each listener runs as its own ``mcq listen NAME --until-caught-up`` process:
``LDAP`` into an OU of its own, ``ADSI`` (``mcq stack up --with ad``) as AD users, enabled
or disabled by their owner's status, and groups with their members by DN.

Rate = entries written / the process's wall time (Python and Kafka start-up included).
The OpenLDAP OU is then checked against the source with the demo's own check
(``mcq.demo.checks.check_ldap``, written apart from the mapping): a figure of a wrong
directory is not reported as a figure. The AD's users are counted against the source's
accounts. (Until 2026-11-29 this bench also ran the hand-written campus adapter the
mapping replaced: 437 entries/s against the mapping's 603 on 10,000 people; BENCHMARKS.md.)

    .venv/bin/python -m bench.mapped_ldap --people 10000 --ad
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import psycopg
from ldap3 import Connection, Server

from mcq.config import Settings
from mcq.demo.checks import check_ldap
from mcq.registry import Registry, parse_registry
from mcq.stack.services.ad import BASE_DN as AD_BASE
from mcq.stack.services.ad import ad_directory
from mcq.testing.worlds import captured_world

from .listener_apply import bench_registry, mcq, wait_snapshot
from .table import print_table
from .world import bench_run


def _ldap(url: str, user: str, password: str, ca: str | None = None) -> Connection:
    import ssl

    from ldap3 import Tls

    tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=ca, version=ssl.PROTOCOL_TLS_CLIENT) if ca else None
    return Connection(Server(url, tls=tls), user=user, password=password, auto_bind=True)


def _count(conn: Connection, base: str) -> int:
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    return sum(1 for e in found if e.get("type") == "searchResEntry") - 1  # not the container


def _wipe_below(conn: Connection, base: str) -> None:
    """Every entry below ``base``, deleted; ``base`` stays."""
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False, search_scope="LEVEL")  # fmt: skip
    for dn in sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda d: -d.count(",")):
        _wipe(conn, dn)


def _wipe(conn: Connection, base: str, tree_delete: bool = False) -> None:
    if tree_delete:
        conn.delete(base, controls=[("1.2.840.113556.1.4.805", True, None)])
        return
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    for dn in sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda d: -d.count(",")):
        conn.delete(dn)


def _ldapsearch_ldif(url: str, user: str, password: str, base: str) -> str:
    """The subtree under ``base`` as LDIF (user attributes only), as an administrator exports it."""
    import subprocess

    command = ["ldapsearch", "-x", "-LLL", "-o", "ldif-wrap=no", "-H", url, "-D", user, "-w", password, "-b", base]
    return subprocess.run([*command, "(objectClass=*)"], capture_output=True, text=True, check=True).stdout


def _ldapadd_seconds(url: str, user: str, password: str, ldif: Path) -> float:
    """``ldapadd`` of ``ldif`` (OpenLDAP's client over the same TCP connection kind as the
    listener's ldap3): its seconds, start to exit."""
    import subprocess
    import time

    started = time.monotonic()
    done = subprocess.run(["ldapadd", "-x", "-H", url, "-D", user, "-w", password, "-f", str(ldif)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"ldapadd exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def _rebuild_beside_ldapadd(env: dict[str, str], reg: tuple[str, ...], settings: Settings, registry: Registry,
                            base: str, work: Path) -> list[str]:  # fmt: skip
    """``mcq rebuild LDAP`` into emptied containers, checked against the source, then
    ``ldapadd`` of the same entries (the rebuilt directory exported as LDIF) into an
    emptied tree: both timed start to exit, as an operator runs them. Table rows."""
    s = settings.ldap
    ldap = _ldap(s.url, s.bind_dn, s.password.get_secret_value())
    containers = [f"ou=people,{base}", f"ou=groups,{base}"]
    for ou in containers:
        _wipe_below(ldap, ou)
    seconds, out = mcq(env, "rebuild", "LDAP", *reg)
    print(out, flush=True)  # its phases, timed
    engine = "read directly" if "directly, without Spark" in out else "a Spark job"
    n = _count(ldap, base) - 2
    check = check_ldap(settings, registry, containers[0], containers[1])
    print(f"check LDAP after the rebuild: {'ok' if check.ok else 'WRONG'} ({check.checked:,} checked)", flush=True)
    if not check.ok:
        raise SystemExit(f"LDAP: the rebuilt directory is not the source's state: {check.problems[:5]}")
    ldif = work / "rebuilt.ldif"
    ldif.write_text(_ldapsearch_ldif(s.url, s.bind_dn, s.password.get_secret_value(), base))
    exported = ldif.read_text().count("\ndn: ") + ldif.read_text().startswith("dn: ")
    _wipe(ldap, base)
    ldapadd_s = _ldapadd_seconds(s.url, s.bind_dn, s.password.get_secret_value(), ldif)
    if _count(ldap, base) - 2 != n or exported != n + 3:
        raise SystemExit(f"ldapadd: {_count(ldap, base) - 2} entries for the {n} rebuilt ({exported} exported)")
    ldap.unbind()
    ratio = seconds / ldapadd_s
    return [
        f"| `mcq rebuild LDAP` into emptied OUs ({engine}), start to exit | {n:,} entries | {seconds:.1f} s | "
        f"{n / seconds:,.0f} entries/s; {ratio:.1f}x ldapadd's time |",
        f"| `ldapadd` of the same entries (the rebuilt OU as LDIF), same run | {n + 3:,} entries | {ldapadd_s:.1f} s | "
        f"{(n + 3) / ldapadd_s:,.0f} entries/s (peer) |",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=10_000)
    ap.add_argument("--ad", action="store_true", help="also the ADSI listener (needs `mcq stack up --with ad`)")
    args = ap.parse_args(argv)
    run = bench_run()
    token, settings, env, work = run.token, run.settings, run.env, run.work
    s = settings.ldap
    ldap = _ldap(s.url, s.bind_dn, s.password.get_secret_value())
    base = f"ou=m{token},{s.base_dn}"
    ldap.add(base, ["organizationalUnit"], {"ou": f"m{token}"})
    for ou in ("people", "groups"):
        ldap.add(f"ou={ou},{base}", ["organizationalUnit"], {"ou": ou})
    ad_base = f"OU=b{token},{AD_BASE}"
    ad = None
    if args.ad:
        from mcq.stack import Stack

        Stack(settings, only=["ad"], with_=["ad"]).up()  # started when it is not running
        target = ad_directory(settings)
        ad = _ldap(target["url"], target["bind_dn"], target["password"], target["ca_file"])
        ad.add(ad_base, ["organizationalUnit"])
        for ou in ("people", "groups"):
            ad.add(f"OU={ou},{ad_base}", ["organizationalUnit"])
        env = {**env, "MCQ_TARGETS": json.dumps({"ad": target})}
    rows: list[str] = []
    try:
        print(f"loading and capturing {args.people:,} people ...", flush=True)
        with captured_world(settings, people=args.people, seed=11) as world:
            text = bench_registry(world.registry_yaml, token, base)
            text = text.replace("OU=people,{base}", f"OU=people,{ad_base}").replace(
                "OU=groups,{base}", f"OU=groups,{ad_base}"
            )
            registry_file = work / "registry.yaml"
            registry_file.write_text(text)
            registry = parse_registry(text, str(registry_file))
            raw = sorted({world.topic(f.table) for t in registry.tables for f in t.feeds})
            wait_snapshot(settings, raw)
            reg = ("--registry", str(registry_file))
            print("normalising the initial load ...", flush=True)
            mcq(env, "streams", "normalize", *reg, "--once", "--checkpoint", str(work / "ckpt"))
            seconds, _ = mcq(env, "entities", "run", *reg, "--until-caught-up", "--no-http")
            rows.append(f"| `mcq entities run` (persons, accounts and groups assembled) | {args.people:,} people | "
                        f"{seconds:.1f} s | start to exit |")  # fmt: skip
            print(rows[-1], flush=True)
            seconds, _ = mcq(env, "listen", "LDAP", *reg, "--until-caught-up", "--no-http")
            n = _count(ldap, base) - 2  # not the two containers
            rows.append(f"| OpenLDAP, the campus's `LDAP` mapping | {n:,} entries | {seconds:.1f} s | "
                        f"{n / seconds:,.0f} entries/s |")  # fmt: skip
            print(rows[-1], flush=True)
            check = check_ldap(settings, registry, f"ou=people,{base}", f"ou=groups,{base}")
            print(f"check LDAP: {'ok' if check.ok else 'WRONG'} ({check.checked:,} checked)", flush=True)
            if not check.ok:
                raise SystemExit(f"LDAP: the directory is not the source's state: {check.problems[:5]}")
            rows.extend(_rebuild_beside_ldapadd(env, reg, settings, registry, base, work))
            print(*rows[-2:], sep="\n", flush=True)
            if ad is not None:
                seconds, _ = mcq(env, "listen", "ADSI", *reg, "--until-caught-up", "--no-http")
                users = _count(ad, f"OU=people,{ad_base}")
                n = users + _count(ad, f"OU=groups,{ad_base}")
                rows.append(f"| Active Directory (Samba), the campus's `ADSI` mapping | {n:,} users and groups | "
                            f"{seconds:.1f} s | {n / seconds:,.0f} entries/s |")  # fmt: skip
                print(rows[-1], flush=True)
                with psycopg.connect(settings.source.dsn()) as conn:
                    row = conn.execute(f"SELECT count(*) FROM {world.schema}.logins").fetchone()
                accounts = int(row[0]) if row else 0
                if users != accounts:
                    raise SystemExit(f"ADSI: {users} users for {accounts} accounts")
    finally:
        _wipe(ldap, base)
        ldap.unbind()
        if ad is not None:
            _wipe(ad, ad_base, tree_delete=True)
            ad.unbind()
    caption = f"{args.people:,} people, {os.cpu_count()} cores, the whole local stack on the same machine"
    print_table(caption, ["measurement", "size", "wall time", "rate"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
