"""Random histories built both as a DictGraph and as a real git repository must agree with git:
merge bases, ancestry, independence and ``^``/``~`` resolution."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trimerge.lineage.errors import NoSuchAncestorError
from trimerge.lineage.history.graph import (
    DictGraph,
    independent,
    is_ancestor,
    merge_bases,
    merge_bases_many,
    octopus_merge_bases,
    shortest_unique_prefix,
)
from trimerge.lineage.history.refexpr import resolve

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git executable not found on PATH")

# Isolated from the user's and the system's git configuration.
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}


class GitRepo:
    """A throwaway git repository holding the same history as a list of parent indexes."""

    def __init__(self, path: Path, dag: Sequence[tuple[int, ...]], branches: dict[str, int]) -> None:
        self.path = path
        self._git("init", "-q")
        stream = []
        for i, parents in enumerate(dag):
            if not parents:
                stream.append("reset refs/heads/build\n")  # next commit is a new root
            message = f"c{i}"
            # Increasing timestamps keep git's date-ordered fallback walk exact.
            stream.append(
                f"commit refs/heads/build\nmark :{i + 1}\n"
                f"committer t <t@example.com> {1700000000 + i} +0000\n"
                f"data {len(message)}\n{message}\n"
            )
            if parents:
                stream.append(f"from :{parents[0] + 1}\n")
                stream.extend(f"merge :{p + 1}\n" for p in parents[1:])
            stream.append("\n")
        for name, index in branches.items():
            stream.append(f"reset refs/heads/{name}\nfrom :{index + 1}\n\n")
        marks = path / "marks"
        self._git("fast-import", "--quiet", f"--export-marks={marks}", input="".join(stream))
        self.sha: list[str] = [""] * len(dag)
        for line in marks.read_text().splitlines():
            mark, sha = line.split()
            self.sha[int(mark[1:]) - 1] = sha
        self.index = {sha: i for i, sha in enumerate(self.sha)}

    def _git(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(self.path), *args], input=input, capture_output=True, text=True, env=GIT_ENV, check=check
        )

    def merge_base(self, *args: str) -> set[int]:
        result = self._git("merge-base", *args, check=False)
        assert result.returncode in (0, 1), result.stderr  # 1: no common ancestor
        return {self.index[line] for line in result.stdout.split()}

    def is_ancestor(self, a: int, b: int) -> bool:
        result = self._git("merge-base", "--is-ancestor", self.sha[a], self.sha[b], check=False)
        assert result.returncode in (0, 1), result.stderr
        return result.returncode == 0

    def rev_parse_many(self, exprs: Sequence[str]) -> list[int | None]:
        """Resolve many revision expressions in one process; None where git finds nothing."""
        out = self._git("cat-file", "--batch-check=%(objectname)", input="".join(e + "\n" for e in exprs)).stdout
        lines = out.splitlines()
        assert len(lines) == len(exprs)
        return [None if line.endswith(" missing") else self.index[line] for line in lines]


class Namespace:
    """RefNamespace over the DictGraph: hex ids and a few branches."""

    def __init__(self, graph: DictGraph, branches: dict[str, str]) -> None:
        self.graph, self.branches = graph, branches

    def commit_exists(self, commit_id: str) -> bool:
        return commit_id in self.graph

    def branch_tip(self, name: str) -> str | None:
        return self.branches.get(name)

    def tag_target(self, name: str) -> str | None:
        return None

    def ids_with_prefix(self, prefix: str) -> list[str]:
        return [c for c in self.graph if c.startswith(prefix)]


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[int, ...]]:
    """Parent lists of random histories: mostly branch-like first parents, frequent merges
    (sometimes octopus), occasional extra roots."""
    n = draw(st.integers(2, 45))
    result: list[tuple[int, ...]] = []
    for i in range(n):
        if i == 0 or draw(st.integers(0, 14)) == 0:
            result.append(())
            continue
        first = draw(st.integers(max(0, i - 6), i - 1))
        n_extra = draw(st.sampled_from([0, 0, 0, 1, 1, 2]))
        extra = draw(st.lists(st.integers(0, i - 1), max_size=n_extra))
        result.append(tuple(dict.fromkeys([first, *extra])))
    return result


STEP = st.tuples(st.sampled_from("^~"), st.sampled_from(["", "0", "1", "2", "3", "02", "5"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), data=st.data())
def test_random_histories_agree_with_git(dag: list[tuple[int, ...]], data: st.DataObject) -> None:
    n = len(dag)
    ours = [hashlib.sha256(f"c{i}".encode()).hexdigest() for i in range(n)]
    graph = DictGraph({ours[i]: tuple(ours[p] for p in ps) for i, ps in enumerate(dag)})
    commits = st.integers(0, n - 1)
    branches = {f"br{k}": data.draw(commits) for k in range(3)}

    with tempfile.TemporaryDirectory() as tmp:
        git = GitRepo(Path(tmp), dag, branches)
        sha = git.sha

        def idx(ids: Sequence[str]) -> set[int]:
            return {ours.index(c) for c in ids}

        for _ in range(6):
            a, b = data.draw(commits), data.draw(commits)
            assert idx(merge_bases(graph, ours[a], ours[b])) == git.merge_base("--all", sha[a], sha[b])
            assert is_ancestor(graph, ours[a], ours[b]) == git.is_ancestor(a, b)

        for _ in range(2):
            a = data.draw(commits)
            others = data.draw(st.lists(commits, min_size=2, max_size=3))
            assert idx(merge_bases_many(graph, ours[a], [ours[o] for o in others])) == git.merge_base(
                "--all", sha[a], *(sha[o] for o in others)
            )
            group = data.draw(st.lists(commits, min_size=2, max_size=5))
            assert idx(independent(graph, [ours[g] for g in group])) == git.merge_base(
                "--independent", *(sha[g] for g in group)
            )
            # git's pairwise octopus fold may keep redundant bases; reduce them before comparing.
            git_octopus = git.merge_base("--octopus", "--all", *(sha[g] for g in group))
            expected = independent(graph, [ours[i] for i in sorted(git_octopus)])
            assert idx(octopus_merge_bases(graph, [ours[g] for g in group])) == idx(expected)

        ns = Namespace(graph, {name: ours[i] for name, i in branches.items()})
        queries: list[tuple[str, str]] = []
        for _ in range(12):
            start = data.draw(commits)
            steps = "".join(kind + digits for kind, digits in data.draw(st.lists(STEP, min_size=1, max_size=4)))
            how = data.draw(st.sampled_from(["full", "prefix", "branch"]))
            if how == "branch":
                name = data.draw(st.sampled_from(sorted(branches)))
                queries.append((name + steps, name + steps))
            elif how == "prefix":
                prefix = shortest_unique_prefix(ours[start], ns.ids_with_prefix, min_length=4)
                queries.append((prefix + steps, sha[start] + steps))
            else:
                queries.append((ours[start] + steps, sha[start] + steps))

        for (our_text, git_text), expected in zip(queries, git.rev_parse_many([g for _, g in queries])):
            if expected is None:
                with pytest.raises(NoSuchAncestorError):
                    resolve(our_text, ns, graph)
            else:
                assert resolve(our_text, ns, graph) == ours[expected], (our_text, git_text)
