"""The status page: HTML with server-rendered SVG charts, no script and no asset from elsewhere.

``/`` lists every tiered table (status, lag against freshness, pending rows,
last error, a small lag chart); ``/table?name=db.table`` shows one table: its
lag over time, recent rounds, maintenance runs and data-quality results.
Both refresh themselves (``<meta http-equiv="refresh">``).

Lag over time comes from the round history (``sys.tiering_round_log``): just
before round *k* committed, the lake held the stream as of the previous round's
start, so the lake was at most ``ended_at(k) - started_at(k-1)`` behind (0 when
the round found nothing to tier). The last point is the current lag, from the
same values ``tierlake_table_lag_seconds`` reports.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from tierlake.server.escaping import printable
from tierlake.server.observability.metrics import TableEntry

REFRESH_S = 10
TIERED_OUTCOMES = ("finished", "force_finished")


@dataclass
class StatusSource:
    """Where the page's data comes from (wired by the composition root).

    ``tables``: the in-memory per-table values; ``rounds``: round-history rows
    (dicts with the columns of ``sys.tiering_rounds``); ``maintenance`` and
    ``quality``: rows for one ``(database, table)``, newest first."""

    tables: Callable[[], list[TableEntry]]
    rounds: Callable[[], Iterable[dict[str, Any]]] = lambda: []
    maintenance: Callable[[str, str], list[dict[str, Any]]] = lambda db, table: []
    quality: Callable[[str, str], list[dict[str, Any]]] = lambda db, table: []
    title: str = "tierlake"
    extra: dict[str, str] = field(default_factory=dict)


def _utc(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return None


def lag_points(rounds: Iterable[dict[str, Any]], current: tuple[datetime, float] | None = None
               ) -> list[tuple[datetime, float]]:
    """``(time, lag seconds)`` of one table's tiered rounds, oldest first (module docstring), then ``current``."""
    tiered = sorted((r for r in rounds if r.get("outcome") in TIERED_OUTCOMES and _utc(r.get("ended_at"))
                     and _utc(r.get("started_at"))), key=lambda r: _utc(r["ended_at"]))
    points, previous_start = [], None
    for r in tiered:
        ended, started = _utc(r["ended_at"]), _utc(r["started_at"])
        since = previous_start or started
        points.append((ended, max(0.0, (ended - since).total_seconds()) if (r.get("rows") or 0) > 0 else 0.0))
        previous_start = started
    if current is not None:
        points.append(current)
    return points


def svg_chart(points: list[tuple[datetime, float]], freshness_s: float, width: int = 640, height: int = 180,
              small: bool = False) -> str:
    """A line chart of lag over time as inline SVG; every point is a ``circle.point`` with its value as title."""
    pad_l, pad_r, pad_t, pad_b = (4, 4, 4, 4) if small else (56, 12, 12, 28)
    inner_w, inner_h = width - pad_l - pad_r, height - pad_t - pad_b
    top = max([freshness_s * 1.2, 1.0] + [v for _, v in points])
    parts = [f'<svg class="lag-chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="lag over time">',
             f'<rect x="{pad_l}" y="{pad_t}" width="{inner_w}" height="{inner_h}" fill="#fafafa" stroke="#ccc"/>']
    if not points:
        parts.append(f'<text x="{pad_l + 6}" y="{pad_t + inner_h / 2}" font-size="11" fill="#888">'
                     'no rounds yet</text></svg>')
        return "".join(parts)
    t0 = points[0][0].timestamp()
    span = max(points[-1][0].timestamp() - t0, 1.0)

    def xy(when: datetime, value: float) -> tuple[float, float]:
        return (pad_l + inner_w * (when.timestamp() - t0) / span if len(points) > 1 else pad_l + inner_w / 2,
                pad_t + inner_h * (1 - value / top))

    fy = pad_t + inner_h * (1 - freshness_s / top)
    parts.append(f'<line class="freshness" x1="{pad_l}" x2="{pad_l + inner_w}" y1="{fy:.1f}" y2="{fy:.1f}" '
                 'stroke="#d08000" stroke-dasharray="4 3"><title>freshness</title></line>')
    coords = [xy(t, v) for t, v in points]
    parts.append('<polyline fill="none" stroke="#2060c0" stroke-width="1.5" points="'
                 + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>')
    for (t, v), (x, y) in zip(points, coords, strict=True):
        color = "#c03030" if v > freshness_s else "#2060c0"
        parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="{2 if small else 3}" fill="{color}">'
                     f'<title>{t:%Y-%m-%d %H:%M:%S} UTC: {v:.0f} s</title></circle>')
    if not small:
        parts.append(f'<text x="{pad_l - 4}" y="{pad_t + 10}" font-size="11" text-anchor="end">'
                     f'{_seconds(top)}</text>')
        parts.append(f'<text x="{pad_l - 4}" y="{pad_t + inner_h}" font-size="11" text-anchor="end">0</text>')
        parts.append(f'<text x="{pad_l}" y="{height - 8}" font-size="11">{points[0][0]:%H:%M:%S}</text>')
        parts.append(f'<text x="{pad_l + inner_w}" y="{height - 8}" font-size="11" text-anchor="end">'
                     f'{points[-1][0]:%H:%M:%S} UTC</text>')
    parts.append("</svg>")
    return "".join(parts)


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    value = float(value)
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _bytes(value: float | None) -> str:
    if value is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return ""


