-- The explicit-log path (the paper's Meta_Change_Rtn.Log_Insert/Update/Delete and its
-- "manual entries"): code that wants to log a change itself calls these functions; they
-- write the outbox table mcq.change_log, which Debezium captures like any other table.
-- The PL/pgSQL call stack is kept with each entry (the paper's CALL_STACK column).
-- Idempotent: safe to run on every `mcq connect apply`.

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
    txid         bigint      NOT NULL DEFAULT txid_current()
);

COMMENT ON TABLE mcq.change_log IS
    'mcq outbox: explicit change entries (mcq_log_insert/update/delete), captured by Debezium';

CREATE OR REPLACE FUNCTION mcq._log(
    p_change_type text, tname text, subtype text, person_id bigint,
    pkey_string text, pkey_number numeric, aux_string text
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    stack text;
    new_id bigint;
BEGIN
    GET DIAGNOSTICS stack = PG_CONTEXT;
    stack := regexp_replace(stack, '^[^\n]*\n', '');  -- drop this function's own frame
    INSERT INTO mcq.change_log (tname, subtype, change_type, person_id, pkey_string, pkey_number, aux_string, call_stack)
    VALUES (upper(tname), subtype, p_change_type, person_id, pkey_string, pkey_number, aux_string, stack)
    RETURNING log_id INTO new_id;
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION public.mcq_log_insert(
    tname text, subtype text DEFAULT NULL, person_id bigint DEFAULT NULL,
    pkey_string text DEFAULT NULL, pkey_number numeric DEFAULT NULL, aux_string text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN  -- plpgsql, not sql: a SQL function is inlined and would vanish from the call stack
    RETURN mcq._log('insert', tname, subtype, person_id, pkey_string, pkey_number, aux_string);
END
$$;

CREATE OR REPLACE FUNCTION public.mcq_log_update(
    tname text, subtype text DEFAULT NULL, person_id bigint DEFAULT NULL,
    pkey_string text DEFAULT NULL, pkey_number numeric DEFAULT NULL, aux_string text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN  -- plpgsql, not sql: a SQL function is inlined and would vanish from the call stack
    RETURN mcq._log('update', tname, subtype, person_id, pkey_string, pkey_number, aux_string);
END
$$;

CREATE OR REPLACE FUNCTION public.mcq_log_delete(
    tname text, subtype text DEFAULT NULL, person_id bigint DEFAULT NULL,
    pkey_string text DEFAULT NULL, pkey_number numeric DEFAULT NULL, aux_string text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN  -- plpgsql, not sql: a SQL function is inlined and would vanish from the call stack
    RETURN mcq._log('delete', tname, subtype, person_id, pkey_string, pkey_number, aux_string);
END
$$;
