"""A new user's own people schema for the mapping tests (not the campus): persons with a
status, their accounts and telephones, groups and their memberships (a many-to-many of
groups and accounts); entities of an account (its owner, the owner's telephones) and of
a group (its members' accounts). A format template: ``{src}``, ``{schema}``, ``{slot}``,
``{base}`` (the directory subtree of the test) and the listeners' part ``{listeners}``."""

DDL = [
    "CREATE TABLE {s}.persons (id int PRIMARY KEY, given text, family text, status text, born date)",
    "CREATE TABLE {s}.accounts (login text PRIMARY KEY, person_id int, uid_number int)",
    "CREATE TABLE {s}.telephones (id int PRIMARY KEY, person_id int, kind text, number text)",
    "CREATE TABLE {s}.groups (name text PRIMARY KEY, gid int, description text)",
    "CREATE TABLE {s}.memberships (group_name text, login text, PRIMARY KEY (group_name, login))",
]

PEOPLE = """
sources:
  - {{name: {src}, schemas: [{schema}], slot: {slot}, publication: {slot}}}
tables:
  - tname: PERS
    feeds:
      - {{source: {src}, table: {schema}.persons, keys: {{person_id: id}}, columns: [id, given, family, status, born]}}
  - tname: ACCT
    feeds:
      - source: {src}
        table: {schema}.accounts
        keys: {{pkey_string: login}}
        columns: [login, person_id, uid_number]
  - tname: PHONE
    feeds:
      - {{source: {src}, table: {schema}.telephones, keys: {{pkey_number: id}}, columns: [id, person_id, kind, number]}}
  - tname: GRP
    feeds:
      - {{source: {src}, table: {schema}.groups, keys: {{pkey_string: name}}, columns: [name, gid, description]}}
  - tname: MEMBER
    feeds:
      - source: {src}
        table: {schema}.memberships
        keys: {{pkey_string: group_name, aux_string: login}}
        columns: [group_name, login]
  - tname: ACCOUNT_ENTRY
    entity:
      root: ACCT
      joins:
        - {{name: owner, table: PERS, kind: many-to-one, match: {{person_id: person_id}}}}
        - {{name: phones, table: PHONE, kind: one-to-many, match: {{person_id: person_id}}, via: owner}}
  - tname: GROUP_ENTRY
    entity:
      root: GRP
      joins:
        - {{name: members, table: MEMBER, kind: one-to-many, match: {{group_name: pkey_string}}}}
        - {{name: account, table: ACCT, kind: many-to-one, match: {{pkey_string: login}}, via: members}}
{listeners}
"""

STATUS = {"A": "Active", "S": "Suspended", "R": "Retired"}

LDAP_LISTENER = """
  - name: {name}
    owner: idm@example
    adapter:
      type: ldap
      settings:
        directory: openldap
        entries:
          ACCOUNT_ENTRY:
            dn: "uid={{login}},ou=staff,{base}"
            object_classes: [top, person, organizationalPerson, inetOrgPerson, posixAccount]
            attributes:
              cn: "default(trim(concat(owner.given, ' ', owner.family)), login)"
              sn: "default(owner.family, login)"
              givenName: owner.given
              telephoneNumber: {{each: owner.phones, value: number, when: "kind = 'office'"}}
              mobile: {{each: owner.phones, value: number, when: "kind = 'mobile'"}}
              employeeType: "lookup('status', owner.status, 'Unknown')"
              uidNumber: uid_number
              gidNumber: "'100'"
              homeDirectory: "'/home/' || login"
              loginShell: "CASE WHEN owner.status = 'A' THEN '/bin/bash' ELSE '/usr/sbin/nologin' END"
            owned: [title]
            lookups:
              status: {{A: Active, S: Suspended, R: Retired}}
          GROUP_ENTRY:
            dn: "cn={{pkey_string}},ou=teams,{base}"
            object_classes: [top, posixGroup]
            attributes:
              gidNumber: gid
              memberUid: {{each: members, value: account.login, when: "account.login IS NOT NULL"}}
"""
