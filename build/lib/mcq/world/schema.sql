-- The sample world: a campus identity database (the paper's SIMON) that the Meta Change
-- Queue captures. `{schema}` is replaced by the loader with a quoted schema name
-- (`campus` for the demo, a per-test schema in tests). Idempotent: every statement may
-- run again on an existing schema.
--
-- updated_at / updated_by / last_login are "housekeeping" columns: they change on every
-- touch, and the registry's `watch` lists exclude them so such touches reach no listener.

CREATE TABLE IF NOT EXISTS {schema}.people (
    person_id   bigint      PRIMARY KEY,
    first_name  text        NOT NULL,
    last_name   text        NOT NULL,
    birth_date  date,
    id_number   text        UNIQUE,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text
);

CREATE TABLE IF NOT EXISTS {schema}.person_status (
    person_id   bigint      PRIMARY KEY REFERENCES {schema}.people ON DELETE CASCADE,
    status      text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {schema}.directory_telephone (
    person_id     bigint      REFERENCES {schema}.people ON DELETE CASCADE,
    tele_type     text        CHECK (tele_type IN ('home', 'campus', 'mobile', 'fax')),
    phone_number  text        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (person_id, tele_type)
);

CREATE TABLE IF NOT EXISTS {schema}.addresses (
    person_id    bigint      REFERENCES {schema}.people ON DELETE CASCADE,
    addr_type    text        CHECK (addr_type IN ('home', 'campus', 'mailing')),
    street       text,
    city         text,
    state        text,
    postal_code  text,
    country      text,
    updated_at   timestamptz DEFAULT now(),
    PRIMARY KEY (person_id, addr_type)
);

CREATE TABLE IF NOT EXISTS {schema}.departments (
    dept_id  integer PRIMARY KEY,
    name     text    NOT NULL UNIQUE,
    phone    text
);

CREATE TABLE IF NOT EXISTS {schema}.directory_orgn (
    person_id  bigint  REFERENCES {schema}.people ON DELETE CASCADE,
    dept_id    integer REFERENCES {schema}.departments,
    title      text,
    PRIMARY KEY (person_id, dept_id)
);

CREATE TABLE IF NOT EXISTS {schema}.udi (
    person_id   bigint  PRIMARY KEY REFERENCES {schema}.people ON DELETE CASCADE,
    class_year  integer,
    web_page    text,
    email       text
);

CREATE TABLE IF NOT EXISTS {schema}.logins (
    username      text        PRIMARY KEY,
    owner         bigint      REFERENCES {schema}.people ON DELETE CASCADE,
    unixuid       integer     UNIQUE,
    source        text,
    admit_cohort  text,
    shell         text,
    last_login    timestamptz
);

CREATE TABLE IF NOT EXISTS {schema}.unix_groups (
    group_name   text    PRIMARY KEY,
    gid          integer UNIQUE NOT NULL,
    description  text
);

CREATE TABLE IF NOT EXISTS {schema}.group_members (
    group_name  text REFERENCES {schema}.unix_groups ON DELETE CASCADE,
    username    text REFERENCES {schema}.logins ON DELETE CASCADE,
    PRIMARY KEY (group_name, username)
);

CREATE TABLE IF NOT EXISTS {schema}.sites (
    site_id  integer PRIMARY KEY,
    name     text    NOT NULL
);

CREATE TABLE IF NOT EXISTS {schema}.buildings (
    building_id  integer PRIMARY KEY,
    site_id      integer REFERENCES {schema}.sites,
    name         text    NOT NULL,
    code         text    UNIQUE
);

CREATE TABLE IF NOT EXISTS {schema}.floors (
    building_id  integer REFERENCES {schema}.buildings ON DELETE CASCADE,
    floor_code   text,
    description  text,
    PRIMARY KEY (building_id, floor_code)
);

CREATE TABLE IF NOT EXISTS {schema}.rooms (
    room_id      integer PRIMARY KEY,
    building_id  integer,
    floor_code   text,
    room_number  text    NOT NULL,
    room_type    text,
    capacity     integer,
    FOREIGN KEY (building_id, floor_code) REFERENCES {schema}.floors
);

-- Merges are events, not state: old_person_id names a record that no longer exists,
-- so neither column references people.
CREATE TABLE IF NOT EXISTS {schema}.person_merges (
    merge_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    old_person_id  bigint      NOT NULL,
    new_person_id  bigint      NOT NULL,
    merged_at      timestamptz NOT NULL DEFAULT now()
);

-- A command queue for the Unity voice-mail system; person_id is informational only
-- (a command outlives the person it was issued for).
CREATE TABLE IF NOT EXISTS {schema}.vmail_commands (
    command_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    person_id     bigint,
    mailbox       text        NOT NULL,
    command       text        NOT NULL,
    unity_owner   text,
    system_owner  text,
    issued_at     timestamptz NOT NULL DEFAULT now()
);

-- Referencing-side indexes: PostgreSQL does not create them, and without them every
-- ON DELETE CASCADE from people / logins would scan the child table.
CREATE INDEX IF NOT EXISTS logins_owner_idx ON {schema}.logins (owner);
CREATE INDEX IF NOT EXISTS group_members_username_idx ON {schema}.group_members (username);
CREATE INDEX IF NOT EXISTS directory_orgn_dept_idx ON {schema}.directory_orgn (dept_id);
CREATE INDEX IF NOT EXISTS buildings_site_idx ON {schema}.buildings (site_id);
CREATE INDEX IF NOT EXISTS rooms_floor_idx ON {schema}.rooms (building_id, floor_code);

-- Full before-images: Debezium then sees every old column value of an update or
-- delete, which the listeners' rules and the `watch` filter need.
ALTER TABLE {schema}.people REPLICA IDENTITY FULL;
ALTER TABLE {schema}.person_status REPLICA IDENTITY FULL;
ALTER TABLE {schema}.directory_telephone REPLICA IDENTITY FULL;
ALTER TABLE {schema}.addresses REPLICA IDENTITY FULL;
ALTER TABLE {schema}.departments REPLICA IDENTITY FULL;
ALTER TABLE {schema}.directory_orgn REPLICA IDENTITY FULL;
ALTER TABLE {schema}.udi REPLICA IDENTITY FULL;
ALTER TABLE {schema}.logins REPLICA IDENTITY FULL;
ALTER TABLE {schema}.unix_groups REPLICA IDENTITY FULL;
ALTER TABLE {schema}.group_members REPLICA IDENTITY FULL;
ALTER TABLE {schema}.sites REPLICA IDENTITY FULL;
ALTER TABLE {schema}.buildings REPLICA IDENTITY FULL;
ALTER TABLE {schema}.floors REPLICA IDENTITY FULL;
ALTER TABLE {schema}.rooms REPLICA IDENTITY FULL;
ALTER TABLE {schema}.person_merges REPLICA IDENTITY FULL;
ALTER TABLE {schema}.vmail_commands REPLICA IDENTITY FULL;
