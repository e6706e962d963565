"""Hooks and webhooks (issue 53): every event type to a real HTTP receiver on 127.0.0.1 and to a
command, HMAC signatures checked by a receiver written against the documented header, delivery
from the writing process and from runners, kill -9 between publish and delivery, retries and
backoff, receivers that hang, fail or redirect, commands that fail, flood or never exit, gates,
gc holding undelivered events, and the bad input of the issue.

Most tests turn the writer's own delivery thread off (``TRIMERGE_HOOKS=off``) and deliver with
``repo.hooks.deliver()``, so what is delivered when is deterministic; the tests of the writer's
delivery turn it on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

import trimerge
from trimerge.hooks.model import EVENTS
from trimerge.lineage.errors import (AlreadyExistsError, ConcurrentWriteError, InvalidNameError,
                                     InvalidOperationError)
from trimerge.merge import merge
from tests.conftest import run_trimerge_subprocess
from tests.receivers import Receiver

MOVES = ["post-commit", "post-merge", "post-branch-create", "post-branch-delete", "post-tag"]


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def quiet_writer(monkeypatch):
    """Deliveries only when a test asks (the writer's own thread is tested on its own)."""
    monkeypatch.setenv("TRIMERGE_HOOKS", "off")


@pytest.fixture
def repo(tmp_path):
    r = trimerge.Repository.init(tmp_path / "repo", actor="ann")
    r.create_table("t", pa.table({"id": [1, 2, 3], "v": [10, 20, 30]}), primary_key="id", actor="ann")
    return r


def history(repo: trimerge.Repository) -> None:
    """One event of each kind on main/feat: commit, branch create, commit on feat, merge, tag, delete."""
    repo.upsert("t", pa.table({"id": [4], "v": [40]}), actor="bob")
    repo.branches.create("feat")
    repo.delete("t", "id = 1", branch="feat")
    repo.upsert("t", pa.table({"id": [2], "v": [21]}), branch="feat")
    merge("feat", "main", repo=repo, actor="cat")
    repo.tags.create("v1", "main")
    repo.branches.delete("feat")


def check_events(events: list[dict], repo: trimerge.Repository) -> None:
    kinds = [e["event"] for e in events]
    assert sorted(set(kinds)) == sorted(MOVES)
    for e in events:
        assert {"event", "id", "branch", "commit", "parents", "actor", "time", "tables"} <= e.keys()
        assert e["repository"] == repo.uri
    by = {(e["event"], e["branch"]): e for e in events}
    first = next(e for e in events if e["event"] == "post-commit" and e["branch"] == "main")
    assert first["actor"] == "bob" and first["tables"]["t"]["inserted"] == 1
    assert first["parents"] == [first["old"]] and repo.commit(first["commit"]).parents == (first["old"],)
    merged = by[("post-merge", "main")]
    assert merged["tables"]["t"] == {"status": "modified", "inserted": 0, "deleted": 1, "updated": 1,
                                     "cells_changed": 1}
    assert len(merged["parents"]) == 2 and merged["commit"] == repo.resolve("main").id and merged["actor"] == "cat"
    assert by[("post-branch-create", "feat")]["old"] is None
    assert by[("post-branch-delete", "feat")]["commit"] == merged["parents"][1]  # where feat was
    tag = next(e for e in events if e["event"] == "post-tag")
    assert tag["tag"] == "v1" and tag["commit"] == merged["commit"]
    feat_kinds = [e["event"] for e in events if e["branch"] == "feat"]
    assert feat_kinds == ["post-branch-create", "post-commit", "post-commit", "post-branch-delete"]  # in order


def test_every_event_reaches_a_webhook(repo, receiver):
    repo.hooks.add("all", on=MOVES, url=receiver.url)
    history(repo)
    report = repo.hooks.deliver()
    assert report.failed == [] and report.delivered == 7
    got = receiver.received
    check_events([r.event for r in got], repo)
    for r in got:
        assert r.headers["x-trimerge-event"] == r.event["event"]
        assert r.headers["x-trimerge-delivery"] == r.event["id"]
        assert r.headers["content-type"] == "application/json"
        assert "x-trimerge-signature-256" not in r.headers  # no secret: unsigned
    assert len({r.delivery for r in got}) == 7
    assert repo.hooks.deliver().delivered == 0  # nothing twice
    log = repo.hooks.log("all")
    assert len(log) == 7 and all(a.status == "delivered" and a.code == 200 and a.duration_ms > 0 for a in log)


def test_every_event_reaches_a_command(repo, tmp_path):
    out = tmp_path / "seen"
    out.mkdir()
    script = tmp_path / "hook.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys
        event = json.load(sys.stdin)
        env = {{k: v for k, v in os.environ.items() if k.startswith("TRIMERGE_")}}
        path = os.path.join({str(out)!r}, env["TRIMERGE_EVENT_ID"] + ".json")
        json.dump({{"event": event, "env": env}}, open(path, "w"))
        """))
    repo.hooks.add("cmd", on=MOVES, run=f"{sys.executable} {script}")
    history(repo)
    assert repo.hooks.deliver().delivered == 7
    seen = [json.loads(p.read_text()) for p in sorted(out.iterdir())]
    check_events([s["event"] for s in seen], repo)
    for s in seen:
        e, env = s["event"], s["env"]
        assert env["TRIMERGE_EVENT"] == e["event"] and env["TRIMERGE_EVENT_ID"] == e["id"] == env["TRIMERGE_DELIVERY"]
        assert env["TRIMERGE_HOOK"] == "cmd" and env["TRIMERGE_REPOSITORY"] == repo.uri
        assert env.get("TRIMERGE_COMMIT") == e["commit"] and env.get("TRIMERGE_BRANCH") == e["branch"]


def test_request_events(repo, receiver):
    repo.hooks.add("rq", on="request-created,request-reviewed,request-merged,request-closed", branch="main",
                   url=receiver.url)
    repo.branches.create("feat")
    repo.upsert("t", pa.table({"id": [9], "v": [90]}), branch="feat")
    r = repo.requests.create("feat", into="main", title="nine", actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    repo.requests.merge(r.id, actor="bob")
    repo.branches.create("other")
    other = repo.requests.create("other", into="main", title="nothing", actor="ann")
    repo.requests.close(other.id)
    assert repo.hooks.deliver().failed == []
    events = receiver.events()
    assert [e["event"] for e in events] == ["request-created", "request-reviewed", "request-merged",
                                            "request-created", "request-closed"]
    assert events[0]["request"]["id"] == r.id and events[0]["branch"] == "main" and events[0]["actor"] == "ann"
    assert events[2]["commit"] == repo.resolve("main").id
    assert [e["id"] for e in events][:3] == [f"request-{r.id}.1", f"request-{r.id}.2", f"request-{r.id}.3"]
    assert repo.hooks.deliver().delivered == 0


def test_branch_glob_and_event_filter(repo, receiver):
    repo.hooks.add("releases", on="post-commit", branch="release/*", url=receiver.url)
    repo.upsert("t", pa.table({"id": [5], "v": [50]}))  # main: not matched
    repo.branches.create("release/1.0")
    repo.upsert("t", pa.table({"id": [6], "v": [60]}), branch="release/1.0")
    repo.hooks.deliver()
    assert [(e["event"], e["branch"]) for e in receiver.events()] == [("post-commit", "release/1.0")]


def test_hmac_signature_verified_by_the_receiver(repo, receiver, tmp_path, cli):
    secret = b"s3cr3t-\xc3\xa9-value"
    repo.hooks.add("signed", on="post-commit", url=receiver.url, secret=secret)
    (tmp_path / "secret").write_bytes(b"other-secret\n")
    added = cli("-C", repo.uri, "hook", "add", "signed2", "--on", "post-commit", "--url", receiver.url,
                "--secret-file", tmp_path / "secret", ok=True)
    repo.upsert("t", pa.table({"id": [7], "v": [70]}))
    repo.hooks.deliver()
    got = {r.event["hook"]: r for r in receiver.received}
    assert Receiver.verified(got["signed"], secret)
    assert Receiver.verified(got["signed2"], b"other-secret")  # the file's trailing newline is not part of it
    assert not Receiver.verified(got["signed"], b"other-secret")
    tampered = type(got["signed"])(got["signed"].path, got["signed"].headers, got["signed"].body.replace(b"7", b"8"), 0)
    assert not Receiver.verified(tampered, secret)
    # The secret is never shown, logged or stored beside the definition.
    shown = cli("-C", repo.uri, "--json", "hook", "list", ok=True).stdout + added.stdout
    shown += cli("-C", repo.uri, "hook", "log", "signed", ok=True).stdout
    assert "s3cr3t" not in shown and "other-secret" not in shown and json.loads(
        cli("-C", repo.uri, "--json", "hook", "list", ok=True).stdout)[0]["secret"] is True
    stored = (Path(repo.uri) / "_trimerge" / "hooks" / "defs" / "signed.json").read_text()
    assert "s3cr3t" not in stored and secret.hex() not in stored


def test_retries_with_backoff_then_delivered(repo, receiver):
    receiver.script = [500, 503]
    repo.hooks.add("flaky", on="post-commit", url=receiver.url, retries=3)
    repo.upsert("t", pa.table({"id": [8], "v": [80]}))
    started = time.monotonic()
    report = repo.hooks.deliver()
    assert report.delivered == 1 and report.failed == []
    assert time.monotonic() - started >= 0.5 + 1.0  # paused 0.5 s, then 1 s
    log = list(reversed(repo.hooks.log("flaky")))
    assert [(a.attempt, a.status, a.code) for a in log] == [(1, "failed", 500), (2, "failed", 503), (3, "delivered", 200)]
    assert len(receiver.unique()) == 1 and len(receiver.received) == 3


def test_failure_keeps_the_event_and_the_order_then_delivers(repo, receiver, cli):
    receiver.default = 500
    repo.hooks.add("down", on="post-commit", url=receiver.url, retries=0)
    repo.upsert("t", pa.table({"id": [11], "v": [1]}), message="first")
    repo.upsert("t", pa.table({"id": [12], "v": [2]}), message="second")
    report = repo.hooks.deliver()
    assert report.delivered == 0 and report.failed[0].left == 2 and "HTTP 500" in report.failed[0].error
    status = repo.hooks.status()[0]
    assert status.pending == 2 and status.failures == 1 and "HTTP 500" in status.last_error and status.retry_at
    text = cli("-C", repo.uri, "status", ok=True).stdout
    assert "hook down" in text and "2 event(s) pending" in text
    receiver.default = 200
    assert repo.hooks.deliver().delivered == 2  # an explicit delivery does not wait out the backoff
    assert [e["message"] for e in receiver.events()[-2:]] == ["first", "second"]
    assert repo.hooks.status()[0].failures == 0 and repo.hooks.status()[0].pending == 0


def test_hanging_receiver_times_out_without_blocking_the_write(repo, receiver, monkeypatch):
    monkeypatch.setenv("TRIMERGE_HOOKS", "on")
    receiver.default = ("hang", 60)
    repo.hooks.add("slow", on="post-commit", url=receiver.url, timeout=6.0, retries=0)
    started = time.monotonic()
    repo.upsert("t", pa.table({"id": [13], "v": [1]}))
    assert time.monotonic() - started < 4.0  # the write does not wait for its hook's timeout
    receiver.wait_for(1, timeout=10)
    from trimerge.hooks import background

    background.wait(30)
    log = repo.hooks.log("slow")
    assert log and log[0].status == "failed" and "timed out" in log[0].error and 5900 <= log[0].duration_ms < 15000
    assert repo.hooks.status()[0].pending == 1


def test_redirects_and_unreachable_urls_fail_clearly(repo, receiver):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{s.getsockname()[1]}/x"
    s.close()
    receiver.default = ("redirect", "http://127.0.0.1:1/elsewhere")
    repo.hooks.add("moved", on="post-commit", url=receiver.url, retries=0)
    repo.hooks.add("gone", on="post-commit", url=closed, retries=0, timeout=2)
    repo.hooks.add("nohost", on="post-commit", url="http://no-such-host.invalid/x", retries=0, timeout=2)
    repo.upsert("t", pa.table({"id": [14], "v": [1]}))
    report = repo.hooks.deliver()
    errors = {h.hook: h.error for h in report.hooks}
    assert "redirect to http://127.0.0.1:1/elsewhere not followed" in errors["moved"]
    assert errors["gone"].startswith(f"cannot deliver to {closed}")
    assert errors["nohost"].startswith("cannot deliver to http://no-such-host.invalid/x")
    assert len(receiver.received) == 1  # the redirect was not followed
    assert repo.read("t").num_rows == 4  # the write stands


def test_commands_that_fail_flood_or_never_exit(repo):
    repo.hooks.add("fails", on="post-commit", run="echo 'no way' >&2; exit 3", retries=0)
    repo.hooks.add("floods", on="post-commit", run="head -c 5000000 /dev/zero | tr '\\0' x; cat >/dev/null", retries=0)
    repo.hooks.add("hangs", on="post-commit", run="sleep 60 & sleep 60", retries=0, timeout=1)
    repo.upsert("t", pa.table({"id": [15], "v": [1]}))
    started = time.monotonic()
    report = repo.hooks.deliver()
    assert time.monotonic() - started < 20
    by = {h.hook: h for h in report.hooks}
    assert by["fails"].error == "exit status 3: no way"
    assert by["floods"].delivered and not by["floods"].failed
    assert by["hangs"].error == "did not finish within 1 s (killed)"
    flood = repo.hooks.log("floods")[0]
    assert len(flood.output) <= 4000 and flood.status == "delivered"


def test_the_writer_delivers_in_the_background_and_a_failing_hook_never_fails_a_write(tmp_path, receiver):
    repo_path = tmp_path / "repo"
    env = {"TRIMERGE_HOOKS": "on"}
    run_trimerge_subprocess("init", repo_path, env=env)
    (tmp_path / "t.csv").write_text("id,v\n1,10\n")
    run_trimerge_subprocess("-C", repo_path, "hook", "add", "web", "--on", "post-commit", "--url", receiver.url,
                            env=env)
    run_trimerge_subprocess("-C", repo_path, "hook", "add", "broken", "--on", "post-commit", "--run", "exit 1",
                            "--retries", "0", env=env)
    res = run_trimerge_subprocess("-C", repo_path, "table", "create", "t", tmp_path / "t.csv", "-k", "id", env=env)
    assert res.exit_code == 0, res.stderr
    # Delivered by the writing process itself, before it exited: no runner ran.
    assert [r.event["event"] for r in receiver.received] == ["post-commit"]
    status = run_trimerge_subprocess("-C", repo_path, "status", env=env)
    assert status.exit_code == 0 and "hook broken" in status.stdout and "failing" in status.stdout


WRITER = """
import sys, pyarrow as pa, trimerge
repo = trimerge.Repository.open(sys.argv[1])
repo.upsert("t", pa.table({"id": [100], "v": [1]}), message="killed writer")
print("published", flush=True)
import time; time.sleep(30)
"""


@pytest.mark.parametrize("crash", ["hooks_before_delivery", "hooks_after_delivery"])
def test_kill_9_between_publish_and_delivery(repo, receiver, tmp_path, crash):
    repo.hooks.add("web", on="post-commit", url=receiver.url)
    env = {**os.environ, "TRIMERGE_HOOKS": "on", "TRIMERGE_CRASH_AT": crash}
    proc = subprocess.run([sys.executable, "-c", WRITER, repo.uri], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert trimerge.Repository.open(repo.uri).read("t", where="id = 100").num_rows == 1  # published
    before = len(receiver.received)
    assert before == (1 if crash == "hooks_after_delivery" else 0)
    res = run_trimerge_subprocess("-C", repo.uri, "hooks", "run")
    assert res.exit_code == 0 and "delivered 1 event" in res.stdout
    assert run_trimerge_subprocess("-C", repo.uri, "hooks", "run").stdout.strip() == "Nothing to deliver"
    unique = receiver.unique()
    assert len(unique) == 1 and next(iter(unique.values())).event["message"] == "killed writer"
    assert len(receiver.received) == before + 1


def test_two_runners_deliver_every_event_at_least_once(repo, receiver):
    repo.hooks.add("web", on="post-commit", url=receiver.url)
    for i in range(6):
        repo.upsert("t", pa.table({"id": [200 + i], "v": [i]}))
    procs = [subprocess.Popen([*_trimerge(), "-C", repo.uri, "hooks", "run"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    assert sorted(e["commit"] for e in (r.event for r in receiver.unique().values())) == \
        sorted(c.id for c in repo.log("main", limit=6))
    assert repo.hooks.status()[0].pending == 0


def _trimerge() -> list[str]:
    from tests.conftest import trimerge_command

    return trimerge_command()


def test_watch_runner_delivers_until_stopped(repo, receiver):
    repo.hooks.add("web", on="post-commit", url=receiver.url)
    proc = subprocess.Popen([*_trimerge(), "-C", repo.uri, "hooks", "run", "--watch", "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        repo.upsert("t", pa.table({"id": [300], "v": [1]}))
        assert len(receiver.wait_for(1, timeout=30)) == 1
        repo.upsert("t", pa.table({"id": [301], "v": [1]}))
        assert len(receiver.wait_for(2, timeout=30)) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err


def test_deleted_and_recreated_branches_between_passes(repo, receiver):
    repo.hooks.add("web", on=MOVES, branch="b", url=receiver.url)
    repo.branches.create("b")
    repo.upsert("t", pa.table({"id": [1], "v": [11]}), branch="b", message="life 1")
    repo.branches.delete("b", force=True)
    repo.branches.create("b")
    repo.upsert("t", pa.table({"id": [1], "v": [12]}), branch="b", message="life 2")
    repo.branches.delete("b", force=True)
    repo.branches.create("b")
    repo.hooks.deliver()
    repo.upsert("t", pa.table({"id": [1], "v": [13]}), branch="b", message="life 3")
    repo.branches.delete("b", force=True)
    repo.hooks.deliver()
    events = receiver.events()
    assert [e["event"] for e in events] == ["post-branch-create", "post-commit", "post-branch-delete"] * 3
    assert [e["message"] for e in events if e["event"] == "post-commit"] == ["life 1", "life 2", "life 3"]
    assert len({e["id"] for e in events}) == 9 and repo.hooks.deliver().delivered == 0


def test_a_move_that_lost_its_race_is_no_event(repo, receiver):
    repo.hooks.add("web", on="post-commit", url=receiver.url)
    stale = repo.refs.branch("main")
    repo.upsert("t", pa.table({"id": [400], "v": [1]}), message="won")
    c = repo.commit(stale.commit_id)
    lost = repo.commits.build(parents=[c.id], actor="x", message="lost", metadata={}, branch="main", tables=c.tables,
                              created_at=c.created_at)
    repo.commits.put(lost)
    # The loser records its entry before its swap, which fails; a loser killed right there leaves it.
    repo.refs.reflog.record("main", c.id, lost.id, "x", "commit: lost", prev=stale.log, inc=stale.id)
    assert repo.refs.move_branch(stale, lost.id) is None
    repo.hooks.deliver()
    assert [e["message"] for e in receiver.events()] == ["won"]


def test_gc_keeps_what_hooks_have_not_delivered(repo, receiver):
    receiver.default = 500
    repo.hooks.add("web", on="post-commit,post-branch-delete", url=receiver.url, retries=0)
    repo.branches.create("tmp")
    repo.upsert("t", pa.table({"id": [500], "v": [1]}), branch="tmp", message="on tmp")
    repo.branches.delete("tmp", force=True)
    repo.hooks.deliver()
    report = repo.gc("now")
    assert report.reflog_entries_expired == 0
    receiver.default = 200
    assert repo.hooks.deliver().delivered == 2
    commit = [e for e in receiver.events() if e["event"] == "post-commit"][-1]
    assert commit["message"] == "on tmp" and commit["tables"]["t"]["inserted"] == 1


def test_gate_hooks_judge_the_would_be_result(repo, tmp_path, receiver):
    script = tmp_path / "gate.py"
    script.write_text(textwrap.dedent("""
        import json, sys, trimerge
        event = json.load(sys.stdin)
        repo = trimerge.Repository.open(event["repository"], read_only=True)
        rows = repo.read(event["addresses"]["t"]).to_pylist()
        bad = [r["id"] for r in rows if r["v"] < 0]
        print(f"{len(rows)} rows; negative: {bad}")
        sys.exit(1 if bad else 0)
        """))
    repo.hooks.add("no-negatives", branch="main", run=f"{sys.executable} {script}", gate=True)
    repo.branches.create("feat")
    repo.upsert("t", pa.table({"id": [2], "v": [-5]}), branch="feat")
    before = repo.resolve("main").id
    with pytest.raises(trimerge.MergeCheckError) as caught:
        merge("feat", "main", repo=repo)
    assert repo.resolve("main").id == before
    failed = [c for c in caught.value.result.checks if not c.passed]
    assert [c.name for c in failed] == ["hook:no-negatives"]
    assert "exit status 1" in failed[0].reason and "3 rows; negative: [2]" in failed[0].reason
    dry = merge("feat", "main", repo=repo, dry_run=True)
    assert dry.status == "check_failed"
    repo.upsert("t", pa.table({"id": [2], "v": [5]}), branch="feat")
    merged = merge("feat", "main", repo=repo)
    assert merged.status == "merged" and [c.name for c in merged.checks] == ["hook:no-negatives"]
    assert repo.read("t", where="id = 2").to_pylist() == [{"id": 2, "v": 5}]
    assert [c for c in repo.all_commits() if "hooks.pre-merge" in c.metadata] == []  # the would-be commits went
    # A webhook gate: a non-2xx answer refuses, and the event names the would-be result.
    repo.hooks.remove("no-negatives")
    repo.hooks.add("ci", on="pre-merge", branch="main", url=receiver.url, gate=True)
    receiver.script = [403]
    repo.upsert("t", pa.table({"id": [3], "v": [33]}), branch="feat")
    with pytest.raises(trimerge.MergeCheckError):
        merge("feat", "main", repo=repo)
    event = receiver.events()[-1]
    assert event["event"] == "pre-merge" and event["branch"] == "main" and event["source"] == "feat"
    assert event["addresses"]["t"] == f"{repo.uri}::{event['ref']}::t" and event["old"] == repo.resolve("main").id
    assert merge("feat", "main", repo=repo).status == "merged"  # the next answer is 200


def test_gate_refusal_through_the_cli_is_exit_1(repo, cli):
    repo.hooks.add("never", branch="main", run="echo 'not today'; exit 1", gate=True)
    repo.branches.create("feat")
    repo.upsert("t", pa.table({"id": [2], "v": [22]}), branch="feat")
    res = cli("-C", repo.uri, "merge", "feat", "--into", "main")
    assert res.exit_code == 1 and "not today" in res.stdout + res.stderr


def test_hook_test_and_log(repo, receiver, cli):
    repo.hooks.add("web", on="post-merge", url=receiver.url)
    res = cli("-C", repo.uri, "hook", "test", "web", ok=True)
    assert "test-delivered 200" in res.stdout
    event = receiver.events()[0]
    assert event["test"] is True and event["event"] == "post-merge" and event["commit"] == repo.resolve("main").id
    receiver.default = 500
    assert cli("-C", repo.uri, "hook", "test", "web").exit_code == 1
    log = cli("-C", repo.uri, "--json", "hook", "log", "web", ok=True).json()
    assert [a["status"] for a in log] == ["test-failed", "test-delivered"] and log[0]["code"] == 500
    assert repo.hooks.status()[0].pending == 0  # a test moves no cursor


BAD_ADDS = [
    (dict(name="a/b", run="true"), InvalidNameError, "hook name"),
    (dict(name="", run="true"), InvalidNameError, "hook name"),
    (dict(name="-x", run="true"), InvalidNameError, "hook name"),
    (dict(name="x" * 101, run="true"), InvalidNameError, "hook name"),
    (dict(name="x", run="true", branch=""), InvalidNameError, "branch glob"),
    (dict(name="x", run="true", branch="ma in"), InvalidNameError, "branch glob"),
    (dict(name="x", run="true", branch="[main"), InvalidNameError, "never closed"),
    (dict(name="x", run="true", branch="a\x00b"), InvalidNameError, "branch glob"),
    (dict(name="x", run="true", on="post-push"), InvalidOperationError, "unknown hook event"),
    (dict(name="x", run="true", on=[]), InvalidOperationError, "unknown hook event"),
    (dict(name="x", run="true", on="pre-merge"), InvalidOperationError, "gate=True"),
    (dict(name="x", run="true", on="post-commit", gate=True), InvalidOperationError, "pre-merge"),
    (dict(name="x"), InvalidOperationError, "neither"),
    (dict(name="x", run="true", url="http://127.0.0.1/"), InvalidOperationError, "both"),
    (dict(name="x", run="  "), InvalidOperationError, "command"),
    (dict(name="x", run="a\x00b"), InvalidOperationError, "command"),
    (dict(name="x", url="ftp://host/x"), InvalidOperationError, "only http:// and https://"),
    (dict(name="x", url="file:///etc/passwd"), InvalidOperationError, "only http:// and https://"),
    (dict(name="x", url="javascript:alert(1)"), InvalidOperationError, "only http:// and https://"),
    (dict(name="x", url="http:///nohost"), InvalidOperationError, "names no host"),
    (dict(name="x", url="http://user:pw@host/"), InvalidOperationError, "credentials"),
    (dict(name="x", url="http://host:99999/"), InvalidOperationError, "malformed"),
    (dict(name="x", url="http://host/a b"), InvalidOperationError, "spaces"),
    (dict(name="x", url="http://h/" + "a" * 3000), InvalidOperationError, "URL is text"),
    (dict(name="x", run="true", secret="k"), InvalidOperationError, "secret signs a webhook"),
    (dict(name="x", url="http://h/", secret=""), InvalidOperationError, "secret is"),
    (dict(name="x", run="true", timeout=0), InvalidOperationError, "timeout"),
    (dict(name="x", run="true", timeout=float("nan")), InvalidOperationError, "timeout"),
    (dict(name="x", run="true", retries=11), InvalidOperationError, "retries"),
    (dict(name="x", run="true", gate="yes"), InvalidOperationError, "gate takes"),
]


@pytest.mark.parametrize("kwargs, error, text", BAD_ADDS, ids=[str(i) for i in range(len(BAD_ADDS))])
def test_bad_hooks_are_refused_and_change_nothing(repo, kwargs, error, text):
    before = sorted(p.relative_to(repo.uri) for p in Path(repo.uri, "_trimerge").rglob("*"))
    kwargs = dict(kwargs)
    with pytest.raises(error) as caught:
        repo.hooks.add(kwargs.pop("name"), **kwargs)
    message = str(caught.value)
    assert text in message and "\n" not in message and "pw" not in message
    assert sorted(p.relative_to(repo.uri) for p in Path(repo.uri, "_trimerge").rglob("*")) == before


def test_bad_input_through_the_cli(repo, cli, tmp_path):
    assert cli("-C", repo.uri, "hook", "add", "x", "--url", "ftp://h/").exit_code == 2
    assert cli("-C", repo.uri, "hook", "add", "x", "--run", "true", "--on", "nope").exit_code == 2
    assert cli("-C", repo.uri, "hook", "add", "x", "--url", "http://h/", "--secret-file", tmp_path / "missing").exit_code == 2
    assert cli("-C", repo.uri, "hook", "remove", "nope").exit_code == 2
    assert cli("-C", repo.uri, "hook", "log", "nope").exit_code == 2
    assert cli("-C", repo.uri, "hook", "test", "nope").exit_code == 2
    cli("-C", repo.uri, "hook", "add", "x", "--run", "true", ok=True)
    dup = cli("-C", repo.uri, "hook", "add", "x", "--run", "true")
    assert dup.exit_code == 2 and "exists already" in dup.stderr
    assert repo.hooks.get("x").run == "true"
    with pytest.raises(AlreadyExistsError):
        repo.hooks.add("x", run="false")


def test_remove_stops_delivery_and_forgets(repo, receiver):
    repo.hooks.add("web", on="post-commit", url=receiver.url, secret="k")
    repo.upsert("t", pa.table({"id": [600], "v": [1]}))
    repo.hooks.remove("web")
    assert repo.hooks.list() == [] and repo.hooks.deliver().delivered == 0 and receiver.received == []
    assert not list(Path(repo.uri, "_trimerge", "hooks").rglob("*.json"))


def test_a_read_only_repository_refuses_hook_changes(repo):
    ro = trimerge.Repository.open(repo.uri, read_only=True)
    with pytest.raises(InvalidOperationError):
        ro.hooks.add("x", run="true")


def test_events_constants_are_the_documented_ones():
    assert set(MOVES) <= set(EVENTS) and "pre-merge" in EVENTS and "request-merged" in EVENTS


def test_cursor_races_are_retryable(repo, receiver):
    from trimerge.hooks.cursor import Cursor

    repo.hooks.add("web", on="post-commit", url=receiver.url)
    a, b = Cursor.load(repo.docs, "web"), Cursor.load(repo.docs, "web")
    a.save(repo.docs)
    with pytest.raises(ConcurrentWriteError):
        b.save(repo.docs)


def test_trimerge_serve_delivers_pending_events(repo, receiver):
    repo.hooks.add("web", on="post-commit", url=receiver.url)
    repo.upsert("t", pa.table({"id": [700], "v": [1]}), message="before serve")  # nobody delivered it
    proc = subprocess.Popen([*_trimerge(), "-C", repo.uri, "serve", "--port", "0", "--no-ui"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("listening on ")
        got = receiver.wait_for(1, timeout=60)
        assert [r.event["message"] for r in got] == ["before serve"]
        deadline = time.monotonic() + 30
        while repo.hooks.status()[0].pending and time.monotonic() < deadline:
            time.sleep(0.1)  # the cursor moves just after the receiver answered
        assert repo.hooks.status()[0].pending == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_damaged_hook_documents_are_one_line_and_status_still_answers(repo, cli):
    repo.hooks.add("web", on="post-commit", run="true")
    (Path(repo.uri) / "_trimerge" / "hooks" / "defs" / "web.json").write_text("{not json")
    res = cli("-C", repo.uri, "hook", "list")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    status = cli("-C", repo.uri, "status")
    assert status.exit_code == 0 and "hooks: " in status.stdout and "malformed hook definition" in status.stdout
    assert "'trimerge hook remove web'" in status.stdout
    repo.upsert("t", pa.table({"id": [800], "v": [1]}))  # writes go on
    assert cli("-C", repo.uri, "hooks", "run").exit_code == 2
    cli("-C", repo.uri, "hook", "remove", "web", ok=True)  # the repair
    assert repo.hooks.list() == [] and cli("-C", repo.uri, "hooks", "run", ok=True)


def test_hostile_event_content_reaches_a_command_intact(repo, tmp_path):
    out = tmp_path / "got.json"
    repo.hooks.add("cmd", on="post-commit", branch="*", run=f"cat > {out}; printf '%s' \"$TRIMERGE_BRANCH\" > {out}.branch")
    name = "feature/x-1.2_y"
    repo.branches.create(name)
    message = 'quotes " and \' and $(touch pwned) and \n newlines \x1b[31m and ✓'
    repo.upsert("t", pa.table({"id": [900], "v": [1]}), branch=name, message=message)
    repo.hooks.deliver()
    event = json.loads(out.read_text())
    assert event["message"] == message and event["branch"] == name
    assert Path(f"{out}.branch").read_text() == name
    assert not (Path(repo.uri) / "pwned").exists() and not (tmp_path / "pwned").exists()
