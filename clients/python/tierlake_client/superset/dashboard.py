"""The shipped Superset dashboard "tierlake tiering" and the command that imports it.

``tierlake-superset import-dashboard`` zips the export kept next to this
module (``dashboard/``: one database, five datasets, five charts, one
dashboard, as Superset's own export writes them), points its database at the
``tierlake://`` URL given, and posts it to Superset's import API
(``/api/v1/dashboard/import/``) as a Superset user who may import dashboards:

    SUPERSET_PASSWORD=admin tierlake-superset import-dashboard \\
        --superset http://127.0.0.1:8088 --superset-user admin \\
        --database-uri 'tierlake://admin:secret@127.0.0.1:10000/default'

When Superset already has a database of that name (default ``tierlake``), the
dashboard is attached to it (its URL is updated to the one given). Only the
standard library is used (no ``requests``), so the command runs wherever the
client is installed.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import io
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from pathlib import Path
from typing import Any

EXPORT_DIR = Path(__file__).resolve().parent / "dashboard"
PLACEHOLDER_URI = "tierlake://tierlake@127.0.0.1:10000/default"

# The lag chart's dataset: for each round, how long the table's lake had been
# waiting for it, i.e. the time since the table's previous round ended (the
# oldest change this round carried was at most that old when it landed).
LAG_DATASET_SQL = """SELECT concat(database_name, '.', table_name) AS table_path,
       ended_at,
       outcome,
       rows,
       CAST(unix_timestamp(ended_at)
            - unix_timestamp(lag(ended_at) OVER (PARTITION BY database_name, table_name ORDER BY ended_at))
            AS BIGINT) AS lag_seconds
FROM sys.tiering_rounds
WHERE ended_at IS NOT NULL"""

# The "Failed rounds" chart's dataset: one row per tiered table, with how many
# of its rounds did not finish (0 when all is well: the chart shows every table,
# never "No results"), when the last of them ended and its error.
FAILURES_DATASET_SQL = """SELECT s.database_name,
       s.table_name,
       count(r.outcome) AS failed_rounds,
       max(r.ended_at) AS last_failed_at,
       max_by(r.error, r.ended_at) AS last_error
FROM sys.lake_tiering_status s
LEFT JOIN sys.tiering_rounds r
  ON r.database_name = s.database_name AND r.table_name = s.table_name
 AND r.outcome NOT IN ('finished', 'force_finished')
GROUP BY s.database_name, s.table_name"""

# The "Data quality" chart's dataset: one row per tiered table with its latest
# validation run (sys.validate, or a round's quality gate): passed, failed (and
# which expectations) or never validated.
QUALITY_DATASET_SQL = """SELECT s.database_name,
       s.table_name,
       CASE WHEN max(q.run_time) IS NULL THEN 'never validated'
            WHEN count_if(NOT q.success) = 0 THEN 'passed'
            ELSE 'failed' END AS result,
       max(q.run_time) AS last_run,
       count(q.expectation) AS expectations,
       count_if(NOT q.success) AS failed_expectations,
       concat_ws(', ', collect_list(CASE WHEN NOT q.success THEN q.expectation END)) AS failing
FROM sys.lake_tiering_status s
LEFT JOIN (SELECT *, dense_rank() OVER (PARTITION BY database_name, table_name
                                        ORDER BY run_time DESC, run_id DESC) AS recency
           FROM sys.lake_data_quality) q
  ON q.database_name = s.database_name AND q.table_name = s.table_name AND q.recency = 1
GROUP BY s.database_name, s.table_name"""


class SupersetError(Exception):
    """Superset answered an API call with an error."""


class SupersetApi:
    """Superset's REST API as one user: JWT login, then its CSRF token and
    session cookie (Superset checks CSRF on API writes unless configured off)."""

    def __init__(self, base_url: str, user: str, password: str):
        self.base = base_url.rstrip("/")
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.headers: dict[str, str] = {"Referer": self.base}
        token = self.call("POST", "/api/v1/security/login",
                          {"username": user, "password": password, "provider": "db", "refresh": True})
        self.headers["Authorization"] = f"Bearer {token['access_token']}"
        self.headers["X-CSRFToken"] = self.call("GET", "/api/v1/security/csrf_token/")["result"]

    def call(self, method: str, path: str, body: Any = None, *, raw: bool = False,
             data: bytes | None = None, content_type: str | None = None) -> Any:
        headers = dict(self.headers)
        if body is not None:
            data, content_type = json.dumps(body).encode(), "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=300) as response:
                payload = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:2000]
            raise SupersetError(f"{method} {path}: HTTP {e.code}: {detail}") from None
        return payload if raw else json.loads(payload or b"null")

    def database_named(self, name: str) -> dict | None:
        query = urllib.parse.quote(f"(filters:!((col:database_name,opr:eq,value:'{name}')))")
        found = self.call("GET", f"/api/v1/database/?q={query}")["result"]
        return found[0] if found else None


def grid(charts: list[tuple[int, str, int, int, str]]) -> dict:
    """A dashboard layout (``position_json``) of (chart id, uuid, width, height,
    name): charts in rows of 12 columns."""
    position: dict[str, Any] = {
        "DASHBOARD_VERSION_KEY": "v2",
        "ROOT_ID": {"type": "ROOT", "id": "ROOT_ID", "children": ["GRID_ID"]},
        "GRID_ID": {"type": "GRID", "id": "GRID_ID", "children": [], "parents": ["ROOT_ID"]},
        "HEADER_ID": {"id": "HEADER_ID", "type": "HEADER", "meta": {"text": "tierlake tiering"}},
    }
    row, used = None, 12
    for chart_id, chart_uuid, width, height, name in charts:
        if used + width > 12:
            row = f"ROW-{len(position)}"
            position[row] = {"type": "ROW", "id": row, "children": [], "parents": ["ROOT_ID", "GRID_ID"],
                             "meta": {"background": "BACKGROUND_TRANSPARENT"}}
            position["GRID_ID"]["children"].append(row)
            used = 0
        key = f"CHART-{chart_id}"
        position[key] = {"type": "CHART", "id": key, "children": [], "parents": ["ROOT_ID", "GRID_ID", row],
                         "meta": {"width": width, "height": height, "chartId": chart_id, "uuid": chart_uuid,
                                  "sliceName": name}}
        position[row]["children"].append(key)
        used += width
    return position


def neutral(relative: Path, content: bytes) -> bytes:
    """An exported file as shipped: the database's URL replaced by a placeholder."""
    if relative.parts[0] == "databases":
        text = re.sub(r"(?m)^sqlalchemy_uri: .*$", f"sqlalchemy_uri: {PLACEHOLDER_URI}", content.decode())
        return text.encode()
    return content


