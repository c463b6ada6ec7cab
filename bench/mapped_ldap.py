"""Apply rate of a directory mapped in YAML against today's hand-written ``ldap`` adapter,
on the same campus world, and of the same mapping's Active Directory twin.

Method: a captured campus world (``--people``), normalised once. The campus's people and
groups are declared as entities (``PERSON_ENTRY``: a person with telephones, addresses,
status, e-mail, departments and logins; ``GROUP_ENTRY``: a Unix group with its members)
and assembled by ``mcq entities run --until-caught-up`` (timed on its own). Then, one
after the other, each as its own ``mcq listen NAME --until-caught-up`` process:

- ``LDAP``: the hand-written adapter (consumers/ldap/entries.py), from the raw tables, into
  an OU of its own;
- ``LDAPMapped``: the same entries declared in YAML (:data:`CAMPUS_DIRECTORY`), from the
  entities, into another OU;
- ``ADMapped`` (with ``--ad``): the persons as AD users (enabled by status) in the local
  stack's Samba AD (``mcq stack up --with ad``).

Rate = entries written / the process's wall time (Python and Kafka start-up included).
Both OpenLDAP OUs are then checked against the source with the demo's own check
(``mcq.demo.checks.check_ldap``, written apart from either adapter): a figure of a wrong
directory is not reported as a figure.

    .venv/bin/python -m bench.mapped_ldap --people 10000 --ad
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ldap3 import Connection, Server

from mcq.demo.checks import check_ldap
from mcq.registry import parse_registry
from mcq.stack.services.ad import BASE_DN as AD_BASE
from mcq.stack.services.ad import ad_directory
from mcq.testing.worlds import captured_world

from .listener_apply import bench_registry, mcq, wait_snapshot
from .table import print_table
from .world import bench_run

CAMPUS_ENTITIES = """
  - tname: PERSON_ENTRY
    comment: a person as a directory sees one
    entity:
      root: PERSON/PEOPLE
      joins:
        - {name: phones, table: PERSON/Telephone, kind: one-to-many, match: {person_id: person_id}}
        - {name: addresses, table: PERSON/Address, kind: one-to-many, match: {person_id: person_id}}
        - {name: status, table: PERSON/Status, kind: one-to-one, match: {person_id: person_id}}
        - {name: udi, table: PERSON/UDI, kind: one-to-one, match: {person_id: person_id}}
        - {name: orgns, table: PERSON/Dir_Orgn, kind: one-to-many, match: {person_id: person_id}}
        - {name: dept, table: DEPARTMENT, kind: many-to-one, match: {pkey_number: dept_id}, via: orgns}
        - {name: logins, table: LOGINS, kind: one-to-many, match: {person_id: person_id}}
  - tname: GROUP_ENTRY
    comment: a Unix group with its members
    entity:
      root: GROUPS
      joins:
        - {name: members, table: GROUP_MEM, kind: one-to-many, match: {pkey_string: pkey_string}}
"""

CAMPUS_DIRECTORY = """
  - name: LDAPMapped
    owner: bench@localhost
    adapter:
      type: ldap
      settings:
        owns_containers: true
        entries:
          PERSON_ENTRY:
            dn: "employeeNumber={person_id},ou=people,BASE"
            object_classes: [top, person, organizationalPerson, inetOrgPerson, {name: posixAccount, with: uidNumber}]
            attributes:
              cn: "default(trim(concat(first_name, ' ', last_name)), person_id)"
              displayName: "default(trim(concat(first_name, ' ', last_name)), person_id)"
              sn: "default(last_name, person_id)"
              givenName: first_name
              telephoneNumber: {each: phones, value: phone_number, when: "tele_type IN ('campus', 'office')"}
              mobile: {each: phones, value: phone_number, when: "tele_type = 'mobile'"}
              homePhone: {each: phones, value: phone_number, when: "tele_type = 'home'"}
              facsimileTelephoneNumber: {each: phones, value: phone_number, when: "tele_type = 'fax'"}
              postalAddress:
                each: addresses
                value: "postal(street, concat(city, ', ', state, ' ', postal_code), country)"
                when: "addr_type = 'campus'"
              homePostalAddress:
                each: addresses
                value: "postal(street, concat(city, ', ', state, ' ', postal_code), country)"
                when: "addr_type = 'home'"
              employeeType: status.status
              mail: udi.email
              departmentNumber: {each: orgns, value: dept_id, order_by: dept_id}
              title: {each: orgns, value: title, order_by: dept_id}
              ou: {each: orgns, value: dept.name, order_by: dept_id}
              uid: {each: logins, value: username, order_by: username}
              uidNumber: {each: logins, value: unixuid, order_by: username, first: true}
              gidNumber: {each: logins, value: "if(unixuid IS NOT NULL, '100')", order_by: username, first: true}
              homeDirectory:
                {each: logins, value: "if(unixuid IS NOT NULL, '/home/' || username)", order_by: username, first: true}
              loginShell:
                each: logins
                value: "if(unixuid IS NOT NULL, default(shell, '/bin/bash'))"
                order_by: username
                first: true
          GROUP_ENTRY:
            dn: "cn={pkey_string},ou=groups,BASE"
            object_classes: [top, posixGroup]
            attributes:
              gidNumber: "default(gid, '0')"
              description: description
              memberUid: {each: members, value: username}
"""
"""The sample campus's LDAP listener (consumers/ldap/entries.py) as a mapping; ``BASE`` is
replaced by the bench's OU."""

