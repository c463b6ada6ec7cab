"""The logical key of a raw row, as Spark SQL text: a feed's key columns mapped onto the
key fields (``KEY_TYPE``), and why a row has no whole key (a column mapped to
``person_id`` or ``pkey_number`` that holds no whole number within 64 bits), so that such a
row is withheld by name, never delivered under a wrong key. The normaliser, the refresh and
reconcile from the source (``streams/source_state.py``) and the sibling look-up
(``streams/siblings.py``) key rows alike by using these."""

from __future__ import annotations

from streams import sqltext as S
from streams.plan import FeedPlan
from streams.sqltext import Sql

KEY_TYPE = (
    "struct<tname:string,subtype:string,person_id:bigint,pkey_string:string,pkey_number:bigint,aux_string:string>"
)


NUMBER_KEY_FIELDS = ("person_id", "pkey_number")
"""The key fields that hold a 64-bit integer; the rest are text."""


def key_number(value: Sql) -> Sql:
    """A numeric key field's value from a column's text (``"42"``, or ``"42.0"`` under
    ``decimal.handling.mode=string``): NULL where it is not a whole number within a long,
    never rounded (``not_whole`` names such a value)."""
    exact = value.try_cast("decimal(38,18)")
    number = exact.try_cast("long")
    return S.when(exact == number, number)


def feed_key(feed: FeedPlan, row: Sql) -> Sql:
    """The logical key (a ``KEY_TYPE`` struct) of one row image of a feed (a
    ``map<string,string>`` column -> text): the key fields from the columns the feed maps
    (SQL text: ``streams.sqltext``). A numeric field whose column holds no whole number is
    NULL here; ``key_problem`` names it, and such a row is withheld, never delivered."""

    def field_(name: str, typ: str) -> Sql:
        column = feed.key_column(name)
        value = row.getItem(column) if column else S.lit(None)
        if name in NUMBER_KEY_FIELDS:
            return key_number(value).alias(name)
        return value.cast(typ).alias(name)

    return S.struct(
        S.lit(feed.tname).alias("tname"),
        S.lit(feed.subtype).cast("string").alias("subtype"),
        field_("person_id", "long"),
        field_("pkey_string", "string"),
        field_("pkey_number", "long"),
        field_("aux_string", "string"),
    )


NOT_WHOLE = ": not a whole number within a 64-bit integer; repair: "
"""What follows ``not_whole``\'s findings in a withheld record\'s reason, before the repair."""


KEY_REPAIR = (
    NOT_WHOLE + "map the column to pkey_string or aux_string in the registry, or correct the row in the source "
    "(a corrected row flows again), then mcq refresh LISTENER --from source"
)


def key_problem(feed: FeedPlan, row: Sql, where: str) -> Sql:
    """Why a row image (``row``: a map column; ``where``: "the after-image", for the message)
    has no key for ``feed``: a column mapped to ``person_id`` or ``pkey_number`` holds text
    that is not a whole number within a 64-bit integer (``'E12'``, ``'42.5'``, a 20-digit
    number); NULL when its key is whole (or the image is NULL). ``KEY_REPAIR`` says what to do.

    Without this, Spark's ANSI cast fails the whole batch on such a value and the normaliser
    stops for every listener; read leniently, the key field would be NULL and the row
    delivered under a wrong key."""
    problems = [
        not_whole(f"column {column} ({name} of {feed.ref}'s key)", row.getItem(column), where)
        for name in NUMBER_KEY_FIELDS
        if (column := feed.key_column(name))
    ]
    if not problems:
        return S.lit(None).cast("string")
    found = S.concat_ws("; ", *problems)
    return S.when(found != "", found).otherwise(S.lit(None).cast("string"))


def not_whole(field_: str, value: Sql, where: str) -> Sql:
    """``<field_> holds '<value>' in <where>`` where one numeric key field's text is not a
    whole number within a long (``key_number`` is NULL), else NULL."""
    return S.when(
        value.isNotNull() & key_number(value).isNull(),
        S.concat(S.lit(f"{field_} holds '"), value, S.lit(f"' in {where}")),
    )
