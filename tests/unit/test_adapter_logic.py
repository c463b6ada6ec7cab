"""Pure logic of the adapters: what a directory entry, a file and a webhook body say."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from consumers.file.adapter import to_jsonl, to_xml
from consumers.webhook.settings import WebhookSettings
from mcq.change import Change, ChangeKey, Position


def change(kind: str, after: dict[str, str | None] | None) -> Change:
    return Change(
        ChangeKey("PERSON", "PEOPLE", 1),
        kind,
        Position(7, 8),
        datetime(2026, 1, 1, tzinfo=UTC),  # type: ignore[arg-type]
        "campus.people",
        after,
    )


def test_files_carry_the_idempotency_key_and_xml_marks_nulls() -> None:
    changes = [change("INSERT", {"last_name": "King", "title": None}), change("DELETE", None)]
    lines = [json.loads(x) for x in to_jsonl(changes).decode().splitlines()]
    assert lines[0]["idempotency_key"] == changes[0].idempotency_key and lines[1]["after"] is None
    root = ET.fromstring(to_xml("CMMS", changes))
    first = root.findall("change")[0]
    assert first.get("type") == "INSERT" and first.find("key/person_id").text == "1"  # type: ignore[union-attr]
    assert first.find("after/column[@name='title']").get("null") == "true"  # type: ignore[union-attr]


def test_a_webhook_token_never_prints() -> None:
    settings = WebhookSettings.model_validate({"url": "https://x.example/hook", "bearer_token": "s3cret"})
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())
