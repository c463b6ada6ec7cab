-- What INSITE holds per person, named as mcq's import row (the sql_import adapter's
-- read_back: what `mcq reconcile` compares). "No Status" and a Former-<status> read as
-- no status; a Former- row is one INSITE keeps for a person who is gone (retired).
-- {schema} is the adapter's vendor_schema.
SELECT person_number AS spriden_id,
       person_last_name AS lastname,
       person_first_name AS firstname,
       CASE WHEN person_location = 'No Status' OR person_location LIKE 'Former-%' THEN NULL
            ELSE person_location END AS status,
       person_text1 AS orgn,
       person_memo AS title,
       coalesce(person_location LIKE 'Former-%', false) AS retired
  FROM {schema}.sa_person
