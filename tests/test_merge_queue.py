"""The merge queue (issue 51 point 4): ``repo.requests.enqueue`` / ``request merge N --queue`` and
the runner (``repo.requests.run_queue``, ``trimerge queue run``), on real repositories.

The runner merges in queue order, with the checks gating the branch run on each would-be result;
a request that conflicts, fails a check or lacks approvals leaves the queue with the reason and the
others go on. kill -9 of a runner (a real process, killed with SIGKILL at the worst moments and at
a random one) loses no queued request and merges nothing twice: the next run finishes the queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pyarrow as pa
import pytest

import trimerge
from conftest import trimerge_command
from trimerge.lineage import errors as E


def build(tmp_path, n: int, *, approvals: int | None = None) -> trimerge.Repository:
    """main with table t (ids 0..9), and n branches b1..bn each inserting its own row 100+i, each
    with an open request (author ann); with ``approvals``, main requires them and bob approves."""
    repo = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    repo.create_table("t", pa.table({"id": list(range(10)), "v": ["x"] * 10}), primary_key=["id"], actor="setup")
    for i in range(1, n + 1):
        repo.branches.create(f"b{i}", "main")
        repo.upsert("t", pa.table({"id": [100 + i], "v": [f"row {i}"]}), branch=f"b{i}", actor="ann")
    if approvals is not None:
        repo.branches.protect("main", approvals=approvals, actor="admin")
    for i in range(1, n + 1):
        r = repo.requests.create(f"b{i}", title=f"row {i}", actor="ann")
        if approvals:
            repo.requests.review(r.id, "approve", actor="bob")
    return repo


def merges_by_request(repo: trimerge.Repository) -> Counter:
    """How many commits on main's first-parent history name each request."""
    return Counter(int(c.metadata["request.id"]) for c in repo.log("main", first_parent=True)
                   if "request.id" in c.metadata)


def test_the_runner_merges_in_order_and_a_failing_request_leaves_with_its_reason(tmp_path):
    repo = build(tmp_path, 4)
    repo.checks.add("no_bad", "t", "SELECT * FROM t WHERE v = 'bad'", gates=["main"], branch="main", actor="setup")
    repo.upsert("t", pa.table({"id": [102], "v": ["main's own"]}), branch="main", actor="setup")  # b2 conflicts
    repo.upsert("t", pa.table({"id": [103], "v": ["bad"]}), branch="b3", actor="ann")  # b3 fails the check
    for n in (4, 2, 1, 3):
        repo.requests.enqueue(n, actor="ann")
    repo.requests.enqueue(4, actor="cat")  # queued already: stays where it is
    assert [r.id for r in repo.requests.queue("main")] == [4, 2, 1, 3]
    report = repo.requests.run_queue("main", actor="runner")
    assert report.merged == [4, 1] and [n for n, _ in report.removed] == [2, 3]
    reasons = dict(report.removed)
    assert "conflict" in reasons[2] and "no_bad" in reasons[3]
    assert repo.requests.queue("main") == []
    merged = [c.metadata.get("request.id") for c in repo.log("main", first_parent=True, limit=2)]
    assert merged == ["1", "4"]  # newest first: 4 was merged before 1
    assert {r["id"] for r in repo.read("t").to_pylist()} >= {101, 104}
    two = repo.requests.get(2)
    assert two.state == "open" and two.queued is None
    assert two.events[-1].kind == "dequeued" and "conflict" in two.events[-1].detail["reason"]
    assert [e.detail["via"] for e in repo.requests.get(4).events if e.kind == "merged"] == ["queue"]
    assert repo.requests.run_queue("main").to_json()["merged"] == []  # empty: nothing to do


def test_the_queue_honours_the_approval_rule(tmp_path):
    repo = build(tmp_path, 3, approvals=1)
    repo.upsert("t", pa.table({"id": [202], "v": ["pushed after review"]}), branch="b2", actor="ann")  # stale
    for n in (1, 2, 3):
        repo.requests.enqueue(n, actor="ann")
    repo.requests.close(3, actor="ann")  # closing takes it out of the queue
    report = repo.requests.run_queue("main", actor="runner")
    assert report.merged == [1] and [n for n, _ in report.removed] == [2]
    assert "stale" in dict(report.removed)[2]
    assert merges_by_request(repo) == Counter({1: 1})


def test_a_second_runner_of_the_same_queue_is_told_to_retry(tmp_path):
    repo = build(tmp_path, 1)
    repo.requests.enqueue(1, actor="ann")
    from trimerge.review.queue import queue_lease

    held = queue_lease(repo.requests, "main")
    assert held.try_acquire()
    try:
        with pytest.raises(E.ConcurrentWriteError, match="being run") as info:
            repo.requests.run_queue("main")
        assert info.value.exit_code == 3
    finally:
        held.release()
    assert repo.requests.run_queue("main").merged == [1]


