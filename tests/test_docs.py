"""Every registered procedure, setting and error class is documented."""

import re
from pathlib import Path

from tierlake.procedures import load_builtins
from tierlake.server import exceptions
from tierlake.server.runtime.config import DEFAULTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_procedure_has_a_section_in_docs():
    text = (DOCS / "procedures.md").read_text()
    documented = set(re.findall(r"^## (sys\.\w+)", text, re.M))
    registered = {p.qualified_name for p in load_builtins()}
    missing = registered - documented
    assert not missing, f"undocumented procedures: {sorted(missing)}"


def test_every_sys_view_is_documented():
    from tierlake import sql

    text = (DOCS / "procedures.md").read_text()
    for path in sql.files("views"):
        assert f"## sys.{path.stem}" in text, path.stem


def test_every_tierlake_setting_is_documented():
    text = (DOCS / "configuration.md").read_text()
    for key in DEFAULTS:
        assert f"`{key}`" in text, key


def test_every_error_class_is_documented():
    text = (DOCS / "errors.md").read_text()
    for name in dir(exceptions):
        obj = getattr(exceptions, name)
        if isinstance(obj, type) and issubclass(obj, exceptions.TierlakeError) and obj is not exceptions.TierlakeError:
            assert f"`{name}`" in text, name


def test_every_sql_function_has_a_section_in_docs():
    from tierlake.udfs import load_builtins as load_functions

    text = (DOCS / "functions.md").read_text()
    documented = set(re.findall(r"^## (\w+)", text, re.M))
    for udf in load_functions():
        assert udf.name in documented, f"undocumented SQL function: {udf.name}"
        # The documented signature is the registered one.
        assert f"`{udf.signature()}`" in text, udf.signature()
