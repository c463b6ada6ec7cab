"""Debezium's JSON change events -> envelopes whose row images hold natural text values.

Debezium encodes several types in ways no target should see. The normaliser keeps the
change contract's ``map<string, string|null>`` and writes every value as the text a
person (or ``datetime.fromisoformat``) reads. Where that text is made depends on the
connector (``mcq.capture.connector``):

* by default, in the Connect worker: mcq's ``NaturalText`` transform
  (``jvm/connect-transforms``) turns dates, timestamps and times into the texts below and
  the value is written as compact JSON without its schema; this module takes its images
  as they are;
* for a worker without the transform (``connect.natural_text: false``), here: the value
  is JSON *with its Connect schema* (``{"schema": ..., "payload": <envelope>}``), whose
  semantic names say which integer is a day number, and :func:`decode_image` decodes it.

Both give the same text:

==========================================  ===============================================
PostgreSQL type (Debezium's name)           value in ``after`` / ``before``
==========================================  ===============================================
date (``io.debezium.time.Date``: days)      ``1987-06-05``
timestamp (``MicroTimestamp``/``Timestamp``  ``2024-02-29T13:14:15.123456``; no fraction when
/``NanoTimestamp``: since the epoch)         it is zero (Python's ``isoformat``)
timestamptz (``ZonedTimestamp``: ISO text)  the same instant in UTC: ``2024-02-29T11:14:15.5``
                                            written ``2024-02-29T11:14:15.500000Z``
time (``MicroTime``/``Time``/``NanoTime``)   ``13:14:15`` or ``13:14:15.250000``
timetz (``ZonedTime``)                      Debezium's UTC text, e.g. ``11:14:15Z``
numeric, decimal, money                     the exact decimal text (``decimal.handling.mode``
                                            = string): ``1234.50``; numeric's special values
                                            as PostgreSQL spells them: ``NaN``, ``Infinity``,
                                            ``-Infinity`` (Debezium writes ``NAN``,
                                            ``POSITIVE_INFINITY``, ``NEGATIVE_INFINITY``; the
                                            column's source type, which the connector's
                                            ``datatype.propagate.source.type`` puts in its
                                            schema, says which strings are numbers)
boolean                                     ``true`` / ``false``
uuid                                        canonical lower-case text
json, jsonb                                 the JSON text as PostgreSQL prints it
arrays                                      a JSON array: ``["x","y",null]``, ``[1,2]``; an
                                            array of dates, timestamps or times holds each
                                            element's text as above (``["1987-06-05",null]``);
                                            numeric and json elements are strings
                                            (``["1.50","2"]``, ``["{\"a\": 1}"]``)
interval                                    ISO 8601 (``interval.handling.mode`` = string):
                                            ``P1Y2M3DT4H5M6.5S``
bytea                                       base64 (Kafka Connect's JSON encoding of bytes)
bit(n), n above 1 (``Bits``: bytes, lowest  PostgreSQL's text: ``101`` (the column's source
bit first)                                  type, propagated as numeric's, tells it from
                                            varbit's bytes, which lose their length and which
                                            ``mcq connect apply`` refuses); bit(1) is a
                                            boolean: ``true`` / ``false``
integers, floats, text                      as JSON prints them
==========================================  ===============================================

A date's or timestamp's ``infinity`` and ``-infinity`` are those words, as PostgreSQL
writes them (and as Debezium already sends a timestamptz's), not the far-off dates
Debezium's encodings of them would read as.

timestamptz is normalised to UTC with ``Z`` (Debezium already converts to UTC, but pads
the fraction to the column's precision): one instant has one text, so comparing two
records' values, e.g. to detect a housekeeping-only update, compares instants.

A raw record written without the schema and without the transform (a connector applied
before either was set on it) is read too: its values stay as Debezium encoded them (a
date as a day number), since nothing in the record says what they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.sqltext import Sql, col, lit, struct, to_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SOURCE = (
    "STRUCT<lsn BIGINT, txId BIGINT, sequence STRING, ts_ms BIGINT, ts_us BIGINT, schema STRING, "
    "`table` STRING, snapshot STRING>"
)
ENVELOPE_FIELDS = f"op STRING, before MAP<STRING,STRING>, after MAP<STRING,STRING>, source {SOURCE}, ts_ms BIGINT"
ENVELOPE = f"STRUCT<{ENVELOPE_FIELDS}>"
ENVELOPE_NAMES = ("op", "before", "after", "source", "ts_ms")
COLUMN_NAMES = (
    "ARRAY<STRUCT<field STRING, fields ARRAY<STRUCT<field STRING, name STRING, parameters MAP<STRING,STRING>, "
    "items STRUCT<name STRING>>>>>"
)
# both forms in one parse: a schema-carrying record's envelope is its payload, a schemaless
# record's envelope is the record itself
RAW_VALUE = f"schema STRUCT<fields {COLUMN_NAMES}>, payload {ENVELOPE}, {ENVELOPE_FIELDS}"

DATE = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
MILLI_TIMESTAMP = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
MILLI_TIME = ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time")
MICRO_TIME = "io.debezium.time.MicroTime"
NANO_TIME = "io.debezium.time.NanoTime"
# PostgreSQL's infinity and -infinity as Debezium encodes a date (days), a timestamp(0-3)
# (ms: its driver's infinite instants) and a timestamp(4-6) (µs): far outside the values
# PostgreSQL holds, so never a real date (the NaturalText transform knows the same numbers)
DAY_INFINITY, DAY_MINUS_INFINITY = -622_191_234, -625_821_272
MILLI_INFINITY, MILLI_MINUS_INFINITY = 9_223_372_036_825_200_000, -9_223_372_036_832_400_000
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)
SOURCE_TYPE = "__debezium.source.column.type"
"""The schema parameter Debezium's ``datatype.propagate.source.type`` sets."""
NUMERIC = "mcq.numeric"
"""The name given here to a numeric column's field (Debezium gives it none in string mode)."""
BITS = "io.debezium.data.Bits"
BITS_OF = "mcq.bits:"
"""The name given here to a ``bit(n)`` column's field, n above 1: this, then n (``mcq.bits:12``).
Debezium's Bits without a propagated source type of ``BIT`` (a ``varbit``, which
``mcq connect apply`` refuses) keeps its bytes."""
ARRAY_OF = "mcq.array:"
"""The name given here to an array column's field whose elements have a semantic name:
this, then the elements' name (``mcq.array:io.debezium.time.Date``)."""