RUNNER = [*trimerge_command(), "queue", "run", "main", "--actor", "runner", "--json"]


def run_runner(repo: trimerge.Repository, crash_at: str | None = None, timeout: float = 300):
    env = {**os.environ, "TRIMERGE_CRASH_AT": crash_at or ""}
    env.pop("TRIMERGE_DEBUG", None)
    return subprocess.run([*RUNNER, "-C", repo.uri], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("crash_at", ["before_publish", "after_publish", "request_merge_published"])
def test_kill_9_of_the_runner_loses_nothing_and_merges_nothing_twice(tmp_path, crash_at):
    repo = build(tmp_path, 3)
    for n in (1, 2, 3):
        repo.requests.enqueue(n, actor="ann")
    killed = run_runner(repo, crash_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after_kill = merges_by_request(repo)
    assert set(after_kill.values()) <= {1}
    again = run_runner(repo)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    repo = trimerge.Repository.open(repo.uri)
    assert merges_by_request(repo) == Counter({1: 1, 2: 1, 3: 1})
    assert all(repo.requests.get(n).state == "merged" for n in (1, 2, 3))
    assert repo.requests.queue("main") == []
    # Killed before the branch moved, the write's recovery (on the next open) may complete it: then
    # it is found on main too, and recorded, not merged again.
    assert report["recovered"] + report["merged"] == [1, 2, 3]
    if crash_at != "before_publish":
        assert report["recovered"] == [1]
    one = repo.requests.get(1)
    assert one.merge_commit is not None and repo.commit(one.merge_commit).metadata["request.id"] == "1"
    assert [e.kind for e in one.events].count("merged") == 1
    assert {r["id"] for r in repo.read("t").to_pylist()} >= {101, 102, 103}


def test_kill_9_at_a_random_moment_then_rerun(tmp_path):
    repo = build(tmp_path, 6)
    for n in range(1, 7):
        repo.requests.enqueue(n, actor="ann")
    env = {**os.environ, "TRIMERGE_CRASH_AT": ""}
    proc = subprocess.Popen([*RUNNER, "-C", repo.uri], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(merges_by_request(trimerge.Repository.open(
            repo.uri, read_only=True)).values()) < 2:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # mid-queue, wherever it is
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    done = run_runner(repo)
    assert done.returncode == 0, done.stderr
    repo = trimerge.Repository.open(repo.uri)
    assert merges_by_request(repo) == Counter({n: 1 for n in range(1, 7)})
    assert [repo.requests.get(n).state for n in range(1, 7)] == ["merged"] * 6
    assert {r["id"] for r in repo.read("t").to_pylist()} >= {101, 102, 103, 104, 105, 106}
    assert repo.fsck().problems == []


def test_queue_run_from_the_command_line(tmp_path, run_trimerge):
    repo = build(tmp_path, 2)
    uri = repo.uri
    res = run_trimerge("-C", uri, "request", "merge", "1", "--queue", "--actor", "ann")
    assert res.exit_code == 0 and "position 1" in res.stdout
    res = run_trimerge("-C", uri, "--json", "request", "merge", "2", "--queue", "--actor", "ann")
    assert res.exit_code == 0 and res.json()["position"] == 2 and res.json()["queued"] is not None
    res = run_trimerge("-C", uri, "queue", "list")
    assert [line.split("\t")[0] for line in res.stdout.splitlines()] == ["#1", "#2"]
    res = run_trimerge("-C", uri, "request", "merge", "1", "--queue", "--strategy", "dest-wins")
    assert res.exit_code == 2 and "--queue" in res.stderr
    res = run_trimerge("-C", uri, "queue", "run", "nope")
    assert res.exit_code == 2 and "no branch 'nope'" in res.stderr
    res = run_trimerge("-C", uri, "queue", "run")
    assert res.exit_code == 0 and res.stdout.count("merged #") == 2, res.stderr
    res = run_trimerge("-C", uri, "queue", "run", "main")
    assert res.exit_code == 0 and "empty" in res.stdout


def test_the_runner_in_another_process_sees_requests_queued_while_it_waits(tmp_path):
    repo = build(tmp_path, 2)
    repo.requests.enqueue(1, actor="ann")
    proc = subprocess.Popen([*RUNNER, "--wait", "20", "-C", repo.uri], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while repo.requests.get(1).state != "merged" and time.monotonic() < deadline:
            time.sleep(0.1)
        repo.requests.enqueue(2, actor="ann")  # while it waits
        while repo.requests.get(2).state != "merged" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert repo.requests.get(2).state == "merged"
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert merges_by_request(repo) == Counter({1: 1, 2: 1})