def _when(value: Any) -> str:
    value = _utc(value)
    return "" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def _e(value: Any) -> str:
    return "" if value is None else html.escape(printable(value))


_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0} th,td{padding:.3em .6em;border-bottom:1px solid #ddd;text-align:left;
vertical-align:top} th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.status{font-weight:600;padding:.1em .4em;border-radius:3px}
.s-Failed{background:#fbe0e0;color:#a00000}.s-Tiering{background:#e0ecfb}.s-Pending{background:#fff3d6}
.s-Scheduled,.s-Tiered{background:#e3f6e3}
.error{color:#a00000;max-width:40em;white-space:pre-wrap;font-family:monospace;font-size:12px}
.over{color:#a00000;font-weight:600} .muted{color:#777} a{color:#2060c0}
"""


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="{REFRESH_S}"><title>{_e(title)}</title>'
            f"<style>{_STYLE}</style></head><body>{body}"
            f'<p class="muted">Refreshes every {REFRESH_S} s. Metrics: <a href="/metrics">/metrics</a>.</p>'
            "</body></html>")


def _rounds_by_table(rounds: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rounds:
        out.setdefault((r.get("database_name"), r.get("table_name")), []).append(r)
    return out


def overview(source: StatusSource) -> str:
    """``/``: every tiered table."""
    now = datetime.now(timezone.utc)
    entries = source.tables()
    history = _rounds_by_table(source.rounds())
    rows = []
    for e in entries:
        lag, pending_rows, pending_bytes = e.lag(now)
        over = lag > e.freshness_s
        chart = svg_chart(lag_points(history.get((e.database, e.table), []), (now, lag)), e.freshness_s,
                          width=180, height=40, small=True)
        link = f"/table?name={quote(e.database + '.' + e.table)}"
        rows.append(
            f'<tr class="table-row" data-table="{_e(e.database)}.{_e(e.table)}">'
            f'<td><a href="{link}">{_e(e.database)}.{_e(e.table)}</a></td>'
            f'<td><span class="status s-{_e(e.status)}">{_e(e.status)}</span></td>'
            f'<td class="num{" over" if over else ""}">{_seconds(lag)}</td>'
            f'<td class="num">{_seconds(e.freshness_s)}</td>'
            f'<td class="num">{pending_rows}</td><td class="num">{_bytes(pending_bytes)}</td>'
            f"<td>{chart}</td>"
            f'<td class="error">{_e(e.last_error) if e.status == "Failed" or e.last_error else ""}</td></tr>')
    if rows:
        table = ("<table id=\"tables\"><tr><th>table</th><th>status</th><th>lag</th><th>freshness</th>"
                 "<th>pending rows</th><th>pending bytes</th><th>lag over time</th><th>last error</th></tr>"
                 + "".join(rows) + "</table>")
    else:
        table = '<p id="tables" class="muted">No table is tiered yet.</p>'
    failed = sum(1 for e in entries if e.status == "Failed")
    behind = sum(1 for e in entries if e.lag(now)[0] > e.freshness_s)
    summary = (f'<p>{len(entries)} tables; <span class="{"over" if failed else ""}">{failed} failed</span>; '
               f'<span class="{"over" if behind else ""}">{behind} behind their freshness</span>. '
               f'{"; ".join(f"{_e(k)}: {_e(v)}" for k, v in source.extra.items())}</p>')
    return _page(source.title, f"<h1>{_e(source.title)}: lake tiering</h1>{summary}{table}")


def _rows_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]], css_id: str, empty: str) -> str:
    if not rows:
        return f'<p id="{css_id}" class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(title)}</th>" for _, title in columns)
    body = []
    for r in rows:
        cells = []
        for key, _ in columns:
            value = r.get(key)
            if isinstance(value, datetime):
                cells.append(f"<td>{_when(value)}</td>")
            elif key in ("error", "unexpected_sample", "detail"):
                cells.append(f'<td class="error">{_e(value)}</td>')
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f'<td class="num">{value}</td>')
            else:
                cells.append(f"<td>{_e(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="{css_id}"><tr>{head}</tr>{"".join(body)}</table>'


ROUND_COLUMNS = [("ended_at", "ended (UTC)"), ("outcome", "outcome"), ("rows", "rows"), ("bytes", "bytes"),
                 ("files", "files"), ("duration_ms", "ms"), ("start_position", "from"),
                 ("end_position", "to"), ("job_id", "job"), ("error", "error")]
MAINTENANCE_COLUMNS = [("started_at", "started (UTC)"), ("target", "target"), ("kind", "kind"),
                       ("run_trigger", "trigger"), ("duration_ms", "ms"), ("files_rewritten", "files rewritten"),
                       ("snapshots_expired", "snapshots expired"), ("orphans_removed", "orphans removed"),
                       ("detail", "detail"), ("error", "error")]
QUALITY_COLUMNS = [("run_time", "run (UTC)"), ("expectation", "expectation"), ("success", "success"),
                   ("observed_value", "observed"), ("unexpected_count", "unexpected"),
                   ("unexpected_sample", "sample")]


def table_page(source: StatusSource, database: str, table: str, recent: int = 20) -> str | None:
    """``/table?name=db.table``: one table's history; None when it is not tiered."""
    now = datetime.now(timezone.utc)
    entry = next((e for e in source.tables() if (e.database, e.table) == (database, table)), None)
    if entry is None:
        return None
    lag, pending_rows, pending_bytes = entry.lag(now)
    rounds = _rounds_by_table(source.rounds()).get((database, table), [])
    newest = sorted(rounds, key=lambda r: _utc(r.get("ended_at")) or now, reverse=True)[:recent]
    facts = [("status", entry.status), ("lag", _seconds(lag)), ("freshness", _seconds(entry.freshness_s)),
             ("pending rows", pending_rows), ("pending bytes", _bytes(pending_bytes)),
             ("tiered position", entry.tiered_position), ("job", entry.job_id or ""),
             ("next due (UTC)", _when(entry.next_due)), ("last tiered (UTC)", _when(entry.last_tiered_time)),
             ("consecutive failures", entry.failure_count),
             ("lake files", "" if entry.lake_files is None else entry.lake_files),
             ("lake bytes", _bytes(entry.lake_bytes))]
    body = [f'<p><a href="/">all tables</a></p><h1>{_e(database)}.{_e(table)}</h1>',
            '<table id="facts">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
            + "</table>"]
    if entry.last_error:
        body.append(f'<h2>Last error ({_when(entry.last_error_time)} UTC)</h2>'
                    f'<p class="error" id="last-error">{_e(entry.last_error)}</p>')
    body.append("<h2>Lag over time</h2>" + svg_chart(lag_points(rounds, (now, lag)), entry.freshness_s))
    body.append("<h2>Recent rounds</h2>" + _rows_table(newest, ROUND_COLUMNS, "rounds", "No round yet."))
    body.append("<h2>Maintenance runs</h2>" + _rows_table(source.maintenance(database, table), MAINTENANCE_COLUMNS,
                                                         "maintenance", "No maintenance run yet."))
    body.append("<h2>Data quality</h2>" + _rows_table(source.quality(database, table), QUALITY_COLUMNS,
                                                      "quality", "No data-quality result."))
    return _page(f"{database}.{table} · {source.title}", "".join(body))
