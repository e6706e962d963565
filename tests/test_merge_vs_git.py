"""Criss-cross merges against git's recursive strategy.

Each random history is built twice: as a trimerge repository with one table (key ``k``, value
``v``) and as a git repository with one file per key holding its value. Every file is merged with
git's binary driver (``* merge=binary``), which is exactly the rule the issue gives a virtual base:
where the inner merge of the merge bases conflicts, the virtual base keeps the bases' own merge
base's content. (Where both bases added a key differently, git's virtual base holds an empty file;
trimerge's holds the key with null values — so deleting it later is a conflict in both.) The merge
of the two tips must then agree: the same conflicting keys, and the same merged value for every
other key.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.merge import MergeConflictError, merge

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git executable not found on PATH")

GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
KEYS = [f"k{i}" for i in range(6)]
VALUES = ["a", "b", "c"]

State = dict[str, str]


# ---------------------------------------------------------------------------------------------- histories
@st.composite
def histories(draw: Any) -> tuple[list[tuple[tuple[int, ...], State]], int, int]:
    """Commits as (parent indexes, full state); and the two tips to merge (dest, source).

    ``simple``: two bases with one merge base; ``recursive``: the two bases are themselves a
    criss-cross, so the virtual base needs a virtual base of its own; ``three bases``: three
    merge bases, merged pairwise."""
    commits: list[tuple[tuple[int, ...], State]] = []
    n = 0

    def value() -> str:
        nonlocal n
        n += 1
        return draw(st.sampled_from(VALUES)) + str(n % 3)

    def mutate(parent: int) -> int:
        state = dict(commits[parent][1])
        for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)):
            if key in state and draw(st.booleans()) and len(state) > 2:
                del state[key]
            else:
                state[key] = value()
        if state == commits[parent][1]:  # every commit changes something (else trimerge publishes none)
            state[KEYS[0]] = "z" + str(len(commits))
        commits.append(((parent,), state))
        return len(commits) - 1

    def merged(first: int, second: int) -> int:
        a, b = commits[first][1], commits[second][1]
        state = {}
        for key in sorted(a.keys() | b.keys()):
            pick = draw(st.sampled_from(["first", "second", "new", "gone"]))
            v = {"first": a.get(key), "second": b.get(key), "new": value(), "gone": None}[pick]
            if v is not None:
                state[key] = v
        commits.append(((first, second), state))
        return len(commits) - 1

    commits.append(((), {k: value() for k in KEYS}))
    shape = draw(st.sampled_from(["simple", "recursive", "three bases"]))
    if shape == "three bases":
        x, y, z = mutate(0), mutate(0), mutate(0)
        a, b = merged(merged(x, y), z), merged(merged(y, z), x)
        return commits, mutate(a), mutate(b)
    left, right = mutate(0), mutate(0)
    if shape == "recursive":
        left, right = merged(left, right), merged(right, left)
        left, right = mutate(left), mutate(right)
    a, b = merged(left, right), merged(right, left)
    return commits, mutate(a), mutate(b)


# ---------------------------------------------------------------------------------------------- both builds
def build_trimerge(path: Path, commits: list[tuple[tuple[int, ...], State]]) -> list[str]:
    repo = trimerge.Repository.init(path, actor="t")
    ids: list[str] = []
    for i, (parents, state) in enumerate(commits):
        branch = f"c{i}"
        if parents:
            repo.branches.create(branch, from_ref=ids[parents[0]])
        else:
            repo.branches.create(branch, from_ref="main")
        with repo.transaction(branch, actor="t", message=branch) as tx:
            if not parents:
                tx.create_table("t", _rows(state), ["k"])
            else:
                before = commits[parents[0]][1]
                gone = [k for k in before if k not in state]
                changed = {k: v for k, v in state.items() if before.get(k) != v}
                if gone:
                    tx.delete_keys("t", pa.table({"k": gone}))
                if changed:
                    tx.upsert("t", _rows(changed))
                for p in parents[1:]:
                    tx.add_parent(ids[p])
        ids.append(repo.resolve(branch).id)
    return ids


def _rows(state: State) -> pa.Table:
    return pa.table({"k": pa.array(sorted(state), pa.string()), "v": pa.array([state[k] for k in sorted(state)])})


def git(path: Path, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(path), *args], input=input, capture_output=True, text=True,
                          env=GIT_ENV, check=check)


def build_git(path: Path, commits: list[tuple[tuple[int, ...], State]]) -> list[str]:
    path.mkdir()
    git(path, "init", "-q")
    (path / ".git" / "info").mkdir(exist_ok=True)
    (path / ".git" / "info" / "attributes").write_text("* merge=binary\n")
    stream = []
    for i, (parents, state) in enumerate(commits):
        stream.append(f"commit refs/heads/c{i}\nmark :{i + 1}\ncommitter t <t@example.com> {1700000000 + i} +0000\n"
                      f"data {len(f'c{i}')}\nc{i}\n")
        if parents:
            stream.append(f"from :{parents[0] + 1}\n")
            stream.extend(f"merge :{p + 1}\n" for p in parents[1:])
        stream.append("deleteall\n")
        for key, v in sorted(state.items()):
            stream.append(f"M 100644 inline {key}\ndata {len(v) + 1}\n{v}\n\n")
        stream.append("\n")
    marks = path / ".git" / "marks"
    git(path, "fast-import", "--quiet", f"--export-marks={marks}", input="".join(stream))
    shas = [""] * len(commits)
    for line in marks.read_text().splitlines():
        mark, sha = line.split()
        shas[int(mark[1:]) - 1] = sha
    return shas


def git_merge(path: Path, ours: str, theirs: str) -> tuple[set[str], State]:
    """Conflicting keys, and the merged value of every other key, of git's recursive merge."""
    git(path, "checkout", "-q", "--detach", ours)
    git(path, "merge", "-q", "--no-edit", "-s", "recursive", "-X", "no-renames", theirs, check=False)
    unmerged = {line.split("\t", 1)[1] for line in git(path, "ls-files", "-u").stdout.splitlines()}
    values = {k: (path / k).read_text().strip() for k in KEYS if k not in unmerged and (path / k).exists()}
    return unmerged, values


# ---------------------------------------------------------------------------------------------- the property
@settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_criss_cross_merges_agree_with_git_recursive(tmp_path_factory, history):
    commits, dest, source = history
    where = tmp_path_factory.mktemp("history")
    ids = build_trimerge(where / "repo", commits)
    shas = build_git(where / "git", commits)
    repo = trimerge.Repository.open(where / "repo")
    assert len(repo.merge_bases(ids[dest], ids[source])) >= 2
    want_conflicts, want_values = git_merge(where / "git", shas[dest], shas[source])

    try:
        result = merge(ids[source], f"c{dest}", repo=repo, dry_run=True)
    except MergeConflictError as exc:  # pragma: no cover - dry runs return conflicts
        result = exc.result
    assert result.virtual_base
    got_conflicts = {c.key["k"] for c in result.conflicts}
    assert got_conflicts == want_conflicts, [c.describe() for c in result.conflicts]

    merge(ids[source], f"c{dest}", repo=repo, strategy="dest-wins")
    merged = {r["k"]: r["v"] for r in repo.read("t", f"c{dest}").to_pylist()}
    assert {k: v for k, v in merged.items() if k not in want_conflicts} == want_values
    assert not repo.docs.list("intents")
