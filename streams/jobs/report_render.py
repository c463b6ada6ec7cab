"""The report's files: one self-contained HTML page (plots embedded as PNG, no external
asset: it opens offline and can be mailed) and the same figures as CSV beside it."""

from __future__ import annotations

import base64
import csv
import html
import io
from collections import defaultdict
from pathlib import Path

from mcq.config import Settings
from streams.jobs.report import Figures

CSV_HEADERS = {
    "changes": ("day", "table_subtype", "changes"),
    "applied": ("day", "listener", "changes_applied"),
    "latency": ("listener", "changes", "p50_s", "p90_s", "p99_s", "max_s"),
    "bulk-wait": ("listener", "bulk_changes_applied", "average_wait_s"),
    "dead-letters": ("day", "listener", "reason", "dead_letters"),
}
TOP = 8  # series shown by name in a plot; the rest summed as "other"


def default_report(settings: Settings) -> Path:
    """Where ``mcq report`` writes by default, and where the console finds the latest report."""
    return settings.stack.home / "reports" / f"{settings.topic_prefix}-report.html"


def csv_paths(out: Path) -> dict[str, Path]:
    return {name: out.with_name(f"{out.stem}-{name}.csv") for name in CSV_HEADERS}


def write(figures: Figures, out: Path) -> list[Path]:
    """Write the HTML page OUT and its CSV files; the paths written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[tuple[object, ...]]] = {
        "changes": list(figures.changes),
        "applied": list(figures.applied),
        "latency": [(n, c, round(a, 3), round(b, 3), round(d, 3), round(e, 3)) for n, c, a, b, d, e in figures.latency],
        "bulk-wait": [(n, c, round(w, 3)) for n, c, w in figures.bulk_wait],
        "dead-letters": list(figures.dead_letters),
    }
    written = []
    for name, path in csv_paths(out).items():
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(CSV_HEADERS[name])
            writer.writerows(rows[name])
        written.append(path)
    out.write_text(_page(figures, rows))
    return [out, *written]


def _stacked_days(data: list[tuple[str, str, int]], title: str, ylabel: str) -> str:
    """A stacked bar plot per day of the series in DATA (day, series, n), as a data URL."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    totals: dict[str, int] = defaultdict(int)
    for _, series, n in data:
        totals[series] += n
    named = [s for s, _ in sorted(totals.items(), key=lambda x: -x[1])[:TOP]]
    days = sorted({d for d, _, _ in data})
    by: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for day, series, n in data:
        by[series if series in named else "other"][day] += n
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
    bottom = [0] * len(days)
    for series in [*named, *(["other"] if "other" in by else [])]:
        values = [by[series].get(d, 0) for d in days]
        ax.bar(days, values, bottom=bottom, label=series)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    return _png(fig)


def _latency_plot(latency: list[tuple[str, int, float, float, float, float]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    names = [x[0] for x in latency]
    width = 0.27
    for i, (label, idx) in enumerate((("p50", 2), ("p90", 3), ("p99", 4))):
        ax.bar([j + (i - 1) * width for j in range(len(names))], [x[idx] for x in latency], width, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds")
    ax.set_title("Commit to applied, per listener")
    ax.legend(fontsize=8)
    return _png(fig)


def _png(fig: object) -> str:
    from matplotlib import pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _table(name: str, rows: list[tuple[object, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in CSV_HEADERS[name])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    empty = f'<tr><td colspan="{len(CSV_HEADERS[name])}">nothing in this period</td></tr>'
    return f'<table id="{name}"><thead><tr>{head}</tr></thead><tbody>{body or empty}</tbody></table>'


def _plot(src: str | None, alt: str) -> str:
    return f'<img class="plot" src="{src}" alt="{html.escape(alt)}">' if src else ""


def _page(f: Figures, rows: dict[str, list[tuple[object, ...]]]) -> str:
    changes_plot = _stacked_days(f.changes, "Changes per day, by table/subtype", "changes") if f.changes else None
    applied_plot = _stacked_days(f.applied, "Changes applied per day, by listener", "changes") if f.applied else None
    latency_plot = _latency_plot(f.latency) if f.latency else None
    dead = [(d, f"{n}: {r}", c) for d, n, r, c in f.dead_letters]
    dead_plot = _stacked_days(dead, "Dead letters per day, by listener and reason", "dead letters") if dead else None
    total = sum(n for _, _, n in f.changes)
    applied_total = sum(n for _, _, n in f.applied)
    period = f"{f.since:%Y-%m-%d %H:%M} UTC to {f.made:%Y-%m-%d %H:%M} UTC"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mcq report: {html.escape(f.prefix)}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; color: #1d2330; margin: 1.5rem auto; max-width: 1100px;
       padding: 0 1rem; }}
table {{ border-collapse: collapse; margin: .5rem 0 1.5rem; }}
th, td {{ border: 1px solid #d9dee7; padding: .25rem .5rem; text-align: left; }}
th {{ background: #eef1f5; }}
img.plot {{ max-width: 100%; display: block; margin: .5rem 0; }}
.note {{ color: #5c6676; }}
</style></head><body>
<h1>mcq report: {html.escape(f.prefix)}</h1>
<p>{period}. {total:,} change(s) in the logical topics, {applied_total:,} applied by the listeners.
Computed in {f.seconds:.1f} s.</p>
<p class="note">The logical and applied-position topics are compacted: after the cleaner has run they keep the
last record of each key, so these figures count what the topics still hold.</p>
<h2>Changes per day per table/subtype</h2>{_plot(changes_plot, "changes per day per table/subtype")}
{_table("changes", rows["changes"])}
<h2>Changes applied per day per listener</h2>{_plot(applied_plot, "changes applied per day per listener")}
{_table("applied", rows["applied"])}
<h2>Commit to applied latency</h2>{_plot(latency_plot, "commit to applied latency per listener")}
{_table("latency", rows["latency"])}
<h2>Average wait in the bulk lane</h2>
{_table("bulk-wait", rows["bulk-wait"])}
<h2>Dead letters per day by reason</h2>{_plot(dead_plot, "dead letters per day by reason")}
{_table("dead-letters", rows["dead-letters"])}
</body></html>
"""
