"""Several processes writing one repository: no lost rows, no duplicate keys, no corruption."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import ConcurrentWriteError

from conftest import T

WORKER = r"""
import json, os, sys, time
import pyarrow as pa
import trimerge
from trimerge.lineage.errors import ConcurrentWriteError, TrimergeError

path, wid, task, arg, barrier, lock_timeout = sys.argv[1:7]
repo = trimerge.Repository.open(path, lock_timeout=float(lock_timeout))


def wait(step):
    open(os.path.join(barrier, f"ready-{step}-{wid}"), "w").close()
    deadline = time.time() + 60
    while len([n for n in os.listdir(barrier) if n.startswith(f"ready-{step}-")]) < 2:
        if time.time() > deadline:
            sys.exit("barrier timeout")
        time.sleep(0.002)


out = {"ok": [], "failed": [], "errors": []}
if task in ("append", "upsert", "multi"):
    branch, n = arg.split(",")
    wait("start")
    for i in range(int(n)):
        key = f"w{wid}-{i}"
        try:
            if task == "multi":
                with repo.transaction(branch=branch, actor=f"w{wid}") as tx:
                    tx.upsert("t", pa.table({"k": [key], "w": [int(wid)]}))
                    tx.append("u", pa.table({"k": [key], "w": [int(wid)]}))
                c = tx.commit
            else:
                fn = repo.append if task == "append" else repo.upsert
                c = fn("t", pa.table({"k": [key], "w": [int(wid)]}), branch=branch, actor=f"w{wid}")
            out["ok"].append([key, c.id])
        except ConcurrentWriteError as exc:
            out["failed"].append([key, exc.retryable])
elif task == "first-write":
    for r in range(int(arg)):
        wait(f"round{r}")
        c = repo.upsert("t", pa.table({"k": [f"w{wid}-r{r}"], "w": [int(wid)]}), branch=f"fresh{r}")
        out["ok"].append([f"w{wid}-r{r}", c.id])
elif task in ("branch", "tag"):
    for r in range(int(arg)):
        wait(f"round{r}")
        try:
            if task == "branch":
                repo.branches.create(f"same{r}", from_ref="main" if wid == "0" else "main~1")
            else:
                repo.tags.create(f"v{r}", ref="main" if wid == "0" else "main~1")
            out["ok"].append(r)
        except TrimergeError as exc:
            out["failed"].append([r, type(exc).__name__])
        except Exception as exc:
            out["errors"].append([r, f"{type(exc).__name__}: {exc}"])
