"""The import command's zip, without Superset."""

from __future__ import annotations

import io
import zipfile

import pytest
from tierlake_client.superset import dashboard


def test_the_zip_points_the_database_at_the_given_url_without_its_password():
    blob = dashboard.export_zip("tierlake://ana%40corp:s3cret@gw.example:10001/sales?ssl=true", None, "lakes")
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        names = z.namelist()
        (db,) = [n for n in names if n.startswith("tierlake_dashboard/databases/")]
        text = z.read(db).decode()
        everything = b"".join(z.read(n) for n in names)
    assert "sqlalchemy_uri: tierlake://ana%40corp@gw.example:10001/sales?ssl=true" in text
    assert "database_name: lakes" in text
    assert b"s3cret" not in everything
    assert {n.split("/")[1] for n in names} == {"metadata.yaml", "databases", "datasets", "charts", "dashboards"}


def test_an_existing_database_uuid_replaces_the_shipped_one_everywhere():
    shipped = dashboard._database_uuid()
    blob = dashboard.export_zip("tierlake://u@h:1/d", "00000000-0000-0000-0000-00000000abcd")
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        everything = b"".join(z.read(n) for n in z.namelist())
    assert shipped.encode() not in everything
    assert everything.count(b"00000000-0000-0000-0000-00000000abcd") >= 6  # the database and its five datasets


def test_only_tierlake_urls_are_taken():
    with pytest.raises(ValueError, match="expected a tierlake:// URL"):
        dashboard.export_zip("hive://u@h:1/d")


def test_grid_rows_hold_twelve_columns():
    position = dashboard.grid([(1, "a", 6, 30, "x"), (2, "b", 6, 30, "y"), (3, "c", 12, 50, "z")])
    rows = position["GRID_ID"]["children"]
    assert [position[r]["children"] for r in rows] == [["CHART-1", "CHART-2"], ["CHART-3"]]
    assert position["CHART-3"]["meta"] == {"width": 12, "height": 50, "chartId": 3, "uuid": "c", "sliceName": "z"}
