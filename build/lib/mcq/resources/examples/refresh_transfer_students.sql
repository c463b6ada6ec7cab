-- The MCQ paper's Figure 5 ("Manual refresh via queue"), in PL/pgSQL: refresh every
-- fall-2002 transfer student's login in any listener interested in LOGINS. Each call
-- writes one explicit entry to the outbox, which Debezium captures; `source => 'campus'`
-- scopes it to the registry's source of that name (another mcq deployment capturing the
-- same database does not take it; `SET mcq.source = 'campus'` does the same per session).
--
--   psql "$SOURCE_DSN" -f examples/refresh_transfer_students.sql
DO $$
DECLARE
    l record;
BEGIN
    FOR l IN SELECT username, source, owner, unixuid FROM campus.logins WHERE admit_cohort = 'TR200209'
    LOOP
        PERFORM mcq_log_update('LOGINS', person_id => l.owner, pkey_string => l.username, pkey_number => l.unixuid,
                               source => 'campus');
    END LOOP;
END
$$;
