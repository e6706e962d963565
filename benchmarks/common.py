"""Shared set-up for the benchmarks: TPC-H lineitem in a trimerge repository and random edits."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
DATA = HERE / "_data"
WORK = HERE / "_work"
KEY = ["l_orderkey", "l_linenumber"]
UPDATABLE = ["l_quantity", "l_extendedprice", "l_discount", "l_tax", "l_returnflag", "l_linestatus",
             "l_shipdate", "l_shipmode", "l_comment"]


def lineitem(scale: int = 1) -> pa.Table:
    """TPC-H lineitem at scale factor ``scale`` (generated once with tpchgen-cli)."""
    out = DATA / f"sf{scale}"
    path = out / "lineitem.parquet"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        exe = shutil.which("tpchgen-cli")
        if exe is None:
            sys.exit("tpchgen-cli is missing: pip install tpchgen-cli (or pip install -e '.[bench]')")
        subprocess.run([exe, "parquet", "-s", str(scale), "--tables=lineitem", f"--output-dir={out}"], check=True)
    table = pq.read_table(path)
    # Plain string types: what Lance stores and what the peers read back.
    schema = pa.schema([f.with_type(pa.string()) if f.type == pa.string_view() else f for f in table.schema])
    return table.cast(schema)


@contextmanager
def timed(results: dict, name: str):
    t0 = time.perf_counter()
    yield
    results[name] = time.perf_counter() - t0


def median_time(fn, repeat: int = 5) -> float:
    """Median wall seconds of ``repeat`` calls."""
    import statistics

    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def best_of(fn, repeat: int = 3):
    """(best seconds, last result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def own_peak_rss_mb() -> float:
    """This process's own peak RSS (``VmHWM``). ``ru_maxrss`` would include the parent's
    high-water mark, inherited across fork + exec."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def random_edits(table: pa.Table, rng: np.random.Generator, update_frac: float, delete_frac: float,
                 insert_frac: float, exclude: set | None = None, key_offset: int = 0):
    """(updated rows, delete predicate keys, inserted rows) touching random keys of ``table``.

    Updates change 1-3 columns each; inserts get fresh order keys above the table's maximum."""
    n = table.num_rows
    n_upd, n_del, n_ins = int(n * update_frac), int(n * delete_frac), int(n * insert_frac)
    idx = rng.choice(n, n_upd + n_del, replace=False)
    upd_idx, del_idx = np.sort(idx[:n_upd]), np.sort(idx[n_upd:])
    updated = table.take(pa.array(upd_idx))
    cols = {c: updated.column(c).to_pylist() for c in UPDATABLE}
    for row in range(n_upd):
        for c in rng.choice(UPDATABLE, size=rng.integers(1, 4), replace=False):
            v = cols[c][row]
            if c == "l_comment":
                cols[c][row] = (v or "")[::-1] + "!"
            elif c in ("l_returnflag", "l_linestatus"):
                cols[c][row] = "Z"
            elif c == "l_shipmode":
                cols[c][row] = "DRONE"
            elif c == "l_shipdate":
                cols[c][row] = v.replace(day=1) if v.day != 1 else v.replace(day=2)
            else:
                cols[c][row] = type(v)(str(round(float(v) + 1.25, 2))) if v is not None else v
    for c, values in cols.items():
        updated = updated.set_column(updated.schema.get_field_index(c), c, pa.array(values, updated.schema.field(c).type))
    deleted = table.select(KEY).take(pa.array(del_idx))
    base = int(pc.max(table.column("l_orderkey")).as_py()) + 1 + key_offset
    ins = table.take(pa.array(rng.choice(n, n_ins, replace=False)))
    ins = ins.set_column(0, "l_orderkey", pa.array(np.arange(base, base + n_ins), pa.int64()))
    ins = ins.set_column(ins.schema.get_field_index("l_linenumber"), "l_linenumber",
                         pa.array(np.ones(n_ins, dtype=np.int32), ins.schema.field("l_linenumber").type))
    return updated, deleted, ins


def delete_predicate(keys: pa.Table) -> str:
    """A SQL predicate for a set of (l_orderkey, l_linenumber) keys, grouped by order key."""
    by_order: dict[int, list[int]] = {}
    for o, l in zip(keys.column(0).to_pylist(), keys.column(1).to_pylist()):
        by_order.setdefault(o, []).append(l)
    return " OR ".join(f"(l_orderkey = {o} AND l_linenumber IN ({','.join(map(str, ls))}))" for o, ls in by_order.items())


def fresh_dir(name: str) -> Path:
    path = WORK / name
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return "" if v is None else str(v)


os.environ.setdefault("POLARS_MAX_THREADS", str(os.cpu_count() or 2))
