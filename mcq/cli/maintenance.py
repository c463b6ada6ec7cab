"""``mcq replay``, ``mcq flush`` and ``mcq purge``: commands that move a stopped listener's
consumer groups or apply retention to what it keeps."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mcq.cli.app import (
    EXIT_CONFIG,
    EXIT_FAILED,
    FROM_FILE,
    _current_registry,
    _err,
    _moving_groups,
    _refuse_unknown,
    _say,
    _settings,
    _stop,
    dry_run,
    main,
    path_option,
)


def _replay_point(value: str) -> str | int | Path:
    """``earliest``, an offsets file, or an ISO 8601 time (UTC when it names no zone) in ms."""
    from datetime import UTC, datetime

    if value == "earliest":
        return value
    path = Path(value)
    if path.is_file():
        return path
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither 'earliest', an ISO 8601 time (2026-11-24T06:00:00Z) nor an existing offsets file",
            param_hint="--from",
        ) from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


@main.command("replay")
@click.argument("name")
@click.option(
    "--from",
    "since",
    required=True,
    metavar="earliest|TIME|OFFSETS-FILE",
    help="Replay from the first record, from the first record at or after an ISO 8601 time (UTC unless it "
    "names a zone), or from the offsets a file names (topic,partition,offset per line).",
)
@FROM_FILE
@dry_run("Show what would be moved and reset")
def replay(name: str, since: str, registry_file: Path | None, dry_run: bool) -> None:
    """Apply again what listener NAME applied from a point on (after a target was restored
    from a backup, say): move its real-time consumer group back on its logical topics and
    reset its applied positions for their keys, so every replayed change is applied again
    (idempotently). The retry and bulk lanes are left as they are.

    Refused while an instance of NAME runs (exit 1, naming the instances); exit 2 for a
    listener, time or offsets file that is not right, naming what and where."""
    from consumers.runtime.replay import Replay

    point = _replay_point(since)
    with _moving_groups("replay"):
        job = Replay(_settings(), _current_registry(registry_file), name)
        plan = job.plan(point)
        for line in plan.lines():
            _say(f"replay {name}: {line}")
        if dry_run:
            _say(f"replay {name}: dry run: nothing changed")
            return
        job.apply(plan)
    _say(
        f"replay {name}: {len(plan.offsets)} partition(s) moved back, {len(plan.keys):,} applied positions reset; "
        f"the next run (mcq listen {name}) applies them again"
    )


@main.command("flush")
@click.argument("name")
@click.option(
    "--before",
    metavar="TIME",
    help="Skip only what was written before this ISO 8601 time (UTC unless it names a zone); all pending when omitted.",
)
@path_option("--out", "File of the skipped records (JSON Lines); default $MCQ_HOME/flushed/<prefix>.NAME.<time>.jsonl.")
@FROM_FILE
@dry_run("Show what would be skipped")
@click.option("--yes", is_flag=True, help="Skip them: the listener never applies them (their keys' next changes are).")
def flush(
    name: str, before: str | None, out: Path | None, registry_file: Path | None, dry_run: bool, yes: bool
) -> None:
    """Skip what listener NAME has pending (the MCQ paper's flush): every skipped record is
    written to a file first, a skipped parked change's key is unblocked, then the
    listener's consumer groups move past them.

    Refused while an instance of NAME runs (exit 1, naming the instances); without --yes
    (or --dry-run) nothing is done (exit 2)."""
    from datetime import UTC, datetime

    from consumers.runtime.flush import Flush

    before_ms = None
    if before is not None:
        point = _replay_point(before)
        if not isinstance(point, int):
            raise click.BadParameter(f"{before!r} is not an ISO 8601 time", param_hint="--before")
        before_ms = point
    settings = _settings()
    with _moving_groups("flush"):
        job = Flush(settings, _current_registry(registry_file), name)
        plan = job.plan(before_ms)
        for line in plan.lines():
            _say(f"flush {name}: {line}")
        if dry_run:
            _say(f"flush {name}: dry run: nothing changed")
            return
        if not plan.pending:
            return
        if not yes:
            _stop(
                f"mcq flush: {name}: {plan.pending:,} pending record(s) would never be applied; add --yes to skip them",
                EXIT_CONFIG,
            )
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = out or settings.stack.home / "flushed" / f"{settings.topic_prefix}.{name}.{stamp}.jsonl"
        written = job.apply(plan, target)
    _say(f"flush {name}: skipped {written:,} record(s), written to {target}")


@main.command("purge")
@click.argument("names", nargs=-1)
@click.option(
    "--gone-after",
    type=click.FloatRange(min=0),
    default=24.0,
    show_default=True,
    help="Hours since an instance's last heartbeat before it counts as gone.",
)
@path_option(
    "--out", "Directory of the files of what is removed (JSON Lines); default $MCQ_HOME/purged.", directory=True
)
@FROM_FILE
@dry_run("Show what would be removed")
def purge(
    names: tuple[str, ...], gone_after: float, out: Path | None, registry_file: Path | None, dry_run: bool
) -> None:
    """Apply retention for stopped listeners NAMES (default: every listener): resolved dead
    letters older than delivery.dead_letter_retention_days, applied positions of keys
    deleted longer ago than their topic keeps deletes, heartbeats of instances gone.
    Everything removed is written to a file first; unresolved dead letters are kept.

    A running listener is skipped with one line on stderr (exit 1 at the end); exit 2 for
    an unknown listener."""
    from datetime import UTC, datetime

    from consumers.exceptions import ConsumerError
    from consumers.runtime.purge import Purge

    settings = _settings()
    registry = _current_registry(registry_file)
    _refuse_unknown("purge", registry, names)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    failed = False
    for name in names or tuple(li.name for li in registry.listeners):
        try:
            job = Purge(settings, registry, name, gone_after_s=gone_after * 3600)
            plan = job.plan()
            for line in plan.lines():
                _say(f"purge {name}: {line}")
            if dry_run or not plan.total:
                continue
            target = (out or settings.stack.home / "purged") / f"{settings.topic_prefix}.{name}.{stamp}.jsonl"
            removed = job.apply(plan, target)
            _say(f"purge {name}: removed {removed:,}, written to {target}")
        except ConsumerError as exc:
            _err(f"mcq {exc}")
            failed = True
    if dry_run:
        _say("purge: dry run: nothing removed")
    if failed:
        sys.exit(EXIT_FAILED)