def export_zip(database_uri: str, database_uuid: str | None = None, database_name: str = "tierlake") -> bytes:
    """The shipped export as Superset's import takes it, pointed at ``database_uri``."""
    url = urllib.parse.urlsplit(database_uri)
    if url.scheme != "tierlake":
        raise ValueError(f"expected a tierlake:// URL, got {database_uri!r}")
    # The password travels apart (the import's `passwords`), never in the file.
    netloc = url.hostname or "127.0.0.1"
    if url.username:
        netloc = f"{urllib.parse.quote(urllib.parse.unquote(url.username), safe='')}@{netloc}"
    if url.port:
        netloc += f":{url.port}"
    uri = urllib.parse.urlunsplit((url.scheme, netloc, url.path, url.query, ""))
    files = sorted(p for p in EXPORT_DIR.rglob("*.yaml"))
    kinds = {p.relative_to(EXPORT_DIR).parts[0] for p in files}
    missing = {"metadata.yaml", "databases", "datasets", "charts", "dashboards"} - kinds
    if missing:
        # Superset imports what it is given and skips charts whose datasets are absent.
        raise FileNotFoundError(f"the dashboard export in {EXPORT_DIR} lacks {', '.join(sorted(missing))}")
    shipped_uuid = _database_uuid()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for path in files:
            text = path.read_text(encoding="utf-8")
            if database_uuid:
                text = text.replace(shipped_uuid, database_uuid)
            relative = path.relative_to(EXPORT_DIR)
            if relative.parts[0] == "databases":
                text = text.replace(PLACEHOLDER_URI, uri)
                text = re.sub(r"(?m)^database_name: .*$", f"database_name: {database_name}", text)
            z.writestr(f"tierlake_dashboard/{relative.as_posix()}", text)
    return buffer.getvalue()


def _database_uuid() -> str:
    (database,) = (EXPORT_DIR / "databases").glob("*.yaml")
    match = re.search(r"(?m)^uuid: (\S+)$", database.read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f"{database} has no uuid")
    return match.group(1)


def import_dashboard(api: SupersetApi, database_uri: str, database_name: str = "tierlake") -> None:
    """Import the dashboard into the Superset ``api`` talks to."""
    existing = api.database_named(database_name)
    database_uuid = str(existing["uuid"]) if existing and existing.get("uuid") else None
    if existing and not database_uuid:
        database_uuid = str(api.call("GET", f"/api/v1/database/{existing['id']}")["result"]["uuid"])
    blob = export_zip(database_uri, database_uuid, database_name)
    password = urllib.parse.unquote(urllib.parse.urlsplit(database_uri).password or "")
    (database_file,) = (EXPORT_DIR / "databases").glob("*.yaml")
    fields = {"overwrite": "true",
              "passwords": json.dumps({f"databases/{database_file.name}": password} if password else {})}
    boundary = uuid.uuid4().hex
    parts = []
    for key, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="formData"; '
                 f'filename="tierlake_dashboard.zip"\r\nContent-Type: application/zip\r\n\r\n'.encode()
                 + blob + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    api.call("POST", "/api/v1/dashboard/import/", data=b"".join(parts),
             content_type=f"multipart/form-data; boundary={boundary}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tierlake-superset", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import-dashboard", help="import the 'tierlake tiering' dashboard into a Superset")
    imp.add_argument("--superset", default="http://127.0.0.1:8088", help="Superset's URL")
    imp.add_argument("--superset-user", default="admin")
    imp.add_argument("--superset-password", default=None,
                     help="default: $SUPERSET_PASSWORD (a password on the command line shows in `ps`)")
    imp.add_argument("--database-uri", required=True, help="tierlake://user:password@host:10000/default")
    imp.add_argument("--database-name", default="tierlake", help="Superset's name for the connection")
    args = parser.parse_args(argv)
    password = args.superset_password if args.superset_password is not None else os.environ.get("SUPERSET_PASSWORD")
    if password is None:
        parser.error("give the Superset password in $SUPERSET_PASSWORD (or --superset-password)")
    try:
        api = SupersetApi(args.superset, args.superset_user, password)
        import_dashboard(api, args.database_uri, args.database_name)
    except (SupersetError, ValueError, OSError) as e:
        print(f"tierlake-superset: {e}", file=sys.stderr)
        return 1
    print(f"imported the 'tierlake tiering' dashboard into {args.superset} (database {args.database_name!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
