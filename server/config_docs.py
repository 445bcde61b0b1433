"""docs/configuration.md's tables, generated from the two registries.

Settings (:mod:`tierlake.server.config.settings`) and table properties
(:mod:`tierlake.server.catalog.properties`) are each declared once; this
module renders both into the doc between its ``BEGIN/END GENERATED`` markers::

    python -m tierlake.server.config_docs --markdown   # print the tables
    python -m tierlake.server.config_docs --write      # update the doc in place
"""

from __future__ import annotations

from tierlake.server.catalog import properties
from tierlake.server.config import settings


def generated_sections() -> dict[str, str]:
    """Section name → generated markdown, for every generated part of docs/configuration.md."""
    return {"settings": settings.settings_markdown(), "table-properties": properties.table_properties_markdown(),
            "commit-properties": properties.commit_properties_markdown()}


def render_doc(text: str) -> str:
    """``text`` (docs/configuration.md) with every generated section replaced by its current rendering."""
    for name, body in generated_sections().items():
        begin, end = settings.BEGIN.format(name=name), settings.END.format(name=name)
        head, found, rest = text.partition(begin)
        if not found:
            raise ValueError(f"{settings.DOC_PATH} lacks the marker {begin}")
        _, found, tail = rest.partition(end)
        if not found:
            raise ValueError(f"{settings.DOC_PATH} lacks the marker {end}")
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m tierlake.server.config_docs",
                                     description="Render the settings and table-property registries.")
    parser.add_argument("--markdown", action="store_true", help="print the generated tables")
    parser.add_argument("--write", action="store_true", help=f"update {settings.DOC_PATH} in place")
    args = parser.parse_args(argv)
    if args.write:
        path = Path(__file__).resolve().parents[1] / settings.DOC_PATH
        path.write_text(render_doc(path.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"updated {path}")
    else:
        print("\n\n".join(generated_sections().values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
