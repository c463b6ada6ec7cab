-- The explicit-log path (the paper's Meta_Change_Rtn.Log_Insert/Update/Delete and its
-- "manual entries"): code that wants to log a change itself calls these functions; they
-- write the outbox table mcq.change_log, which Debezium captures like any other table.
-- The PL/pgSQL call stack is kept with each entry (the paper's CALL_STACK column).
-- Idempotent: safe to run on every `mcq connect apply`.
--
-- Scope: one database may serve several mcq deployments (topic prefixes), each with its
-- own sources, and every source's connector captures this one table. An entry names the
-- mcq source it is meant for -- the functions' `source` argument, else the session's
-- `mcq.source` setting (SET mcq.source = 'campus'; or ALTER ROLE ... SET mcq.source) --
-- and the normaliser of a source takes only entries that name it or name none. An
-- entry that names no source reaches every source of the database.

CREATE SCHEMA IF NOT EXISTS mcq;

CREATE TABLE IF NOT EXISTS mcq.change_log (
    log_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tname        text        NOT NULL CHECK (tname ~ '^[A-Z][A-Z0-9_]*$'),
    subtype      text,
    change_type  text        NOT NULL CHECK (change_type IN ('insert', 'update', 'delete')),
    person_id    bigint,
    pkey_string  text,
    pkey_number  numeric,
    aux_string   text,
    call_stack   text,
    logged_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    txid         bigint      NOT NULL DEFAULT txid_current(),
    source       text
);
ALTER TABLE mcq.change_log ADD COLUMN IF NOT EXISTS source text;  -- outboxes made before scoping
-- the state of a key of a table no source table feeds (the paper's Unity pattern: the
-- caller knows the row, mcq has nowhere else to read it from); a JSON object, or NULL
ALTER TABLE mcq.change_log ADD COLUMN IF NOT EXISTS state jsonb
    CONSTRAINT change_log_state_is_an_object CHECK (state IS NULL OR jsonb_typeof(state) = 'object');

-- One row per mcq source, written by its connector's heartbeat.action.query: a change in
-- this database even while every captured table is idle, so the replication slot moves
-- on instead of holding the WAL other databases of the cluster write.
CREATE TABLE IF NOT EXISTS mcq.heartbeat (
    source   text        PRIMARY KEY,
    beat_at  timestamptz NOT NULL
);

-- Whole-table requests (an entry that names no key field: every key of the table is stated
-- again to every listener) are the expensive ones: at most one per table/subtype and
-- calling role every `whole_table_every_s` seconds (mcq.outbox_settings, set by
-- `mcq connect apply` from outbox.whole_table_every_s). A request too soon is refused
-- with an error naming the wait, never dropped silently.
CREATE TABLE IF NOT EXISTS mcq.outbox_settings (
    key    text PRIMARY KEY,
    value  text NOT NULL
);
CREATE TABLE IF NOT EXISTS mcq.whole_table_requests (
    tname    text        NOT NULL,
    subtype  text        NOT NULL DEFAULT '',
    role     text        NOT NULL,
    last_at  timestamptz NOT NULL,
    PRIMARY KEY (tname, subtype, role)
);
-- Only the functions below (SECURITY DEFINER) write these; a caller needs EXECUTE on them,
-- which `mcq connect apply` grants to the roles outbox.roles names, and to no one else.
REVOKE ALL ON mcq.change_log, mcq.outbox_settings, mcq.whole_table_requests FROM PUBLIC;

COMMENT ON TABLE mcq.change_log IS
    'mcq outbox: explicit change entries (mcq_log_insert/update/delete), captured by Debezium';

-- the signatures before `source` was added: a new parameter is a new overload
DROP FUNCTION IF EXISTS mcq._log(text, text, text, bigint, text, numeric, text);
DROP FUNCTION IF EXISTS public.mcq_log_insert(text, text, bigint, text, numeric, text);
DROP FUNCTION IF EXISTS public.mcq_log_update(text, text, bigint, text, numeric, text);
DROP FUNCTION IF EXISTS public.mcq_log_delete(text, text, bigint, text, numeric, text);
-- and before `state`
DROP FUNCTION IF EXISTS mcq._log(text, text, text, bigint, text, numeric, text, text);
DROP FUNCTION IF EXISTS public.mcq_log_insert(text, text, bigint, text, numeric, text, text);
DROP FUNCTION IF EXISTS public.mcq_log_update(text, text, bigint, text, numeric, text, text);
DROP FUNCTION IF EXISTS public.mcq_log_delete(text, text, bigint, text, numeric, text, text);

CREATE OR REPLACE FUNCTION mcq._log(
    p_change_type text, tname text, subtype text, person_id bigint,
    pkey_string text, pkey_number numeric, aux_string text, source text, state jsonb
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    stack text;
    new_id bigint;
    every_s integer;
    last timestamptz;
BEGIN
    GET DIAGNOSTICS stack = PG_CONTEXT;
    stack := regexp_replace(stack, '^[^\n]*\n', '');  -- drop this function's own frame
    IF person_id IS NULL AND pkey_string IS NULL AND pkey_number IS NULL AND aux_string IS NULL THEN
        SELECT value::integer INTO every_s FROM mcq.outbox_settings WHERE key = 'whole_table_every_s';
        every_s := coalesce(every_s, 60);
        SELECT r.last_at INTO last FROM mcq.whole_table_requests r
         WHERE r.tname = upper(_log.tname) AND r.subtype = coalesce(_log.subtype, '') AND r.role = session_user
           FOR UPDATE;
        IF last IS NOT NULL AND last > clock_timestamp() - make_interval(secs => every_s) THEN
            RAISE EXCEPTION 'mcq: whole-table request for % refused: role % asked % s ago, at most one per % s',
                upper(tname) || coalesce('/' || subtype, ''), session_user,
                round(extract(epoch FROM clock_timestamp() - last)), every_s
                USING ERRCODE = 'P0001',
                      HINT = 'name the keys to refresh, or wait; outbox.whole_table_every_s sets the interval';
        END IF;
        INSERT INTO mcq.whole_table_requests (tname, subtype, role, last_at)
        VALUES (upper(tname), coalesce(subtype, ''), session_user, clock_timestamp())
        ON CONFLICT ON CONSTRAINT whole_table_requests_pkey DO UPDATE SET last_at = excluded.last_at;
    END IF;
    INSERT INTO mcq.change_log
        (tname, subtype, change_type, person_id, pkey_string, pkey_number, aux_string, call_stack, source, state)
    VALUES (upper(_log.tname), _log.subtype, p_change_type, _log.person_id, _log.pkey_string, _log.pkey_number,
            _log.aux_string, stack,
            coalesce(_log.source, nullif(current_setting('mcq.source', true), '')), _log.state)
    RETURNING log_id INTO new_id;
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION public.mcq_log_insert(
    tname text, subtype text DEFAULT NULL, person_id bigint DEFAULT NULL,
    pkey_string text DEFAULT NULL, pkey_number numeric DEFAULT NULL, aux_string text DEFAULT NULL,
    source text DEFAULT NULL, state jsonb DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN  -- plpgsql, not sql: a SQL function is inlined and would vanish from the call stack
    RETURN mcq._log('insert', tname, subtype, person_id, pkey_string, pkey_number, aux_string, source, state);
END
$$;

CREATE OR REPLACE FUNCTION public.mcq_log_update(
    tname text, subtype text DEFAULT NULL, person_id bigint DEFAULT NULL,
    pkey_string text DEFAULT NULL, pkey_number numeric DEFAULT NULL, aux_string text DEFAULT NULL,
    source text DEFAULT NULL, state jsonb DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN  -- plpgsql, not sql: a SQL function is inlined and would vanish from the call stack
    RETURN mcq._log('update', tname, subtype, person_id, pkey_string, pkey_number, aux_string, source, state);
END
$$;

CREATE OR REPLACE FUNCTION public.mcq_log_delete(
    tname text, subtype text DEFAULT NULL, person_id bigint DEFAULT NULL,
    pkey_string text DEFAULT NULL, pkey_number numeric DEFAULT NULL, aux_string text DEFAULT NULL,
    source text DEFAULT NULL, state jsonb DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN  -- plpgsql, not sql: a SQL function is inlined and would vanish from the call stack
    RETURN mcq._log('delete', tname, subtype, person_id, pkey_string, pkey_number, aux_string, source, state);
END
$$;