def _lit(value: str | int) -> str:
    return lit(value).text


def _in(name: str, values: tuple[str, ...]) -> str:
    return f"({name} IN ({', '.join(_lit(v) for v in values)}))"


SECONDS_FORMAT = lit("yyyy-MM-dd'T'HH:mm:ss").text


def iso_timestamp(ts: str) -> str:
    """``yyyy-MM-ddTHH:mm:ss`` plus ``.ffffff`` when the fraction is not zero (SQL text of
    the timestamp expression ``ts``)."""
    fraction = f"CASE WHEN unix_micros({ts}) % 1000000 != 0 THEN concat('.', date_format({ts}, 'SSSSSS')) END"
    return f"concat(date_format({ts}, {SECONDS_FORMAT}), coalesce({fraction}, ''))"


def time_of_day(micros: str) -> str:
    """Microseconds since midnight -> ``HH:MM:SS[.ffffff]`` (24:00:00 stays 24:00:00)."""
    seconds = f"floor(({micros}) / 1000000)"
    fraction = f"(({micros}) - {seconds} * 1000000)"
    text = (
        f"format_string('%02d:%02d:%02d', CAST(floor({seconds} / 3600) AS INT), "
        f"CAST(floor(({seconds} / 60) % 60) AS INT), CAST({seconds} % 60 AS INT))"
    )
    micro = f"format_string('.%06d', CAST({fraction} AS BIGINT))"
    return f"concat({text}, CASE WHEN {fraction} != 0 THEN {micro} ELSE '' END)"


def special_numeric(value: str) -> str:
    """Debezium's spelling of numeric's NaN and infinities -> PostgreSQL's; others stay."""
    return (
        f"CASE WHEN {value} = 'NAN' THEN 'NaN' WHEN {value} = 'POSITIVE_INFINITY' THEN 'Infinity' "
        f"WHEN {value} = 'NEGATIVE_INFINITY' THEN '-Infinity' ELSE {value} END"
    )