CAMPUS_AD = """
  - name: ADMapped
    owner: bench@localhost
    adapter:
      type: ldap
      settings:
        target: ad
        directory: active-directory
        entries:
          PERSON_ENTRY:
            dn: "CN=p{person_id},OU=people,BASE"
            object_classes: [top, person, organizationalPerson, user]
            attributes:
              sAMAccountName: "'p' || person_id"
              userPrincipalName: "'p' || person_id || '@mcq.test'"
              displayName: "default(trim(concat(first_name, ' ', last_name)), person_id)"
              givenName: first_name
              sn: last_name
              telephoneNumber: {each: phones, value: phone_number, when: "tele_type = 'campus'", first: true}
              mail: udi.email
              userAccountControl: >-
                CASE WHEN status.status IN ('Student', 'Employee', 'Faculty', 'Staff') THEN 512 ELSE 514 END
"""

INTERESTS = """
  - {listener: LDAPMapped, tname: PERSON_ENTRY}
  - {listener: LDAPMapped, tname: GROUP_ENTRY}
"""


def _ldap(url: str, user: str, password: str, ca: str | None = None) -> Connection:
    import ssl

    from ldap3 import Tls

    tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=ca, version=ssl.PROTOCOL_TLS_CLIENT) if ca else None
    return Connection(Server(url, tls=tls), user=user, password=password, auto_bind=True)


def _count(conn: Connection, base: str) -> int:
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    return sum(1 for e in found if e.get("type") == "searchResEntry") - 1  # not the container


def _wipe(conn: Connection, base: str, tree_delete: bool = False) -> None:
    if tree_delete:
        conn.delete(base, controls=[("1.2.840.113556.1.4.805", True, None)])
        return
    found = conn.extend.standard.paged_search(base, "(objectClass=*)", attributes=["1.1"], paged_size=1000,
                                              generator=False)  # fmt: skip
    for dn in sorted((e["dn"] for e in found if e.get("type") == "searchResEntry"), key=lambda d: -d.count(",")):
        conn.delete(dn)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, default=10_000)
    ap.add_argument("--ad", action="store_true", help="also the AD twin (needs `mcq stack up --with ad`)")
    args = ap.parse_args(argv)
    run = bench_run()
    token, settings, env, work = run.token, run.settings, run.env, run.work
    s = settings.ldap
    ldap = _ldap(s.url, s.bind_dn, s.password.get_secret_value())
    hand, mapped = f"ou=b{token},{s.base_dn}", f"ou=m{token},{s.base_dn}"
    for base in (hand, mapped):
        ldap.add(base, ["organizationalUnit"], {"ou": base.split(",")[0][3:]})
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
        ad.add(f"OU=people,{ad_base}", ["organizationalUnit"])
        env = {**env, "MCQ_TARGETS": json.dumps({"ad": target})}
    rows: list[str] = []
    try:
        print(f"loading and capturing {args.people:,} people ...", flush=True)
        with captured_world(settings, people=args.people, seed=11) as world:
            text = bench_registry(world.registry_yaml, token, hand)
            listeners = CAMPUS_DIRECTORY.replace("BASE", mapped) + (
                CAMPUS_AD.replace("BASE", ad_base) if args.ad else ""
            )
            text = text.replace("\nlisteners:\n", f"\n{CAMPUS_ENTITIES}\nlisteners:\n{listeners}\n", 1)
            interests = INTERESTS + ("  - {listener: ADMapped, tname: PERSON_ENTRY}\n" if args.ad else "")
            text = text.replace("\ninterests:\n", "\ninterests:\n" + interests, 1)
            registry_file = work / "registry.yaml"
            registry_file.write_text(text)
            registry = parse_registry(text, str(registry_file))
            raw = sorted({world.topic(f.table) for t in registry.tables for f in t.feeds})
            wait_snapshot(settings, raw)
            reg = ("--registry", str(registry_file))
            print("normalising the initial load ...", flush=True)
            mcq(env, "streams", "normalize", *reg, "--once", "--checkpoint", str(work / "ckpt"))
            seconds, _ = mcq(env, "entities", "run", *reg, "--until-caught-up", "--no-http")
            people = registry.table("PERSON", "PEOPLE")
            assert people is not None
            rows.append(f"| `mcq entities run` (persons and groups assembled) | {args.people:,} people | "
                        f"{seconds:.1f} s | start to exit |")  # fmt: skip
            print(rows[-1], flush=True)
            for name, base, label in (("LDAP", hand, "hand-written `ldap` adapter (from the raw tables)"),
                                      ("LDAPMapped", mapped, "mapped in YAML (from the entities)")):  # fmt: skip
                seconds, _ = mcq(env, "listen", name, *reg, "--until-caught-up", "--no-http")
                n = _count(ldap, base) - 2  # not the two containers
                rows.append(f"| {label} | {n:,} entries | {seconds:.1f} s | {n / seconds:,.0f} entries/s |")
                print(rows[-1], flush=True)
                check = check_ldap(settings, registry, f"ou=people,{base}", f"ou=groups,{base}", listener="LDAP")
                print(f"check {name}: {'ok' if check.ok else 'WRONG'} ({check.checked:,} checked)", flush=True)
                if not check.ok:
                    raise SystemExit(f"{name}: the directory is not the source's state: {check.problems[:5]}")
            if ad is not None:
                seconds, _ = mcq(env, "listen", "ADMapped", *reg, "--until-caught-up", "--no-http")
                n = _count(ad, f"OU=people,{ad_base}")
                rows.append(f"| Active Directory (Samba), mapped in YAML | {n:,} users | {seconds:.1f} s | "
                            f"{n / seconds:,.0f} entries/s |")  # fmt: skip
                print(rows[-1], flush=True)
                if n != args.people:
                    raise SystemExit(f"ADMapped: {n} users for {args.people} people")
    finally:
        for base in (hand, mapped):
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
