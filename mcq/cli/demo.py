"""``mcq demo``, ``mcq smoke`` and ``mcq world load``: the sample world and the shells that
prove the product on it (``mcq.demo``)."""

from __future__ import annotations

import sys
import time

import click

from mcq.cli.app import _current_registry, _say, _settings, _stop, console, main


@main.command("demo")
@click.option("--timeout", default=900, show_default=True, type=click.IntRange(min=60), help="Seconds to converge.")
def demo(timeout: int) -> None:
    """The whole pipeline on the campus world: normaliser and listeners running, a scripted
    burst of changes, then LDAP, the vendor table and BEST's files checked key by key
    against the source.

    Expects `make run`'s earlier steps (stack, world, registry, topics, schemas, capture).
    Exit 0 when every target equals the source."""
    from mcq.demo.run import run_demo

    settings = _settings()
    sys.exit(run_demo(settings, _current_registry(None), _say, float(timeout)))


# ------------------------------------------------------------------ world


@main.group()
def world() -> None:
    """The sample world: a campus identity database with realistic, seeded data."""


@world.command("load")
@click.option("--people", default=3000, show_default=True, type=click.IntRange(min=0), help="How many people.")
@click.option("--seed", default=2004, show_default=True, type=int, help="Same seed, same world.")
@click.option("--schema", default="campus", show_default=True, help="Schema in the source database.")
@click.option("--replace", is_flag=True, help="Empty the world's tables first (otherwise a loaded world is kept).")
def world_load(people: int, seed: int, schema: str, replace: bool) -> None:
    """Create the campus schema in the source database and load a generated world into it."""
    import psycopg

    from mcq.world import create_schema, generate, load

    settings = _settings()
    try:
        with psycopg.connect(settings.source.dsn(), autocommit=True) as conn:
            create_schema(conn, schema, replace=replace)
            existing = conn.execute(f'SELECT count(*) FROM "{schema}".people').fetchone()
            if existing and existing[0] and not replace:
                _say(f"{schema}: already holds {existing[0]} people; kept (use --replace to reload)")
                return
            started = time.monotonic()
            world_rows = generate(people, seed)
            if console.is_terminal:
                from rich.progress import Progress

                with Progress(console=console, transient=True) as bar:
                    task = bar.add_task(f"loading {schema}", total=None)
                    counts = load(
                        conn,
                        schema,
                        world_rows,
                        progress=lambda done, total: bar.update(task, completed=done, total=total),
                    )
            else:
                counts = load(conn, schema, world_rows)
    except (psycopg.Error, ValueError) as exc:
        _stop(f"mcq world load: {settings.source}: {exc}".strip())
    _say(
        f"{schema}: loaded {sum(counts.values())} rows ({people} people, seed {seed}) "
        f"in {time.monotonic() - started:.1f} s"
    )


@main.command()
def smoke() -> None:
    """Run the smoke pipeline on the configured stack: capture, registry, Spark."""
    from mcq.demo.smoke import run_smoke

    run_smoke(_settings())  # a SmokeFailed ends it: one line naming the step, exit 1
