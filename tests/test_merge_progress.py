"""Progress of a merge (issue 28, item 3): ``merge(progress=)`` hears each table start and finish
(the shape of ``diff(progress=)``) and the publish; the CLI shows a bar only to a person watching
(never with --json or when stdout is not a terminal)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pyarrow as pa

import trimerge
from trimerge.diff import diff
from trimerge.merge import merge


def two_sided(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "r")
    for name in ("a", "b", "c"):
        repo.create_table(name, pa.table({"k": [1, 2, 3], "v": [1, 2, 3]}), primary_key="k")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("a", pa.table({"k": [1], "v": [10]}), branch="feat", actor="x")
    repo.upsert("c", pa.table({"k": [4], "v": [4]}), branch="main", actor="x")
    return repo


def test_merge_reports_each_table_and_the_publish(tmp_path):
    repo = two_sided(tmp_path)
    events: list[tuple[str, str]] = []
    dry = merge("feat", "main", repo=repo, dry_run=True, progress=lambda item, stage: events.append((item, stage)))
    assert dry.commit is None
    assert events == [(t, s) for t in ("a", "b", "c") for s in ("start", "done")]
    events.clear()
    result = merge("feat", "main", repo=repo, progress=lambda item, stage: events.append((item, stage)))
    assert result.status == "merged"
    assert events == [(t, s) for t in ("a", "b", "c") for s in ("start", "done")] \
        + [("main", "publish"), ("main", "published")]
    seen: list[tuple[str, str]] = []
    diff("main~1", "main", repo=repo, progress=lambda item, stage: seen.append((item, stage)))
    assert [s for _, s in seen] == ["start", "done"] * 3  # the same shape


def test_cli_merge_bar_only_on_a_terminal_and_never_with_json(tmp_path, cli):
    two_sided(tmp_path)
    out = cli("-C", tmp_path / "r", "--json", "merge", "feat", "--dry-run", ok=True)
    assert json.loads(out.stdout)["status"] == "merged"
    assert "merge" not in out.stderr
    # On a terminal (a pseudo-terminal here): the merge runs and prints as usual; the bar is
    # transient (shown once a merge has run a second) and goes to stderr.
    leader, follower = pty.openpty()
    proc = subprocess.run([sys.executable, "-m", "trimerge.cli", "-C", str(tmp_path / "r"), "merge", "feat"],
                          stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, timeout=120,
                          env={**os.environ, "COLUMNS": "100"})
    os.close(follower)
    text = b""
    try:
        while chunk := os.read(leader, 4096):
            text += chunk
    except OSError:
        pass
    os.close(leader)
    assert proc.returncode == 0, text
    assert b"[main " in text
