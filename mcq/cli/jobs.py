"""``mcq refresh``, ``mcq reconcile``, ``mcq rebuild`` and ``mcq report``: the Spark batch jobs
over the compacted topics."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mcq.cli.app import (
    EXIT_CONFIG,
    EXIT_FAILED,
    FROM_FILE,
    MASTER,
    _current_registry,
    _job_failed,
    _moving_groups,
    _say,
    _settings,
    _stop,
    dry_run,
    main,
)

FROM_ORIGIN = click.option(
    "--from",
    "origin",
    type=click.Choice(["topics", "source"]),
    default="topics",
    show_default=True,
    help="Where the state comes from: the compacted logical topics' last states, or the source tables "
    "read now through JDBC (what finds and repairs a change the capture lost).",
)


@main.command("refresh")
@click.argument("name")
@click.option("--tname", help="Only this logical table (default: every table of the listener's interests).")
@click.option("--subtype", help="Only this subtype of --tname.")
@click.option(
    "--no-subtype", "bare", is_flag=True, help="Only --tname itself, none of its subtypes (--tname alone takes all)."
)
@click.option("--where", metavar="RULE", help="Only states that pass this rule (the registry's rule language).")
@click.option(
    "--keys",
    "keys_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Only these keys: CSV with a header row of key fields, or JSON Lines; a key may be partial.",
)
@FROM_ORIGIN
@FROM_FILE
@MASTER
@click.option("--dry-run", is_flag=True, help="Count what would be sent, per table, with examples; send nothing.")
def refresh(
    name: str,
    tname: str | None,
    subtype: str | None,
    bare: bool,
    where: str | None,
    keys_file: Path | None,
    origin: str,
    registry_file: Path | None,
    master: str | None,
    dry_run: bool,
) -> None:
    """Send the current state of the selected objects to listener NAME only (its bulk lane;
    other listeners see nothing): a Spark job over the compacted logical topics, or with
    --from source over the source tables that feed them (every row as its change record
    would carry it, at the database's current WAL position).

    A key without state is sent as a delete when the listener's target holds it (a whole
    table, or a key list that covers it) or when a key list names it whole. The listener
    applies the bulk lane while its real-time lane is idle. Exit 2 for an unknown listener
    or table, a rule that does not parse or a bad key file line (nothing is sent), 1 when
    the job fails, and 1 when --from source left out rows with no whole key (the rest was
    sent, or would be by a dry run: the target will not mirror those rows until they are
    repaired in the source)."""
    from streams.exceptions import SelectionError, SourceReadError, SparkSetupError
    from streams.jobs.refresh import Refresh, listener_tables
    from streams.jobs.selection import selection
    from streams.session import spark_session

    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        chosen = selection(listener_tables(registry, name), tname, subtype, where, keys_file, bare)
        job = Refresh(settings, registry, name, chosen, from_source=origin == "source")
    except SelectionError as exc:
        _stop(f"mcq refresh: {name}: {exc}", EXIT_CONFIG)
    try:
        spark = spark_session(settings, f"mcq-refresh-{name}", master)
        summary = job.run(spark, dry_run=dry_run)
    except (SparkSetupError, SourceReadError) as exc:
        _stop(f"mcq refresh: {name}: {exc}")
    except Exception as exc:
        _job_failed(f"mcq refresh: {name}", exc)
    for line in summary.lines():
        _say(f"refresh {name}: {line}")
    if dry_run:
        _say(f"refresh {name}: dry run: nothing sent ({summary.total:,} record(s) would be; {summary.seconds:.1f} s)")
    else:
        _say(
            f"refresh {name}: {summary.total:,} record(s) sent to {summary.topic} in {summary.seconds:.1f} s; "
            f"the listener applies them while its real-time lane is idle"
        )
    if summary.unkeyed:
        _say(
            f"refresh {name}: {summary.unkeyed:,} source row(s) left out (no whole key; see above): exit 1 until "
            "they are repaired in the source and refreshed again"
        )
        sys.exit(EXIT_FAILED)


@main.command("reconcile")
@click.argument("name", required=False)
@click.option("--repair", is_flag=True, help="Refresh exactly the drifted objects' keys into the listener's bulk lane.")
@FROM_ORIGIN
@click.option(
    "--capture",
    is_flag=True,
    help="Compare the logical topics themselves with the source tables (NAME's, or every fed "
    "table): a difference is a capture gap, upstream of every listener.",
)
@click.option(
    "--report",
    "report_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write every drifted object, with what it should hold and what it holds, to this JSON file.",
)
@FROM_FILE
@MASTER
def reconcile(
    name: str | None,
    repair: bool,
    origin: str,
    capture: bool,
    report_file: Path | None,
    registry_file: Path | None,
    master: str | None,
) -> None:
    """Compare listener NAME's target with the last state it should hold (a Spark job over
    the compacted logical topics, or with --from source over the source tables, through
    the listener's rules and column allow-lists, against the target read back): missing,
    extra and different objects, with examples. With --capture, compare the logical
    topics with the source tables instead (no target read).

    Exit 0 when the target holds what it should (or --repair sent the repair), 1 when it
    drifted (or the job failed), 2 for an unknown listener or a target that cannot be
    read back (table, ldap, file and sql_import targets can)."""
    if capture:
        _capture_gaps(name, repair, report_file, registry_file, master)
        return
    if name is None:
        raise click.UsageError("NAME is needed (or --capture, to compare the topics with the source)")
    from consumers.exceptions import ListenerConfigError, TargetUnavailable
    from streams.exceptions import SelectionError, SparkSetupError
    from streams.jobs.reconcile import Reconcile
    from streams.session import spark_session

    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        job = Reconcile(settings, registry, name, from_source=origin == "source")
    except (SelectionError, ListenerConfigError) as exc:
        _stop(f"mcq reconcile: {name}: {exc}", EXIT_CONFIG)
    try:
        spark = spark_session(settings, f"mcq-reconcile-{name}", master)
        drift = job.run(spark)
        for line in drift.lines():
            _say(f"reconcile {name}: {line}")
        if report_file is not None:
            drift.write(report_file)
            _say(f"reconcile {name}: report written to {report_file}")
        if drift.total and repair:
            sent, unkeyed = job.repair(spark, drift)
            if sent is not None:
                _say(
                    f"reconcile {name}: repair: {sent.total:,} record(s) for {drift.total - len(unkeyed):,} drifted "
                    f"object(s) sent to {sent.topic}; the listener applies them while its real-time lane is idle"
                )
            for obj in unkeyed:
                _say(
                    f"reconcile {name}: not repaired: {obj} is not an object mcq writes (no key can be read "
                    "from it): remove it at the target by hand"
                )
            if not unkeyed:
                return
    except SparkSetupError as exc:
        _stop(f"mcq reconcile: {exc}")
    except TargetUnavailable as exc:
        _stop(f"mcq reconcile: {name}: the target cannot be read: {exc}")
    except Exception as exc:
        _job_failed(f"mcq reconcile: {name}", exc)
    if drift.total:
        sys.exit(EXIT_FAILED)


@main.command("report")
@click.option("--since", default="7d", show_default=True, help="The period: 7d, 24h, 90m, or an ISO 8601 time.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file (its CSV files beside it); default $MCQ_HOME/reports/<prefix>-report.html, "
    "which the console links to.",
)
@FROM_FILE
@MASTER
def report_command(since: str, out: Path | None, registry_file: Path | None, master: str | None) -> None:
    """A report to put in front of a manager, computed by Spark over the topics: changes per
    day per table/subtype and per listener, commit-to-applied latency percentiles, the
    average wait in the bulk lane, dead letters per day by reason. One self-contained HTML
    file (plots embedded, opens offline) and the same figures as CSV.

    Exit 0 when written, 1 when the job failed, 2 for a --since it cannot read."""
    from streams.exceptions import ReportError, SparkSetupError
    from streams.jobs.progress import stage_progress
    from streams.jobs.report import compute, since_time
    from streams.jobs.report_render import default_report, write
    from streams.session import spark_session

    try:
        start = since_time(since)
    except ReportError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    settings = _settings()
    registry = _current_registry(registry_file)
    target = out or default_report(settings)
    try:
        spark = spark_session(settings, "mcq-report", master)
        with stage_progress(spark, "report"):
            figures = compute(spark, settings, registry, start)
        written = write(figures, target)
    except SparkSetupError as exc:
        _stop(f"mcq report: {exc}")
    except Exception as exc:
        _job_failed("mcq report", exc)
    total = sum(n for _, _, n in figures.changes)
    _say(f"report: {total:,} change(s) since {start:%Y-%m-%d %H:%M} UTC, in {figures.seconds:.1f} s")
    for path in written:
        _say(f"report: wrote {path}")


@main.command("rebuild")
@click.argument("name")
@click.option(
    "--truncate", is_flag=True, help="A table target: empty it first (faster; readers wait until it commits)."
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "spark", "direct"]),
    default="auto",
    show_default=True,
    help="Read the topics in a Spark job, or directly in this process (no Spark start; it holds "
    "the records: ~1.3 GB per million); auto: directly up to 1,500,000 records.",
)
@FROM_FILE
@MASTER
@dry_run("Count the live states that would be loaded")
def rebuild(
    name: str, truncate: bool, engine: str, registry_file: Path | None, master: str | None, dry_run: bool
) -> None:
    """Rebuild stopped listener NAME's target from the compacted logical topics, without
    consuming them through Kafka (a Spark job for big topics, a direct read for small ones:
    --engine): a table target by COPY in one transaction,
    any other through its adapter (what it holds beyond the states removed where it can be
    read back; the keys of its unresolved dead letters left out, as the listener left
    them). The listener's applied positions follow, and its group moves to the
    offsets the rebuild read up to: what is committed meanwhile is applied by its next run.

    Refused while an instance of NAME runs (exit 1, naming the instances); exit 2 for an
    unknown listener or --truncate on a target that is not a table; 1 when the job fails
    (the listener's offsets are then left where they were)."""
    from consumers.exceptions import ConsumerError, TargetUnavailable
    from streams.exceptions import SparkSetupError
    from streams.jobs.rebuild import Rebuild
    from streams.session import spark_session

    settings = _settings()
    registry = _current_registry(registry_file)
    with _moving_groups("rebuild"):
        job = Rebuild(settings, registry, name, truncate)
        job.groups.refuse_while_running("rebuild")
        try:
            summary = job.run(
                dry_run=dry_run,
                engine=engine,
                start_spark=lambda: spark_session(settings, f"mcq-rebuild-{name}", master),
            )
        except (SparkSetupError, TargetUnavailable) as exc:
            _stop(f"mcq rebuild: {name}: {exc}")
        except ConsumerError:
            raise  # a running listener, a refused change...: said by _moving_groups
        except Exception as exc:
            _job_failed(f"mcq rebuild: {name}", exc, "; the listener's offsets were not moved")
    for line in summary.lines():
        _say(f"rebuild {name}: {line}")
    if not dry_run:
        _say(f"rebuild {name}: done; the next run (mcq listen {name}) goes on from where the rebuild read up to")


def _capture_gaps(
    name: str | None, repair: bool, report_file: Path | None, registry_file: Path | None, master: str | None
) -> None:
    """``mcq reconcile [NAME] --capture``: the logical topics against the source."""
    from streams.exceptions import SelectionError, SparkSetupError
    from streams.jobs.reconcile import capture_gaps
    from streams.jobs.refresh import listener_tables
    from streams.session import spark_session

    if repair:
        raise click.UsageError(
            "--capture finds a gap, it does not repair one: refresh each listener from the source "
            "(mcq reconcile NAME --from source --repair, or mcq refresh NAME --from source)"
        )
    settings = _settings()
    registry = _current_registry(registry_file)
    try:
        tables = listener_tables(registry, name) if name else list(registry.tables)
    except SelectionError as exc:
        _stop(f"mcq reconcile: {name}: {exc}", EXIT_CONFIG)
    members = {m for t in tables if t.entity is not None for m in t.entity.members()}
    tables = [t for t in registry.tables if t.feeds and (t in tables or t.ref in members)]
    if not tables:
        _stop(f"mcq reconcile: {name or 'the registry'}: no table fed by a source table to compare", EXIT_CONFIG)
    try:
        spark = spark_session(settings, "mcq-reconcile-capture", master)
        drift = capture_gaps(spark, settings, registry, tables)
    except SelectionError as exc:
        _stop(f"mcq reconcile: {exc}", EXIT_CONFIG)
    except SparkSetupError as exc:
        _stop(f"mcq reconcile: {exc}")
    except Exception as exc:
        _job_failed("mcq reconcile --capture", exc)
    for line in drift.lines():
        _say(f"capture: {line}")
    if report_file is not None:
        drift.write(report_file)
        _say(f"capture: report written to {report_file}")
    if drift.total:
        readers = sorted({x.name for x in registry.listeners for t in tables if t in registry.tables_of(x.name)})
        _say(
            f"capture: the logical topics lack {drift.total:,} change(s) the source holds: a capture gap, upstream of "
            f"every listener; repair each listener reading these tables ({', '.join(readers) or 'none'}) with "
            "mcq reconcile NAME --from source --repair"
        )
        sys.exit(EXIT_FAILED)