def natural(name: str, value: str) -> str:
    """One column's value as text, by its Connect schema's semantic ``name`` (SQL text of
    both)."""
    number = f"try_cast({value} AS BIGINT)"
    infinite = (
        f"(({_in(name, DATE)} AND {number} = {_lit(DAY_INFINITY)})"
        f" OR ({_in(name, MILLI_TIMESTAMP)} AND {number} = {_lit(MILLI_INFINITY)})"
        f" OR ({name} = {_lit(MICRO_TIMESTAMP)} AND {number} = {_lit(LONG_MAX)})"
        f" OR ({name} = {_lit(ZONED_TIMESTAMP)} AND {value} = 'infinity'))"  # Debezium's own text for a timestamptz
    )
    minus_infinite = (
        f"(({_in(name, DATE)} AND {number} = {_lit(DAY_MINUS_INFINITY)})"
        f" OR ({_in(name, MILLI_TIMESTAMP)} AND {number} = {_lit(MILLI_MINUS_INFINITY)})"
        f" OR ({name} = {_lit(MICRO_TIMESTAMP)} AND {number} = {_lit(LONG_MIN)})"
        f" OR ({name} = {_lit(ZONED_TIMESTAMP)} AND {value} = '-infinity'))"
    )
    length = f"CAST(substring({name}, {len(BITS_OF) + 1}, 20) AS INT)"
    return (
        f"CASE WHEN {infinite} THEN 'infinity' WHEN {minus_infinite} THEN '-infinity'"
        f" WHEN {_in(name, DATE)} THEN date_format(date_add(CAST('1970-01-01' AS DATE), CAST({number} AS INT)), "
        "'yyyy-MM-dd')"
        f" WHEN {_in(name, MILLI_TIMESTAMP)} THEN {iso_timestamp(f'timestamp_millis({number})')}"
        f" WHEN {name} = {_lit(MICRO_TIMESTAMP)} THEN {iso_timestamp(f'timestamp_micros({number})')}"
        f" WHEN {name} = {_lit(NANO_TIMESTAMP)} THEN {iso_timestamp(f'timestamp_micros(floor({number} / 1000))')}"
        f" WHEN {name} = {_lit(ZONED_TIMESTAMP)} THEN concat({iso_timestamp(f'try_cast({value} AS TIMESTAMP)')}, 'Z')"
        f" WHEN {_in(name, MILLI_TIME)} THEN {time_of_day(f'{number} * 1000')}"
        f" WHEN {name} = {_lit(MICRO_TIME)} THEN {time_of_day(number)}"
        f" WHEN {name} = {_lit(NANO_TIME)} THEN {time_of_day(f'floor({number} / 1000)')}"
        f" WHEN {name} = {_lit(NUMERIC)} THEN {special_numeric(value)}"
        f" WHEN startswith({name}, {_lit(BITS_OF)}) THEN {bit_text(value, length)}"
        f" ELSE {value} END"
    )


def bit_text(value: str, length: str) -> str:
    """Debezium's base64 bytes of a ``bit(length)`` (bit i of the value in byte i / 8, bit
    i % 8, lowest first; trailing zero bytes cut) -> PostgreSQL's text, highest bit first
    (``BQ==`` of a ``bit(3)`` -> ``101``): each byte's bits highest first, the bytes in
    reverse, then the last ``length`` of them after ``length`` zeros."""
    hexed = f"hex(unbase64({value}))"
    per_byte = (
        f"transform(sequence(0, CAST(floor(length({hexed}) / 2) AS INT) - 1), "
        f"mcq_bit_i -> lpad(conv(substring({hexed}, mcq_bit_i * 2 + 1, 2), 16, 2), 8, '0'))"
    )
    ones = f"CASE WHEN length({hexed}) = 0 THEN '' ELSE array_join(reverse({per_byte}), '') END"
    return f"right(concat(repeat('0', {length}), {ones}), {length})"


def natural_array(name: str, value: str) -> str:
    """An array's JSON text whose elements are named ``name`` -> the JSON array of each
    element's natural text (``[19723,null]`` -> ``["2024-01-01",null]``)."""
    return f"to_json(transform(from_json({value}, 'ARRAY<STRING>'), mcq_elem -> {natural(name, 'mcq_elem')}))"


