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

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SOURCE = (
    "STRUCT<lsn BIGINT, txId BIGINT, sequence STRING, ts_ms BIGINT, ts_us BIGINT, schema STRING, "
    "`table` STRING, snapshot STRING>"
)
ENVELOPE_FIELDS = f"op STRING, before MAP<STRING,STRING>, after MAP<STRING,STRING>, source {SOURCE}, ts_ms BIGINT"
ENVELOPE = f"STRUCT<{ENVELOPE_FIELDS}>"
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


def iso_timestamp(ts: Column) -> Column:
    """``yyyy-MM-ddTHH:mm:ss`` plus ``.ffffff`` when the fraction is not zero."""
    from pyspark.sql import functions as F

    fraction = F.when(F.unix_micros(ts) % 1_000_000 != 0, F.concat(F.lit("."), F.date_format(ts, "SSSSSS")))
    return F.concat(F.date_format(ts, "yyyy-MM-dd'T'HH:mm:ss"), F.coalesce(fraction, F.lit("")))


def time_of_day(micros: Column) -> Column:
    """Microseconds since midnight -> ``HH:MM:SS[.ffffff]`` (24:00:00 stays 24:00:00)."""
    from pyspark.sql import functions as F

    seconds = F.floor(micros / 1_000_000)
    fraction = micros - seconds * 1_000_000
    text = F.format_string(
        "%02d:%02d:%02d",
        F.floor(seconds / 3600).cast("int"),
        F.floor(seconds / 60 % 60).cast("int"),
        (seconds % 60).cast("int"),
    )
    return F.concat(text, F.when(fraction != 0, F.format_string(".%06d", fraction.cast("long"))).otherwise(F.lit("")))


def special_numeric(value: Column) -> Column:
    """Debezium's spelling of numeric's NaN and infinities -> PostgreSQL's; others stay."""
    from pyspark.sql import functions as F

    return (
        F.when(value == "NAN", F.lit("NaN"))
        .when(value == "POSITIVE_INFINITY", F.lit("Infinity"))
        .when(value == "NEGATIVE_INFINITY", F.lit("-Infinity"))
        .otherwise(value)
    )


def natural(name: Column, value: Column) -> Column:
    """One column's value as text, by its Connect schema's semantic ``name``."""
    from pyspark.sql import functions as F

    number = value.try_cast("long")
    infinite = (
        (name.isin(*DATE) & (number == DAY_INFINITY))
        | (name.isin(*MILLI_TIMESTAMP) & (number == MILLI_INFINITY))
        | ((name == MICRO_TIMESTAMP) & (number == LONG_MAX))
        | ((name == ZONED_TIMESTAMP) & (value == "infinity"))  # Debezium's own text for a timestamptz
    )
    minus_infinite = (
        (name.isin(*DATE) & (number == DAY_MINUS_INFINITY))
        | (name.isin(*MILLI_TIMESTAMP) & (number == MILLI_MINUS_INFINITY))
        | ((name == MICRO_TIMESTAMP) & (number == LONG_MIN))
        | ((name == ZONED_TIMESTAMP) & (value == "-infinity"))
    )
    return (
        F.when(infinite, F.lit("infinity"))
        .when(minus_infinite, F.lit("-infinity"))
        .when(
            name.isin(*DATE),
            F.date_format(F.date_add(F.lit("1970-01-01").cast("date"), number.cast("int")), "yyyy-MM-dd"),
        )
        .when(name.isin(*MILLI_TIMESTAMP), iso_timestamp(F.timestamp_millis(number)))
        .when(name == MICRO_TIMESTAMP, iso_timestamp(F.timestamp_micros(number)))
        .when(name == NANO_TIMESTAMP, iso_timestamp(F.timestamp_micros(F.floor(number / 1000))))
        .when(name == ZONED_TIMESTAMP, F.concat(iso_timestamp(value.try_cast("timestamp")), F.lit("Z")))
        .when(name.isin(*MILLI_TIME), time_of_day(number * 1000))
        .when(name == MICRO_TIME, time_of_day(number))
        .when(name == NANO_TIME, time_of_day(F.floor(number / 1000)))
        .when(name == NUMERIC, special_numeric(value))
        .when(name.startswith(BITS_OF), bit_text(value, F.substring(name, len(BITS_OF) + 1, 20).cast("int")))
        .otherwise(value)
    )


