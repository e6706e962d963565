"""A short Jepsen-style round on S3: appends, resets and gc racing on one branch (issue 50, item 6).

Worker processes against one repository on the SeaweedFS test server (``tests/s3server.py``):

- *movers* (never killed) commit to branch ``c`` (an upsert of one new key) and reset it to
  ``c~1``, writing every acknowledged operation to a log as it returns;
- a *writer* that only commits and is SIGKILLed at random moments (then restarted): its in-flight
  commit is indeterminate, its acknowledged ones count like the movers';
- a *collector* running gc with a short reflog retention, SIGKILLed at random moments, every other
  one killed inside the reflog's trim (``TRIMERGE_CRASH_AT=reflog_entry_expired``), and restarted.

Then the history is checked, as Jepsen checks one (the acknowledged operations are the facts):

1. every acknowledged commit is on ``c``, or was reset away by an acknowledged reset that saw it
   (the reset moved from a tip that reaches the commit, to one that does not);
2. every reset to ``c~1`` moved the branch from the tip it resolved ``c~1`` at: its new tip is the
   first parent of its old one — the reset that used to drop a concurrent commit moved from a tip
   it had never seen (and one that answered "already there" moved nothing);
3. every acknowledged move (a commit's, a reset's) is in ``c``'s reflog unless a gc whose start
   came at least the retention after the move could have expired it; the reflog chains from the
   tip, each entry moving from where the next older one moved to;
4. fsck finds nothing wrong.

``TRIMERGE_LONG_TESTS=N`` runs it for N minutes instead of a few seconds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.history import graph as graphalg

pytestmark = pytest.mark.s3

LONG = int(os.environ.get("TRIMERGE_LONG_TESTS", "0") or 0)
SECONDS = 60.0 * LONG if LONG else 10.0
#: The collector's reflog retention: short, so the reflog is trimmed (and killed while trimmed) in the run.
RETENTION = 3.0

WORKER = r"""
import json, os, random, sys, time
import pyarrow as pa
import trimerge
from trimerge.lineage.errors import ConcurrentWriteError, TrimergeError