def decode_image(image: str, names: str) -> str:
    """A row image (column -> Debezium's JSON text) with every value decoded; null stays null."""
    name = f"coalesce(try_element_at({names}, mcq_img_k), '')"
    array = f"substring({name}, {len(ARRAY_OF) + 1}, 200)"
    decoded = (
        f"CASE WHEN mcq_img_v IS NULL THEN mcq_img_v WHEN startswith({name}, {_lit(ARRAY_OF)}) "
        f"THEN {natural_array(array, 'mcq_img_v')} ELSE {natural(name, 'mcq_img_v')} END"
    )
    return f"transform_values({image}, (mcq_img_k, mcq_img_v) -> {decoded})"


class EnvelopeReader:
    """Reads raw Kafka values (bytes) into Debezium envelopes with decoded row images.

    Four projections, each computing what the next one reads: the JSON is parsed once
    and the column-type map is built once per record. (In one projection both would sit
    inside the per-value lambda, which Spark evaluates without common subexpressions:
    the whole record parsed again for every value of every image, 20x the work.)

    The column expressions are SQL text, parsed by Spark once each (``streams/sqltext.py``):
    built with pyspark's ``Column`` calls they were hundreds of py4j round trips, 2-3.5 s of
    every normaliser process here."""

    def __init__(self, value: str = "value") -> None:
        self._parse = to_column(Sql(f"from_json(CAST({col(value)} AS STRING), {_lit(RAW_VALUE)})")).alias("_mcq_raw")
        plain = struct(*(col(f"_mcq_raw.{f}").alias(f) for f in ENVELOPE_NAMES))
        env = f"CASE WHEN {col('_mcq_raw.payload')} IS NOT NULL THEN {col('_mcq_raw.payload')} ELSE {plain} END"
        row_schema = f"filter({col('_mcq_raw.schema.fields')}, mcq_f -> mcq_f.`field` = 'after')"
        source_type = f"upper(mcq_c.`parameters`[{_lit(SOURCE_TYPE)}])"
        kind = (
            f"CASE WHEN {source_type} = 'NUMERIC' THEN {_lit(NUMERIC)}"
            f" WHEN mcq_c.`name` = {_lit(BITS)} AND {source_type} = 'BIT'"
            f" THEN concat({_lit(BITS_OF)}, mcq_c.`parameters`['length'])"
            f" WHEN mcq_c.`items`.`name` IS NOT NULL THEN concat({_lit(ARRAY_OF)}, mcq_c.`items`.`name`)"
            " ELSE mcq_c.`name` END"
        )
        entry = struct(Sql("mcq_c.`field`", "key"), Sql(kind, "value"))
        names = f"map_from_entries(transform(get({row_schema}, 0).`fields`, mcq_c -> {entry}))"
        self._split = (to_column(Sql(env)).alias("_mcq_env"), to_column(Sql(names)).alias("_mcq_names"))

        # a value without its schema (dates and times already text: the NaturalText
        # transform) is taken as it is, without a pass over its images; with it, both images
        # go through one decoding lambda (written once per image, the envelope's expression
        # was twice as long, and every query parses and analyses it at its start)
        images = f"array({col('_mcq_env.after')}, {col('_mcq_env.before')})"
        decode = f"transform({images}, mcq_img -> {decode_image('mcq_img', '`_mcq_names`')})"
        self._images = to_column(Sql(f"CASE WHEN `_mcq_names` IS NULL THEN {images} ELSE {decode} END")).alias(
            "_mcq_images"
        )
        image = {"after": Sql("`_mcq_images`[0]"), "before": Sql("`_mcq_images`[1]")}
        decoded = struct(*(image.get(f, col(f"_mcq_env.{f}")).alias(f) for f in ENVELOPE_NAMES))
        self._decoded = to_column(Sql(f"CASE WHEN `_mcq_env` IS NULL THEN NULL ELSE {decoded} END"))

    def apply(self, df: DataFrame, name: str = "e") -> DataFrame:
        """``df`` plus column ``name``: the envelope of its raw value. ``op`` is null when
        the value is not a Debezium envelope in either JSON form."""
        parsed = df.select("*", self._parse)
        split = parsed.select("*", *self._split).drop("_mcq_raw")
        images = split.select("*", self._images)
        return images.select("*", self._decoded.alias(name)).drop("_mcq_env", "_mcq_names", "_mcq_images")
