-- The sample vendor schema: INSITE (space management) with its import table and the
-- vendor engineer's trigger, the MCQ paper's Figure 3 ported from Oracle PL/SQL to
-- PL/pgSQL. mcq only ever INSERTs into simon_person_import; the trigger applies the
-- vendor's business rules to its own table SA_PERSON, or raises, and then the insert
-- fails with the database's message (the listener retries, then dead-letters it).
-- {schema} is the sql_import adapter's vendor_schema (it replaces it before running this).

CREATE SCHEMA IF NOT EXISTS {schema};

CREATE SEQUENCE IF NOT EXISTS {schema}.person_id_seq;

CREATE TABLE IF NOT EXISTS {schema}.sa_person (
    person_id          bigint PRIMARY KEY DEFAULT nextval('{schema}.person_id_seq'),
    entered_date       timestamptz,
    entered_by         text,
    updated_date       timestamptz,
    updated_by         text,
    person_number      text NOT NULL UNIQUE,
    person_last_name   text NOT NULL,
    person_first_name  text,
    person_text1       text,          -- the department (orgn)
    person_location    varchar(24),   -- taken over to hold the status (the paper's footnote 5)
    person_memo        text           -- the title
);

-- What we send. Its rows are not used once the trigger has run; flush it now and then.
CREATE TABLE IF NOT EXISTS {schema}.simon_person_import (
    import_id   bigserial PRIMARY KEY,
    spriden_id  text NOT NULL,
    lastname    text,
    firstname   text,
    status      text,
    orgn        text,
    title       text,
    mcq_key     text,
    mcq_position text,
    imported_at timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION {schema}.t_simon_person_import() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r {schema}.sa_person%ROWTYPE;
    new_status text;
BEGIN
    -- a business rule of the vendor's: no person without a last name
    IF coalesce(btrim(NEW.lastname), '') = '' THEN
        RAISE EXCEPTION 'INSITE: person % has no last name', NEW.spriden_id
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT * INTO r FROM {schema}.sa_person WHERE person_number = NEW.spriden_id FOR UPDATE;
    IF NOT FOUND THEN  -- no existing record, insert a new one
        new_status := coalesce(NEW.status, 'No Status');
        INSERT INTO {schema}.sa_person (entered_date, entered_by, person_number, person_last_name,
                                      person_first_name, person_text1, person_location, person_memo)
        VALUES (now(), current_user, NEW.spriden_id, NEW.lastname, NEW.firstname, NEW.orgn,
                substr(new_status, 1, 24), NEW.title);
    ELSE
        IF NEW.status IS NULL THEN  -- no current status: save what they were
            IF substr(r.person_location, 1, 7) = 'Former-' THEN
                new_status := r.person_location;
            ELSE
                new_status := 'Former-' || r.person_location;
            END IF;
        ELSE
            new_status := NEW.status;
        END IF;
        UPDATE {schema}.sa_person
           SET updated_date = now(), updated_by = current_user,
               person_last_name = NEW.lastname, person_first_name = NEW.firstname,
               person_location = substr(new_status, 1, 24),
               person_text1 = NEW.orgn, person_memo = NEW.title
         WHERE person_id = r.person_id;
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS t_simon_person_import ON {schema}.simon_person_import;
CREATE TRIGGER t_simon_person_import BEFORE INSERT ON {schema}.simon_person_import
    FOR EACH ROW EXECUTE FUNCTION {schema}.t_simon_person_import();