def bit_text(value: Column, length: Column) -> Column:
    """Debezium's base64 bytes of a ``bit(length)`` (bit i of the value in byte i / 8, bit
    i % 8, lowest first; trailing zero bytes cut) -> PostgreSQL's text, highest bit first
    (``BQ==`` of a ``bit(3)`` -> ``101``): each byte's bits highest first, the bytes in
    reverse, then the last ``length`` of them after ``length`` zeros."""
    from pyspark.sql import functions as F

    hexed = F.hex(F.unbase64(value))
    per_byte = F.transform(
        F.sequence(F.lit(0), F.floor(F.length(hexed) / 2).cast("int") - 1),
        lambda i: F.lpad(F.conv(F.substring(hexed, i * 2 + 1, 2), 16, 2), 8, "0"),
    )
    ones = F.when(F.length(hexed) == 0, F.lit("")).otherwise(F.array_join(F.reverse(per_byte), ""))
    return F.right(F.concat(F.repeat(F.lit("0"), length), ones), length)


def natural_array(name: Column, value: Column) -> Column:
    """An array's JSON text whose elements are named ``name`` -> the JSON array of each
    element's natural text (``[19723,null]`` -> ``["2024-01-01",null]``)."""
    from pyspark.sql import functions as F

    return F.to_json(F.transform(F.from_json(value, "ARRAY<STRING>"), lambda e: natural(name, e)))


def decode_image(image: Column, names: Column) -> Column:
    """A row image (column -> Debezium's JSON text) with every value decoded; null stays null."""
    from pyspark.sql import functions as F

    def decode(k: Column, v: Column) -> Column:
        name = F.coalesce(F.try_element_at(names, k), F.lit(""))
        array = F.substring(name, len(ARRAY_OF) + 1, 200)
        return (
            F.when(v.isNull(), v).when(name.startswith(ARRAY_OF), natural_array(array, v)).otherwise(natural(name, v))
        )

    return F.transform_values(image, decode)


class EnvelopeReader:
    """Reads raw Kafka values (bytes) into Debezium envelopes with decoded row images.

    Three projections, each computing what the next one reads: the JSON is parsed once
    and the column-type map is built once per record. (In one projection both would sit
    inside the per-value lambda, which Spark evaluates without common subexpressions:
    the whole record parsed again for every value of every image, 20x the work.)

    The column expressions are built once, here: each is dozens of py4j calls, and a
    streaming job applies them to every micro-batch."""

    def __init__(self, value: str = "value") -> None:
        from pyspark.sql import functions as F

        self._parse = F.from_json(F.col(value).cast("string"), RAW_VALUE).alias("_mcq_raw")
        raw = F.col("_mcq_raw")
        plain = F.struct(*(raw.getField(f).alias(f) for f in ("op", "before", "after", "source", "ts_ms")))
        env = F.when(raw.getField("payload").isNotNull(), raw.getField("payload")).otherwise(plain)
        row_schema = F.filter(raw.getField("schema").getField("fields"), lambda f: f.getField("field") == "after")
        names = F.map_from_entries(
            F.transform(
                F.get(row_schema, 0).getField("fields"),
                lambda c: F.struct(
                    c.getField("field").alias("key"),
                    F.when(F.upper(c.getField("parameters")[SOURCE_TYPE]) == "NUMERIC", F.lit(NUMERIC))
                    .when(
                        (c.getField("name") == BITS) & (F.upper(c.getField("parameters")[SOURCE_TYPE]) == "BIT"),
                        F.concat(F.lit(BITS_OF), c.getField("parameters")["length"]),
                    )
                    .when(
                        c.getField("items").getField("name").isNotNull(),
                        F.concat(F.lit(ARRAY_OF), c.getField("items").getField("name")),
                    )
                    .otherwise(c.getField("name"))
                    .alias("value"),
                ),
            )
        )
        self._split = (env.alias("_mcq_env"), names.alias("_mcq_names"))
        env, names = F.col("_mcq_env"), F.col("_mcq_names")

        # a value without its schema (dates and times already text: the NaturalText
        # transform) is taken as it is, without a pass over its images
        def image(which: str) -> Column:
            return F.when(names.isNull(), env.getField(which)).otherwise(decode_image(env.getField(which), names))

        self._decoded = env.withField("after", image("after")).withField("before", image("before"))

    def apply(self, df: DataFrame, name: str = "e") -> DataFrame:
        """``df`` plus column ``name``: the envelope of its raw value. ``op`` is null when
        the value is not a Debezium envelope in either JSON form."""
        parsed = df.select("*", self._parse)
        split = parsed.select("*", *self._split).drop("_mcq_raw")
        return split.select("*", self._decoded.alias(name)).drop("_mcq_env", "_mcq_names")
