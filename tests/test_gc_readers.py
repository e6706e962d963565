"""Readers beside gc (issue 29, item 6): diffs, dry-run merges and reads running while other
processes create, write, force-delete scratch branches and run ``gc(retention="now")``. A reader
never fails because gc removed something it did not need (another branch's fork); where it did need
it (a scratch branch's data), the error is ``ConcurrentWriteError`` (retry, CLI exit 3),
``DataReclaimedError`` or the branch being gone — never a raw Lance error or an internal error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

import trimerge
from trimerge.lineage.tables.tablestore import TableStore

WORKER = r"""
import json, os, sys, time, traceback
import pyarrow as pa
import trimerge
from trimerge.diff import diff
from trimerge.merge import merge
from trimerge.lineage.errors import ConcurrentWriteError, DataReclaimedError, RefNotFoundError

root, role, wid, seconds, go = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
repo = trimerge.Repository.open(root)
while not os.path.exists(go):
    time.sleep(0.01)
end = time.time() + seconds
out = {"role": role, "ops": 0, "ok": 0, "expected": {}, "bad": []}


def expected(exc):
    name = type(exc).__name__
    out["expected"][name] = out["expected"].get(name, 0) + 1


def bad(exc):
    out["bad"].append("".join(traceback.format_exception(exc))[-1200:])


if role == "churn":
    i = 0
    while time.time() < end:
        i += 1
        name = f"scratch-{wid}-{i}"
        out["ops"] += 1
        try:
            repo.branches.create(name, from_ref="feat")
            repo.upsert("t", pa.table({"k": [i % 40], "v": [-i]}), branch=name, actor="churn")
            repo.branches.delete(name, force=True)
            repo.gc(retention="now")
            out["ok"] += 1
        except ConcurrentWriteError as exc:
            expected(exc)
        except BaseException as exc:
            bad(exc)
elif role == "api":
    seen = []
    while time.time() < end:
        out["ops"] += 1
        try:
            d = diff("main...feat", repo=repo)
            assert sorted(r["k"] for r in d.tables["t"].rows().to_pylist()) == [1, 2], "wrong diff"
            result = merge("feat", "main", repo=repo, dry_run=True)
            assert result.commit is None
            assert repo.read("t", ref="feat").num_rows == 40
            out["ok"] += 1
        except ConcurrentWriteError as exc:
            expected(exc)
        except BaseException as exc:
            bad(exc)
        # A scratch branch's data is needed here: gone is fine, said plainly.
        # (the newest scratch tip seen, and one seen earlier: likely reclaimed by now).
        seen.extend(b.commit_id for b in repo.branches.list() if b.name.startswith("scratch-"))
        for commit_id in ([seen[-1], seen[len(seen) // 2]] if seen else []):
            out["ops"] += 1
            try:
                diff(f"main...{commit_id}", repo=repo).tables["t"].rows().to_pylist()
                repo.read("t", ref=commit_id)
                out["ok"] += 1
            except (ConcurrentWriteError, DataReclaimedError) as exc:
                expected(exc)
            except BaseException as exc:
                bad(exc)
elif role == "cli":
    from click.testing import CliRunner
    from trimerge.cli import cli
    runner = CliRunner()
    while time.time() < end:
        for argv in (["diff", "main...feat", "--json"], ["merge", "feat", "--dry-run", "--json"]):
            out["ops"] += 1
            res = runner.invoke(cli, ["-C", root, *argv], catch_exceptions=True)
            if res.exit_code == 0:
                out["ok"] += 1
            elif res.exit_code == 3:
                expected(ConcurrentWriteError("exit 3"))
            else:
                out["bad"].append(f"{argv} exit {res.exit_code}: {res.stderr[-600:]} {res.exception!r}")
print(json.dumps(out))
"""


def test_readers_beside_gc_and_branch_churn(tmp_path: Path):
    root = tmp_path / "repo"
    repo = trimerge.Repository.init(root)
    repo.create_table("t", pa.table({"k": list(range(40)), "v": list(range(40))}), primary_key="k")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("t", pa.table({"k": [1, 2], "v": [10, 20]}), branch="feat", actor="a")
    repo.upsert("t", pa.table({"k": [3], "v": [30]}), branch="main", actor="a")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    go = tmp_path / "go"
    seconds = float(os.environ.get("TRIMERGE_GC_STRESS_SECONDS", "4"))
    roles = ["churn", "churn", "api", "api", "cli"]
    procs = [subprocess.Popen([sys.executable, str(script), str(root), role, str(i), str(seconds), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, role in enumerate(roles)]
    time.sleep(0.5)
    go.touch()  # all start together, once imported
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=seconds + 120)
        assert p.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    print([{k: r[k] for k in ("role", "ops", "ok", "expected")} for r in results])  # shown with -s
    bad = [b for r in results for b in r["bad"]]
    assert not bad, "\n\n".join(bad[:5])
    by_role = {}
    for r in results:
        by_role.setdefault(r["role"], []).append(r)
    assert all(r["ok"] > 0 for r in results), results  # everyone made progress
    assert sum(r["ok"] for r in by_role["churn"]) >= 2  # gc really ran beside the readers
    assert trimerge.Repository.open(root).fsck().ok


def test_fork_listing_tolerates_a_fork_deleted_meanwhile(tmp_path: Path):
    """The listing Lance does (directory, then each document) races a deletion: listed again."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"k": [1, 2]}), primary_key="k")
    for name in ("a", "b"):
        repo.branches.create(name, from_ref="main")
        repo.upsert("t", pa.table({"k": [3]}), branch=name, actor="x")
    store: TableStore = repo.table_store
    dataset = repo.table_version("t", "a").dataset
    forks = store.forks(dataset)
    assert set(forks) == {repo.table_version("t", n).lance_branch for n in ("a", "b")}
    repo.branches.delete("b", force=True)
    repo.gc(retention="now")
    assert set(store.forks(dataset)) == {repo.table_version("t", "a").lance_branch}
