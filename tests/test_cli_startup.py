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

needs_pandas = pytest.mark.skipif(importlib.util.find_spec("pandas") is None,
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


@needs_pandas
@pytest.mark.parametrize("verb", [["read", "t"], ["read", "t", "--format", "json"], ["diff", "main", "feat"],
                                  ["diff", "main", "feat", "--where", "v = 'b'", "--json"], ["show", "feat"]],
                         ids=lambda v: " ".join(v))
def test_data_commands_run_without_pandas(small, verb):
    res = run_python(RUN, small, *verb)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "['lance', 'pyarrow']"


@needs_pandas
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


@needs_pandas
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


LOADED = """
import json, sys
from trimerge.cli import main
try:
    main(["-C", sys.argv[1], *sys.argv[2:]])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(json.dumps(sorted(sys.modules)))
"""

#: Never needed by a command that only reads: polars (the text table is drawn without it when it is
#: small, trimerge.cli.texttable), python-ulid (its import reads every package's metadata; only
#: writes make ids), the diff and merge engines, the managers of gc, fsck and data checks.
READING_NEVER = ("pandas", "polars", "ulid", "trimerge.diff", "trimerge.merge", "trimerge.lineage.safety.gc",
                 "trimerge.lineage.safety.fsck", "trimerge.lineage.gates.checks", "trimerge.lineage.restore")
#: Metadata commands read no table: no Arrow, no Lance.
METADATA_NEVER = (*READING_NEVER, "lance", "pyarrow", "numpy", "duckdb")


@pytest.mark.parametrize("verb, never", [
    (["--help"], (*METADATA_NEVER, "trimerge.lineage.repository", "trimerge.lineage.commit")),
    (["log"], METADATA_NEVER),
    (["log", "--oneline", "-n", "1"], METADATA_NEVER),
    (["branch"], METADATA_NEVER),
    (["read", "t"], READING_NEVER),
    (["read", "t", "--format", "json"], READING_NEVER),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_commands_do_not_import_what_they_do_not_use(small, verb, never):
    """What makes a command start slowly is what it imports: each of these stays out (issue 42,
    item 6: data commands start in at most 0.6 s on a small repository)."""
    import json

    res = run_python(LOADED, small, *verb)
    assert res.returncode == 0, res.stderr
    loaded = set(json.loads(res.stdout.strip().splitlines()[-1]))
    assert "trimerge.cli" in loaded
    assert not loaded & set(never), sorted(loaded & set(never))


def test_writes_without_a_filter_do_not_load_the_sql_parser(small, tmp_path):
    """sqlglot (~90 ms to import) is loaded by the verbs that parse SQL, not by every write."""
    (tmp_path / "rows.csv").write_text("id,v\n4,d\n")
    script = RUN.replace('("lance", "pyarrow", "pandas", "pyspark")', '("sqlglot",)')
    for verb in (["load", "t", str(tmp_path / "rows.csv"), "--mode", "upsert"], ["branch", "create", "other"]):
        res = run_python(script, small, *verb)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip().splitlines()[-1] == "[]", verb
