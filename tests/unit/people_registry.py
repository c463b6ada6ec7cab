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
        - {{name: holder, table: PERS, kind: many-to-one, match: {{person_id: person_id}}, via: account}}
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

IMPORT_LISTENER = """
  - name: {name}
    owner: facilities@example
    adapter:
      type: sql_import
      settings:
        table: account_import
        vendor_schema: {vendor}
        read_back: {read_back}
        rows:
          ACCOUNT_ENTRY:
            columns:
              login: pkey_string
              full_name: "trim(concat(owner.given, ' ', owner.family))"
              status: >-
                CASE WHEN owner.status = 'A' THEN 'active' WHEN owner.status = 'S' THEN 'suspended'
                WHEN owner.status = 'R' THEN 'retired-employee' END
              phone: {{each: owner.phones, value: number, when: "kind = 'office'", order_by: id, first: true}}
            on_delete: {{status: "'gone'"}}
            key_column: login
"""
"""The import listener: a retired account's status is longer than the vendor's column
takes (its row is refused by the database, and only its)."""

VENDOR = """
CREATE SCHEMA {v};
CREATE TABLE {v}.people (login text PRIMARY KEY, full_name text NOT NULL, status varchar(12), phone text);
CREATE TABLE {v}.account_import (
    import_id bigserial PRIMARY KEY, login text NOT NULL, full_name text, status text, phone text,
    mcq_key text, mcq_position text, imported_at timestamptz NOT NULL DEFAULT now());
CREATE FUNCTION {v}.t_account_import() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- the vendor's business rule: no account without a name
    IF coalesce(btrim(NEW.full_name), '') = '' THEN
        RAISE EXCEPTION 'VENDOR: account % has no name', NEW.login USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO {v}.people (login, full_name, status, phone)
    VALUES (NEW.login, NEW.full_name, NEW.status, NEW.phone)
    ON CONFLICT (login) DO UPDATE SET full_name = EXCLUDED.full_name, status = EXCLUDED.status,
                                      phone = EXCLUDED.phone;
    RETURN NEW;
END $$;
CREATE TRIGGER t_account_import BEFORE INSERT ON {v}.account_import
    FOR EACH ROW EXECUTE FUNCTION {v}.t_account_import();
"""
"""The vendor's schema: its table, the import table mcq writes, and the refusing trigger."""

VENDOR_READ_BACK = "SELECT login, full_name, status, phone, status = 'gone' AS retired FROM {v}.people"

AD_LISTENER = """
  - name: {name}
    owner: idm@example
    adapter:
      type: ldap
      settings:
        target: ad
        directory: active-directory
        entries:
          ACCOUNT_ENTRY:
            dn: "CN={{default(trim(concat(owner.given, ' ', owner.family)), login)}},OU=staff,{base}"
            object_classes: [top, person, organizationalPerson, user]
            attributes:
              sAMAccountName: login
              userPrincipalName: "login || '@mcq.test'"
              displayName: "default(trim(concat(owner.given, ' ', owner.family)), login)"
              givenName: owner.given
              sn: owner.family
              telephoneNumber: {{each: owner.phones, value: number, when: "kind = 'office'", order_by: id, first: true}}
              otherTelephone: {{each: owner.phones, value: number, when: "kind = 'office'", order_by: id}}
              mobile: {{each: owner.phones, value: number, when: "kind = 'mobile'", order_by: id, first: true}}
              userAccountControl: "CASE WHEN owner.status = 'A' THEN 512 ELSE 514 END"
          GROUP_ENTRY:
            dn: "CN={{pkey_string}},OU=teams,{base}"
            object_classes: [top, group]
            attributes:
              sAMAccountName: "'grp-' || pkey_string"
              member:
                each: members
                value: >-
                  dn('CN', default(trim(concat(account.holder.given, ' ', account.holder.family)), account.login),
                     'OU=staff,{base}')
                when: "account.login IS NOT NULL"
"""
"""An Active Directory listener: a user's CN is the owner's name (a new name renames the
entry), enabled or disabled by the owner's status; groups with members by DN."""