uri, role, wid, stop, log_path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
options, retention, least = json.loads(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
rng = random.Random(f"{wid}-{os.getpid()}")
log = open(log_path, "a", buffering=1)


def note(**fields):
    log.write(json.dumps({"w": wid, "pid": os.getpid(), "t": time.time(), **fields}) + "\n")


tail = []


def more(done):
    if not os.path.exists(stop):
        return True
    if role != "mover":
        return False
    tail.append(done)  # after the others stopped, a few more moves: the last ones no gc can have trimmed
    return done < tail[0] + least


repo = trimerge.Repository.open(uri, storage_options=options, lock_timeout=120)
if role == "collector":
    import trimerge.lineage.tables.served  # gc's slowest import, once, before the gcs that may be killed
i = 0
while more(i):
    i += 1
    op = "gc" if role == "collector" else "commit" if role == "writer" else rng.choice(["commit", "commit", "reset"])
    t0 = time.time()
    note(op=op, phase="start")
    try:
        if op == "commit":
            key = f"{wid}-{os.getpid()}-{i}"
            c = repo.upsert("t", pa.table({"k": [key], "v": [i]}), branch="c", actor=f"w{wid}")
            note(op=op, phase="ok", t0=t0, old=c.parents[0], new=c.id, key=key)
        elif op == "reset":
            if len(repo.log("c", limit=6)) < 6:  # two movers' resets at once never reach the table's creation
                continue
            r = repo.branches.reset("c", "c~1", actor=f"w{wid}")
            note(op=op, phase="ok", t0=t0, old=r.old, new=r.new, moved=r.moved)
        else:
            repo.gc(retention=retention)
            note(op=op, phase="ok", t0=t0)
    except ConcurrentWriteError as exc:
        note(op=op, phase="retryable", t0=t0, error=str(exc)[:200])
    except TrimergeError as exc:
        note(op=op, phase="refused", t0=t0, error=f"{type(exc).__name__}: {str(exc)[:200]}")
"""
#: Operations the movers make at least while the others run, however slow the machine (and each
#: a few more after they stopped).
LEAST, TAIL = 12, 3


def spawn(uri: str, role: str, wid: str, stop: Path, log: Path, options: dict, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, uri, role, wid, str(stop), str(log), json.dumps(options),
                             str(RETENTION), str(TAIL)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def events(folder: Path, wid: str = "*") -> list[dict]:
    out = []
    for path in sorted(folder.glob(f"{wid}.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut by SIGKILL
                continue
    return out


def test_appends_resets_and_a_killed_gc_racing_on_s3(s3_uri, s3_server, tmp_path):
    uri, options = s3_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", pa.table({"k": ["seed"], "v": [0]}), primary_key="k")
    repo.branches.create("c", from_ref="main")
    for i in range(4):  # room for resets (they stop 5 commits above the root)
        repo.upsert("t", pa.table({"k": [f"start{i}"], "v": [i]}), branch="c")
    env = {**os.environ, **s3_server.env}
    env.pop("TRIMERGE_CRASH_AT", None)
    logs = tmp_path / "logs"
    logs.mkdir()
    deadline = time.time() + SECONDS
    stop = tmp_path / "stop"
    crashing = {**env, "TRIMERGE_CRASH_AT": "reflog_entry_expired"}  # dies inside the reflog's trim

    def start(role: str, wid: str, where: dict = env) -> subprocess.Popen:
        return spawn(uri, role, wid, stop, logs / f"{wid}.jsonl", options, where)

    def mover_ops() -> int:
        return sum(1 for e in events(logs) if e["w"].startswith("m") and e["phase"] != "start")

    movers = [start("mover", f"m{n}") for n in range(2)]
    writer, collector = start("writer", "w0"), start("collector", "g0")
    rng = random.Random(50)
    kills = writers = collectors = 0
    deaths: list[float] = []  # when a collector was found dead: the latest its last gc can have started

    def warm(wid: str) -> bool:  # past its start-up (imports, the first Lance client): killed mid-work
        return any(e["phase"] == "ok" for e in events(logs, wid))

    # A few seconds, and enough work and faults to judge, however loaded the machine (within a bound).
    while (time.time() < deadline or mover_ops() < LEAST or kills < 2 or not deaths) and time.time() < deadline + 90:
        time.sleep(rng.uniform(0.3, 1.0))
        if writer.poll() is not None or (warm(f"w{writers}") and rng.random() < 0.5):
            if writer.poll() is None:  # SIGKILLed at a random moment of its commits
                writer.send_signal(signal.SIGKILL)
                writer.wait()
                kills += 1
            writers += 1
            writer = start("writer", f"w{writers}")
        if collector.poll() is not None or (warm(f"g{collectors}") and rng.random() < 0.5):
            if collector.poll() is None:  # or at a random moment of its gc
                collector.send_signal(signal.SIGKILL)
                collector.wait()
            if collector.returncode == -signal.SIGKILL:
                kills += 1
                deaths.append(time.time())
            collectors += 1  # every other one dies inside the reflog's trim
            collector = start("collector", f"g{collectors}", crashing if collectors % 2 else env)
    stop.touch()
    for proc in (writer, collector):  # a last fault each, wherever they are
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode in (0, -signal.SIGKILL), err[-2000:]
    deaths.append(time.time())
    for proc in movers:  # their last few moves, with nobody else left to race or trim
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]

    repo = trimerge.Repository.open(uri, storage_options=options)
    happened = events(logs)
    ok = [e for e in happened if e["phase"] == "ok"]
    commits = [e for e in ok if e["op"] == "commit"]
    resets = [e for e in ok if e["op"] == "reset"]
    refused = [e for e in happened if e["phase"] == "refused"]
    assert not refused, refused[:3]
    assert len(commits) >= LEAST and resets and kills >= 2 and deaths, (len(commits), len(resets), kills, deaths)

    tip = repo.branches.get("c").commit_id
    on_branch = set(graphalg.iter_history(repo.commits, [tip]))

    def reaches(start: str, cid: str) -> bool:
        return start == cid or graphalg.is_ancestor(repo.commits, cid, start)

    # 2. every acknowledged reset moved from the tip it resolved c~1 at
    for r in resets:
        assert r["moved"], f"a reset to c~1 answered 'already there': {r}"
        assert repo.commit(r["old"]).parents[0] == r["new"], f"reset moved from a tip it did not resolve at: {r}"
    # 1. no acknowledged commit is lost unseen
    for c in commits:
        if c["new"] in on_branch:
            continue
        seen_by = [r for r in resets if reaches(r["old"], c["new"]) and not reaches(r["new"], c["new"])]
        assert seen_by, f"acknowledged commit {c['new'][:10]} ({c['key']}) is gone, and no acknowledged reset saw it"
    # 3. every acknowledged move is in the reflog, unless the retention let a gc remove it
    gc_starts = sorted([e["t"] for e in happened if e["op"] == "gc" and e["phase"] != "start"] + deaths)
    entries = repo.reflog("c")
    moves = {(e.old, e.new) for e in entries}
    latest_gc = gc_starts[-1] if gc_starts else 0.0
    required = [m for m in commits + resets if latest_gc - m["t0"] < RETENTION]
    missing = [m for m in required if (m["old"], m["new"]) not in moves]
    assert not missing, f"{len(missing)} acknowledged moves missing from the reflog: {missing[:3]}"
    assert entries and entries[0].new == tip
    for newer, older in zip(entries, entries[1:]):
        assert newer.old == older.new, f"the reflog's chain is broken between {newer} and {older}"
    for e in entries:
        if e.reason == "reset: moving to c~1":
            assert repo.commit(e.old).parents[0] == e.new, f"a reset in the reflog moved from an unseen tip: {e}"
    # 4. nothing damaged
    report = repo.fsck()
    assert report.ok, report
    print(f"jepsen-refs: {len(commits)} commits, {len(resets)} resets, "
          f"{sum(1 for e in ok if e['op'] == 'gc')} gc runs ({len(deaths)} killed), {kills} kills, "
          f"{sum(1 for e in happened if e['phase'] == 'retryable')} retryable refusals, {len(entries)} reflog entries")
