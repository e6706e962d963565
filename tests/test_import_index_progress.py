"""Progress of imports and index builds (issue 28, item 3): ``import_table(progress=)``,
``create_index(progress=)`` and ``optimize_indices(progress=)`` call back ``(name, event)`` as
``diff(progress=)`` and ``merge(progress=)`` do; ``trimerge table import`` and ``index create`` show
a transient bar only to a person watching (never with --json or when output is not a terminal)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import lance
import pyarrow as pa
import pytest

import trimerge
from trimerge.cli.diffs import DelayedProgress
from trimerge.lineage.tables import importing
from trimerge.lineage.errors import PrimaryKeyError


def source(tmp_path, keys, name="src"):
    path = tmp_path / name
    lance.write_dataset(pa.table({"id": keys, "v": [str(k) for k in keys]}), path)
    return path


def test_import_reports_key_batches_then_the_clone(tmp_path, monkeypatch):
    repo = trimerge.Repository.init(tmp_path / "r")
    src = source(tmp_path, list(range(5)))
    monkeypatch.setattr(importing, "KEY_BATCH_ROWS", 2)  # 5 keys: 3 batches
    events: list[tuple[str, str]] = []
    repo.import_table("people", src, "id", progress=lambda item, stage: events.append((item, stage)))
    assert events == [("people", "start"), *[("people", "keys")] * 3, ("people", "clone"), ("people", "done")]
    assert repo.read("people").num_rows == 5
    # keys not stored in order: checked through hashes after the scan
    events.clear()
    with repo.transaction(message="two") as tx:
        tx.import_table("shuffled", source(tmp_path, [3, 1, 4, 0, 2], "src2"), "id",
                        progress=lambda item, stage: events.append((item, stage)))
    assert events == [("shuffled", "start"), *[("shuffled", "keys")] * 3, ("shuffled", "duplicates"),
                      ("shuffled", "clone"), ("shuffled", "done")]


def test_a_refused_import_stops_before_the_clone(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "r")
    events: list[tuple[str, str]] = []
    with pytest.raises(PrimaryKeyError):
        repo.import_table("dups", source(tmp_path, [2, 1, 2]), "id", progress=lambda i, s: events.append((i, s)))
    assert events == [("dups", "start"), ("dups", "keys"), ("dups", "duplicates")]
    assert "dups" not in repo.tables()


def test_index_build_reports_start_lance_stages_done(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "r")
    repo.create_table("t", pa.table({"k": list(range(300)), "s": [f"w{i % 7} x" for i in range(300)]}),
                      primary_key="k")
    events: list[tuple[str, str]] = []
    repo.create_index("t", "s", "INVERTED", progress=lambda item, stage: events.append((item, stage)))
    assert events[0] == ("t", "start") and events[-1] == ("t", "done")
    stages = [s for _, s in events[1:-1]]
    assert stages and all(isinstance(s, str) and s not in ("start", "done") for s in stages)
    assert {i for i, _ in events} == {"t"}
    assert [i.name for i in repo.indices("t")] == ["s_idx"]
    repo.upsert("t", pa.table({"k": [1000], "s": ["new"]}))
    events.clear()
    commit = repo.optimize_indices("t", progress=lambda item, stage: events.append((item, stage)))
    assert commit is not None
    assert events[0] == ("t", "start") and events[-1] == ("t", "done")
    events.clear()  # nothing left to index: no commit, the table still heard
    assert repo.optimize_indices("t", progress=lambda item, stage: events.append((item, stage))) is None
    assert events == [("t", "start"), ("t", "done")]


def test_delayed_progress_without_a_total_counts_done_steps():
    bar = DelayedProgress(None, "import", delay=3600)  # never shown in a test
    for stage in ("start", "keys", "keys", "clone", "done"):
        bar("people", stage)
    assert bar.done == 1 and bar._progress is None
    bar.close()


def run_on_a_terminal(*args: str) -> tuple[int, bytes]:
    leader, follower = pty.openpty()
    proc = subprocess.run([sys.executable, "-m", "trimerge.cli", *args], stdin=subprocess.DEVNULL, stdout=follower,
                          stderr=follower, timeout=120, env={**os.environ, "COLUMNS": "100"})
    os.close(follower)
    text = b""
    try:
        while chunk := os.read(leader, 4096):
            text += chunk
    except OSError:
        pass
    os.close(leader)
    return proc.returncode, text


def test_cli_import_and_index_create_quiet_with_json_and_run_on_a_terminal(tmp_path, cli):
    trimerge.Repository.init(tmp_path / "r")
    src = source(tmp_path, list(range(50)))
    out = cli("-C", tmp_path / "r", "--json", "table", "import", "people", src, "-k", "id", ok=True)
    assert json.loads(out.stdout)["table"] == "people"
    assert "import" not in out.stderr
    out = cli("-C", tmp_path / "r", "--json", "index", "create", "people", "v", "--kind", "BTREE", ok=True)
    assert "index" not in out.stderr
    out = cli("-C", tmp_path / "r", "index", "create", "people", "v", "--kind", "BITMAP", "--name", "b",
              "--param", "progress=1")
    assert out.exit_code != 0 and "not a Lance parameter" in out.stderr
    # On a (pseudo-)terminal: the commands run and print as usual (the bar is transient, on stderr,
    # shown once the work has run a second).
    code, text = run_on_a_terminal("-C", str(tmp_path / "r"), "table", "import", "again", str(src), "-k", "id")
    assert code == 0, text
    assert b"Import " in text
    code, text = run_on_a_terminal("-C", str(tmp_path / "r"), "index", "create", "again", "v", "--kind", "BTREE")
    assert code == 0, text
