"""The command line starts without pandas: pyarrow's first conversion (``import lance`` makes one)
imports pandas when it is installed — most of a small ``trimerge read``. The console entry point
hides it (:mod:`trimerge.cli.startup`) until pyspark, which needs it, is imported; a program that
imports trimerge keeps pandas as usual."""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pytest

import trimerge
from conftest import run_python

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pandas") is None,
                                reason="pandas is not installed: nothing to keep out")

RUN = """
import sys
from trimerge.cli import main
try:
    main(["-C", sys.argv[1], *sys.argv[2:]])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(sorted(m for m in ("lance", "pyarrow", "pandas", "pyspark") if m in sys.modules))
"""


@pytest.fixture
def small(tmp_path) -> str:
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), primary_key="id")
    repo.branches.create("feat")
    repo.update("t", pa.table({"id": [2], "v": ["B"]}), branch="feat")
    return str(tmp_path / "repo")


@pytest.mark.parametrize("verb", [["read", "t"], ["read", "t", "--format", "json"], ["diff", "main", "feat"],
                                  ["diff", "main", "feat", "--where", "v = 'b'", "--json"], ["show", "feat"]],
                         ids=lambda v: " ".join(v))
def test_data_commands_run_without_pandas(small, verb):
    res = run_python(RUN, small, *verb)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "['lance', 'pyarrow']"


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="pyspark is not installed")
def test_pandas_comes_back_when_pyspark_is_imported():
    res = run_python("""
import sys
from trimerge.cli import startup
startup.install()
import lance, pyarrow as pa
assert "pandas" not in sys.modules and not pa.lib._pandas_api.have_pandas
try:
    import pandas
except ModuleNotFoundError as exc:
    assert "hidden from the trimerge command line" in str(exc)
else:
    raise AssertionError("pandas was importable")
import pyspark  # needs pandas: pyarrow is told it is there
import pandas as pd
assert pa.lib._pandas_api.have_pandas
df = pd.DataFrame({"c": pd.Categorical(["x", "y"]), "f": [1.0, float("nan")]})
t = pa.Table.from_pandas(df, preserve_index=False)
assert pa.types.is_dictionary(t.schema.field("c").type) and t.column("f").null_count == 1  # NaN: null, as pandas has it
assert pa.array(pd.Series([1.0, float("nan")]), from_pandas=True).null_count == 1
assert t.to_pandas()["c"].dtype.name == "category"
print("ok")
""")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_a_program_importing_trimerge_keeps_pandas():
    res = run_python("""
import sys, trimerge, trimerge.cli, lance, pyarrow as pa
from trimerge.cli import startup
startup.install()  # too late to matter: pyarrow is loaded, nothing is hidden
import pandas
assert pa.lib._pandas_api.have_pandas
print("ok")
""")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