print(json.dumps(out))
"""


def run_workers(tmp_path: Path, repo, task: str, arg: str, lock_timeout: float = 60.0, n: int = 2) -> list[dict]:
    barrier = tmp_path / f"barrier-{task}-{time.monotonic_ns()}"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, repo.uri, str(w), task, arg, str(barrier),
                               str(lock_timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(n)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def base(repo):
    repo.create_table("t", pa.table({"k": ["seed"], "w": [-1]}), primary_key="k")
    repo.create_table("u", pa.table({"k": ["seed"], "w": [-1]}), primary_key="k")
    repo.branches.create("b", from_ref="main")
    return repo


def check_history(repo, branch, results, tables=("t",)):
    ok = [(key, cid) for r in results for key, cid in r["ok"]]
    failed = [(key, retryable) for r in results for key, retryable in r["failed"]]
    assert all(retryable is True for _key, retryable in failed)
    log = repo.log(branch)
    ids = [c.id for c in log]
    # Every successful write is one commit in a linear history; nothing else was added.
    assert len(ids) == len(set(ids))
    assert {cid for _k, cid in ok} <= set(ids)
    assert len(log) == 3 + len(ok)  # root, create t, create u + one per successful write
    for c in log[:-1]:
        assert len(c.parents) == 1
    for table in tables:
        got = repo.read(table, ref=branch)
        keys = got.column("k").to_pylist()
        dupes = [k for k, n in Counter(keys).items() if n > 1]
        assert not dupes, f"duplicate primary keys in {table}: {dupes}"
        assert set(keys) == {"seed"} | {k for k, _cid in ok}, "lost or phantom rows"
        # Every commit in between holds a prefix of the writes (readers never see a half commit).
        for c in log:
            if table in c.tables:
                ks = repo.read(table, ref=c.id).column("k").to_pylist()
                assert len(ks) == len(set(ks))
    return ok, failed


@pytest.mark.parametrize("task,branch", [("upsert", "main"), ("append", "b"), ("multi", "b")])
def test_two_writers_same_branch_lose_nothing(tmp_path, base, task, branch):
    results = run_workers(tmp_path, base, task, f"{branch},6")
    ok, failed = check_history(trimerge.Repository.open(base.uri), branch, results,
                               tables=("t", "u") if task == "multi" else ("t",))
    assert len(ok) == 12 and not failed  # a generous lock timeout: everybody gets through
    if branch == "b":
        for table in (("t", "u") if task == "multi" else ("t",)):
            ds = lance.dataset(base.dataset_path(base.table_version(table, "b")))
            assert len(ds.branches.list()) == 1


def test_two_writers_without_waiting_get_retryable_errors(tmp_path, base):
    """With no lock timeout a writer that loses the race gets ConcurrentWriteError (retryable), never lost rows."""
    results = run_workers(tmp_path, base, "append", "b,10", lock_timeout=0.0)
    ok, failed = check_history(trimerge.Repository.open(base.uri), "b", results)
    assert len(ok) + len(failed) == 20
    assert len(ok) >= 1  # whoever holds the lock gets through


def test_racing_first_writes_fork_once(tmp_path, base):
    rounds = 4
    for r in range(rounds):
        base.branches.create(f"fresh{r}", from_ref="main")
    results = run_workers(tmp_path, base, "first-write", str(rounds))
    repo = trimerge.Repository.open(base.uri)
    ds_path = repo.dataset_path(repo.table_version("t", "main"))
    forks = lance.dataset(ds_path).branches.list()
    referenced = set()
    for r in range(rounds):
        tv = repo.table_version("t", f"fresh{r}")
        assert tv.lance_branch in forks
        assert tv.owner == repo.branches.get(f"fresh{r}").id
        referenced.add(tv.lance_branch)
        # Both writes are there, each exactly once, on top of each other.
        keys = repo.read("t", ref=f"fresh{r}").column("k").to_pylist()
        assert sorted(keys) == sorted(["seed", f"w0-r{r}", f"w1-r{r}"])
        log = repo.log(f"fresh{r}")
        assert len(log) == 5
        assert log[1].tables["t"].lance_branch == tv.lance_branch  # the same single fork for both
        assert repo.read("t", ref=f"fresh{r}~2").column("k").to_pylist() == ["seed"]
    assert len(referenced) == rounds
    assert sorted(forks) == sorted(referenced), "an unreferenced fork was left behind"
    assert repo.read("t", ref="main").column("k").to_pylist() == ["seed"]
    assert repo.tables("main") == ["t", "u"]


def test_racing_branch_creation(tmp_path, base):
    results = run_workers(tmp_path, base, "branch", "4")
    assert not any(r["errors"] for r in results), results
    for r in range(4):
        winners = [w for w, res in enumerate(results) if r in res["ok"]]
        losers = [res["failed"] for res in results if any(f[0] == r for f in res["failed"])]
        assert len(winners) == 1, results
        assert len(losers) == 1
        expected = base.resolve("main" if winners[0] == 0 else "main~1").id
        assert base.branches.get(f"same{r}").commit_id == expected


def test_racing_tag_creation(tmp_path, base):
    base.upsert("t", T(k=["x"], w=[1]))
    base.upsert("u", T(k=["x"], w=[1]))
    rounds = 8
    results = run_workers(tmp_path, base, "tag", str(rounds))
    assert not any(r["errors"] for r in results), results
    for r in range(rounds):
        winners = [w for w, res in enumerate(results) if r in res["ok"]]
        assert len(winners) == 1, results
        tagged = base.resolve(f"v{r}")
        assert tagged.id == base.resolve("main" if winners[0] == 0 else "main~1").id
        for table, tv in tagged.tables.items():
            pin = lance.dataset(base.dataset_path(tv)).tags.list()[f"t-v{r}"]
            assert (pin["branch"] or "main", pin["version"]) == (tv.lance_branch, tv.version), (r, table)


def test_lock_timeout_in_process(base):
    """A second repository object waiting on a held branch lock times out with a retryable error."""
    other = trimerge.Repository.open(base.uri, lock_timeout=0.2)
    with base.transaction(branch="b") as tx:
        tx.upsert("t", T(k=["first"], w=[0]))
        t0 = time.monotonic()
        with pytest.raises(ConcurrentWriteError) as exc:
            other.upsert("t", T(k=["second"], w=[1]), branch="b")
        assert exc.value.retryable
        assert time.monotonic() - t0 < 5
        other.upsert("t", T(k=["on-main"], w=[1]), branch="main")  # other branches are free
    other.upsert("t", T(k=["second"], w=[1]), branch="b")
    assert sorted(base.read("t", ref="b").column("k").to_pylist()) == ["first", "second", "seed"]
