"""Habits, round two (issue 54): history browsing the way git users reach for it (log ranges,
tables, decorations, --all the same everywhere, branch -a/-r, git spellings, switch to a remote's
branch), merges that say what they did (--ff, --ff-only, next steps after conflicts), refs at a
time (REF@{ISO time}, read(as_of=)) and appends that fill nullable columns. Through the CLI and the
API, on real Lance data."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest

import trimerge
from trimerge.merge import FastForwardError, MergeConflictError, merge


def one_line_error(res, code=2):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert len(res.stderr_lines) == 1, res.stderr
    assert res.stderr_lines[0].startswith("error:"), res.stderr
    return res.stderr_lines[0]


def state(repo):
    """Every ref and the commits: what bad input must leave as it was."""
    return ({b.name: b.commit_id for b in repo.branches.list()}, {t.name: t.commit_id for t in repo.tags.list()},
            repo.current_branch, sorted(c.id for c in repo.all_commits()))


@pytest.fixture
def hist(tmp_path):
    """main: root, products, stores, 'paris' (stores; tag v1), a maintenance-free merge history;
    feat (from 'stores'): 'shout' by bob (products), then a stores upsert."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("products", pa.table({"sku": ["A", "B"], "name": ["apple", "bread"]}), primary_key="sku")
    repo.create_table("stores", pa.table({"id": [1], "city": ["Oslo"]}), primary_key="id")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("products", pa.table({"sku": ["A"], "name": ["APPLE"]}), branch="feat", message="shout", actor="bob")
    repo.upsert("stores", pa.table({"id": [2], "city": ["Rome"]}), branch="feat", message="rome")
    repo.upsert("stores", pa.table({"id": [3], "city": ["Paris"]}), branch="main", message="paris")
    repo.tags.create("v1", "main")
    return repo


def ids(res):
    return [c["id"] for c in res.json()]


# ---------------------------------------------------------------------------------------------- point 5: log
def test_log_all_and_every_filter_agree_across_text_json_and_graph(hist, cli):
    where = str(hist.path)
    everything = {c.id for b in ("main", "feat") for c in hist.log(b)}
    for opts, expect in [
        (["--all"], everything),
        (["--all", "--actor", "bob"], {hist.resolve("feat~1").id}),
        (["--all", "--table", "products"], {hist.resolve("feat~1").id, hist.resolve("main~2").id}),
        (["--all", "--no-maintenance"], everything),
        (["main..feat"], {hist.resolve("feat").id, hist.resolve("feat~1").id}),
        (["feat..main"], {hist.resolve("main").id}),
        (["main...feat"], {hist.resolve("feat").id, hist.resolve("feat~1").id, hist.resolve("main").id}),
        (["^v1", "feat"], {hist.resolve("feat").id, hist.resolve("feat~1").id}),
        (["feat", "--", "stores"], {hist.resolve("feat").id, hist.resolve("main~1").id}),
        (["--table", "stores", "--table", "products"], {c.id for c in hist.log("main")[:3]}),
    ]:
        listed = ids(cli("-C", where, "--json", "log", *opts, ok=True))
        assert set(listed) == expect, opts
        assert len(listed) == len(expect)
        text = cli("-C", where, "log", "--oneline", "--no-decorate", *opts, ok=True).stdout.splitlines()
        assert [line.split()[0] for line in text] == [hist.short_id(i) for i in listed], opts
        graph = cli("-C", where, "--json", "log", "--graph", *opts, ok=True).json()["graph"]
        starred = [next(w for w in line.split() if re.fullmatch("[0-9a-f]{7,64}", w)) for line in graph if "*" in line]
        assert starred == [hist.short_id(i) for i in listed], (opts, graph)
        plain_graph = cli("-C", where, "log", "--graph", *opts, ok=True).stdout.splitlines()
        assert plain_graph == graph
    # -n counts the commits shown, after the filters, in every form
    assert len(ids(cli("-C", where, "--json", "log", "--all", "-n", "2", ok=True))) == 2
    assert sum("*" in line for line in cli("-C", where, "--json", "log", "--all", "--graph", "-n", "2",
                                          ok=True).json()["graph"]) == 2


def test_log_ranges_match_set_arithmetic_of_histories(hist, cli):
    where = str(hist.path)
    main, feat = ({c.id for c in hist.log(r)} for r in ("main", "feat"))
    assert set(ids(cli("-C", where, "--json", "log", "main..feat", ok=True))) == feat - main
    assert set(ids(cli("-C", where, "--json", "log", "feat...main", ok=True))) == feat ^ main
    assert ids(cli("-C", where, "--json", "log", "..feat", ok=True)) == \
        ids(cli("-C", where, "--json", "log", "HEAD..feat", ok=True))
    assert ids(cli("-C", where, "--json", "log", "feat..", ok=True)) == [hist.resolve("main").id]
    assert ids(cli("-C", where, "--json", "log", "main..main", ok=True)) == []


def test_log_decorations_on_plain_log(hist, cli):
    where = str(hist.path)
    top = cli("-C", where, "log", ok=True).stdout.splitlines()[0]
    assert top.startswith(hist.short_id(hist.resolve("main").id)) and top.endswith("(main, tag: v1)")
    one = cli("-C", where, "log", "--oneline", "--all", ok=True).stdout.splitlines()
    assert one[0].endswith("rome (feat)") or one[1].endswith("rome (feat)")
    assert all("(" not in line for line in cli("-C", where, "log", "--no-decorate", ok=True).stdout.splitlines())
    doc = cli("-C", where, "--json", "log", ok=True).json()
    assert doc[0]["refs"] == ["main", "tag: v1"] and doc[1]["refs"] == []


def test_log_of_a_table_name_without_dashes(hist, cli):
    where = str(hist.path)
    assert ids(cli("-C", where, "--json", "log", "products", ok=True)) == \
        ids(cli("-C", where, "--json", "log", "--", "products", ok=True)) == [hist.resolve("main~2").id]
    # a table that never existed has no history: nothing, as git for a path
    assert cli("-C", where, "--json", "log", "--table", "nope", ok=True).json() == []


@pytest.mark.parametrize("args", [["nope..main"], ["main..nope"], ["main...nope"], ["^nope"], ["...."],
                                  ["main...."], [".main..feat"], ["nope"], ["--graph", "nope..feat"],
                                  ["--all", "main..nope", "--json"]])
def test_log_bad_ranges_are_one_line(hist, cli, args):
    before = state(hist)
    res = cli("-C", str(hist.path), "log", *args)
    line = one_line_error(res) if "--json" not in args else None
    if line is not None and "nope" in args[-1]:
        assert "nope" in line
    if "--json" in args:
        assert res.exit_code == 2 and json.loads(res.stderr)["type"] == "RefNotFoundError"
    assert state(hist) == before


# ---------------------------------------------------------------------------------------------- point 5: branches
def test_git_spellings_get_hints(hist, cli):
    where = str(hist.path)
    before = state(hist)
    assert "trimerge branch delete NAME" in one_line_error(cli("-C", where, "branch", "-d", "feat"))
    assert "branch delete -D" in one_line_error(cli("-C", where, "branch", "-D", "feat"))
    assert "every write" in one_line_error(cli("-C", where, "commit", "-m", "hello"))
    assert "No such option" in one_line_error(cli("-C", where, "branch", "-x"))  # no hint invented
    assert state(hist) == before
    verbose = cli("-C", where, "branch", "-v", ok=True).stdout
    assert verbose == cli("-C", where, "branch", "list", "-v", ok=True).stdout and "from main" in verbose
    assert cli("-C", where, "branch", "-a", ok=True).stdout == cli("-C", where, "branch", ok=True).stdout
    assert cli("-C", where, "branch", "-r", ok=True).stdout == ""


@pytest.fixture
def clone(hist, tmp_path, cli):
    where = tmp_path / "clone"
    cli("clone", hist.path, where, ok=True)
    return where


def test_switch_creates_a_branch_tracking_the_remote_one(hist, clone, cli):
    listed = cli("-C", clone, "branch", "-a", ok=True).stdout
    assert "remotes/origin/feat" in listed and "* main" in listed
    remote_only = cli("-C", clone, "--json", "branch", "-r", ok=True).json()
    assert {r["name"] for r in remote_only} == {"origin/main", "origin/feat"}
    res = cli("-C", clone, "switch", "feat", ok=True)
    assert "tracking origin/feat" in res.stdout
    repo = trimerge.Repository.open(clone)
    assert repo.current_branch == "feat" and repo.resolve("feat").id == hist.resolve("feat").id
    # the created branch follows the remote with plain pull/push
    hist.upsert("stores", pa.table({"id": [9], "city": ["Lima"]}), branch="feat", message="lima")
    cli("-C", clone, "pull", ok=True)
    assert trimerge.Repository.open(clone).resolve("feat").id == hist.resolve("feat").id
    # switch -c NAME START, START a remote-tracking ref
    cli("-C", clone, "switch", "-c", "f2", "origin/feat~1", ok=True)
    assert trimerge.Repository.open(clone).resolve("f2").id == hist.resolve("feat~1").id


def test_switch_bad_input(hist, clone, tmp_path, cli):
    other = tmp_path / "other"
    cli("clone", hist.path, other, ok=True)
    cli("-C", other, "switch", "feat", ok=True)  # a clone has main only: now 'up' has feat too
    cli("-C", clone, "remote", "add", "up", other, ok=True)
    cli("-C", clone, "fetch", "up", ok=True)
    repo = trimerge.Repository.open(clone)
    before = state(repo)
    line = one_line_error(cli("-C", clone, "switch", "feat"))
    assert "origin/feat" in line and "up/feat" in line and "switch -c feat origin/feat" in line
    assert "nope" in one_line_error(cli("-C", clone, "switch", "nope"))
    one_line_error(cli("-C", clone, "switch", "f3", "main"))  # START without -c
    one_line_error(cli("-C", clone, "switch", "-c", "f3", "main", "--from", "origin/feat"))
    one_line_error(cli("-C", clone, "switch", "-c", "f3", "nope/feat"))
    assert state(trimerge.Repository.open(clone)) == before
    cli("-C", clone, "switch", "-c", "feat", "up/feat", ok=True)


# ---------------------------------------------------------------------------------------------- point 1: merge
@pytest.fixture
def ff(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "ff")
    repo.create_table("t", pa.table({"id": [1, 2], "v": ["a", "b"]}), primary_key="id")
    for b in ("ahead", "other", "clash"):
        repo.branches.create(b, from_ref="main")
    repo.upsert("t", pa.table({"id": [1], "v": ["A"]}), branch="ahead", message="ahead")
    repo.upsert("t", pa.table({"id": [1], "v": ["X"]}), branch="clash", message="clash")
    repo.upsert("t", pa.table({"id": [3], "v": ["c"]}), branch="other", message="other")
    return repo


def test_merge_default_makes_a_merge_commit_and_says_so(ff, cli):
    res = cli("-C", ff.path, "merge", "ahead", ok=True)
    tip = ff.resolve("main")
    assert tip.parents == (ff.resolve("main~1").id, ff.resolve("ahead").id)
    assert "Made a merge commit" in res.stdout and "--ff would have moved it" in res.stdout
    assert merge("other", "main", repo=ff).commit.parents[1] == ff.resolve("other").id  # API default: never


def test_merge_ff_and_ff_only(ff, cli):
    base = ff.resolve("main").id
    dry = cli("-C", ff.path, "merge", "ahead", "--ff-only", "--dry-run", ok=True)
    assert "would fast-forward" in dry.stdout and ff.resolve("main").id == base
    res = cli("-C", ff.path, "--json", "merge", "ahead", "--ff-only", ok=True).json()
    assert res["status"] == "fast-forward" and ff.resolve("main").id == ff.resolve("ahead").id
    assert ff.reflog("main")[0].reason.endswith("fast-forward")
    # diverged now: --ff-only refuses (exit 1, nothing changed), --ff merges
    before = state(ff)
    line = one_line_error(cli("-C", ff.path, "merge", "other", "--ff-only"), code=1)
    assert "not possible to fast-forward" in line and state(ff) == before
    out = cli("-C", ff.path, "merge", "other", "--ff", ok=True).stdout
    assert "Made a merge commit" in out and len(ff.resolve("main").parents) == 2
    assert "Already up to date" in cli("-C", ff.path, "merge", "ahead", "--ff-only", ok=True).stdout


def test_merge_fast_forward_api(ff):
    tip = ff.resolve("ahead")
    with pytest.raises(trimerge.InvalidOperationError):
        merge("ahead", "main", repo=ff, fast_forward="sometimes")
    with pytest.raises(trimerge.InvalidOperationError):
        merge("ahead", "main", repo=ff, fast_forward="only", squash=True)
    res = merge("ahead", "main", repo=ff, fast_forward="allow")
    assert res.status == "fast-forward" and res.commit.id == tip.id and ff.resolve("main").id == tip.id
    with pytest.raises(FastForwardError) as err:
        merge("other", "main", repo=ff, fast_forward="only")
    assert err.value.exit_code == 1 and ff.resolve("main").id == tip.id
    # a protected destination takes the merge commit its rules run on
    ff.branches.create("guarded", from_ref="main~1")
    ff.branches.protect("guarded")
    with pytest.raises(FastForwardError, match="protected"):
        merge("ahead", "guarded", repo=ff, fast_forward="only")
    assert merge("ahead", "guarded", repo=ff, fast_forward="allow").status == "merged"


def test_merge_conflict_names_the_next_steps(ff, cli):
    cli("-C", ff.path, "merge", "ahead", ok=True)
    before = state(ff)
    res = cli("-C", ff.path, "merge", "clash", "--ff")
    assert res.exit_code == 1
    assert "--conflicts FILE" in res.stdout and "--resolve FILE" in res.stdout and "--strategy" in res.stdout
    assert state(ff) == before
    with pytest.raises(MergeConflictError) as err:
        merge("clash", "main", repo=ff)
    assert err.value.result.commit is None and err.value.result.conflicts


# ---------------------------------------------------------------------------------------------- point 2: refs at a time
def _moments(repo, branch):
    """(time, value) of each move of ``branch``, oldest first, from its reflog."""
    return [(e.time, e.new) for e in reversed(repo.reflog(branch))]


def test_ref_at_a_time_follows_the_reflog(ff, cli):
    cli("-C", ff.path, "merge", "ahead", "--ff-only", ok=True)  # main moves without a commit of its own
    moves = _moments(ff, "main")
    assert len(moves) >= 3
    for when, value in moves:
        for spelled in (when.isoformat(), when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")):
            assert ff.resolve(f"main@{{{spelled}}}").id == value
            assert cli("-C", ff.path, "rev-parse", f"main@{{{spelled}}}", ok=True).stdout.strip() == value
    # between two moves: the older value; the fast-forward is found by the reflog, not commit times
    last, prev = moves[-1], moves[-2]
    middle = prev[0] + (last[0] - prev[0]) / 2
    assert ff.resolve(f"main@{{{middle.isoformat()}}}").id == prev[1]
    assert ff.resolve(f"main@{{{last[0].isoformat()}}}").id == ff.resolve("ahead").id
    assert ff.resolve("main@{now}~1").id == ff.resolve("main~1").id
    assert ff.resolve("main@{0 seconds ago}").id == moves[-1][1]
    # naive = local time, as in git
    local = last[0].astimezone().replace(tzinfo=None)
    assert ff.resolve(f"main@{{{local.isoformat()}}}").id == last[1]


def test_read_as_of_and_sql(ff, cli):
    from datetime import datetime, timezone

    before = datetime.now(timezone.utc)
    ff.upsert("t", pa.table({"id": [7], "v": ["g"]}), message="seven")
    assert 7 not in ff.read("t", as_of=before).column("id").to_pylist()
    assert 7 in ff.read("t", as_of=datetime.now(timezone.utc)).column("id").to_pylist()
    assert ff.read("t", "ahead", as_of=before).to_pylist() == ff.read("t", "ahead").to_pylist()
    got = ff.sql(f'select count(*) as n from "t@main@{{{before.isoformat()}}}"').column("n").to_pylist()
    assert got == [2]
    text = cli("-C", ff.path, "--json", "read", "t", "--ref", f"main@{{{before.isoformat()}}}", "--format", "json",
               ok=True).stdout
    assert sorted(r["id"] for r in json.loads(text)) == [1, 2]
    # a tag has no reflog: commit times
    ff.tags.create("v1", "main")
    assert ff.resolve(f"v1@{{{before.isoformat()}}}").id == ff.resolve("main~1").id


@pytest.mark.parametrize("when", ["2001-01-01", "2001-01-01T00:00:00Z", "2199-01-01T00:00:00+01:00", "garbage",
                                  "2026-13-45", "99999999 weeks ago", "1 fortnight ago", "", "{}", "now\x01"])
def test_bad_times_are_one_line(ff, cli, when):
    before = state(ff)
    res = cli("-C", ff.path, "rev-parse", f"main@{{{when}}}")
    line = one_line_error(res)
    assert "main" in line or "ref" in line
    with pytest.raises(trimerge.TrimergeError):
        ff.resolve(f"main@{{{when}}}")
    assert state(ff) == before


def test_read_as_of_bad_input(ff):
    from datetime import datetime

    for bad, kind in [(datetime(2001, 1, 1), trimerge.RefNotFoundError), (datetime(2199, 1, 1), trimerge.RefNotFoundError),
                      (5, trimerge.InvalidOperationError), ("soon", trimerge.RefSyntaxError)]:
        with pytest.raises(kind):
            ff.read("t", as_of=bad)
    with pytest.raises(trimerge.InvalidOperationError, match="expression"):
        ff.read("t", "main~1", as_of=datetime.now())
    ff.branches.create("late")
    with pytest.raises(trimerge.RefNotFoundError, match="created later"):
        ff.resolve(f"late@{{{ff.resolve('main').created_at.isoformat()}}}")


# ---------------------------------------------------------------------------------------------- point 6: appends
def test_append_fills_nullable_columns_the_file_lacks(tmp_path, cli):
    where = tmp_path / "fill"
    cli("init", where, ok=True)
    (tmp_path / "a.csv").write_text("iata,name,hq_iata,sector\nAA,American,DFW,air\n")
    (tmp_path / "b.csv").write_text("iata,name\nDL,Delta\n")
    cli("-C", where, "table", "create", "airlines", tmp_path / "a.csv", "-k", "iata", ok=True)
    cli("-C", where, "load", "airlines", tmp_path / "b.csv", ok=True)
    repo = trimerge.Repository.open(where)
    rows = {r["iata"]: r for r in repo.read("airlines").to_pylist()}
    assert rows["DL"] == {"iata": "DL", "name": "Delta", "hq_iata": None, "sector": None}
    assert rows["AA"]["sector"] == "air"
    before = state(repo)
    # upsert keeps the strict rule (a null would replace a stored value); unknown columns still refused
    line = one_line_error(cli("-C", where, "load", "airlines", tmp_path / "b.csv", "--mode", "upsert"))
    assert "hq_iata" in line
    (tmp_path / "c.csv").write_text("iata,name,zzz\nB6,Jet,1\n")
    assert "zzz" in one_line_error(cli("-C", where, "load", "airlines", tmp_path / "c.csv"))
    (tmp_path / "d.csv").write_text("name\nJet\n")
    assert "iata" in one_line_error(cli("-C", where, "load", "airlines", tmp_path / "d.csv"))
    assert state(repo) == before


def test_append_refuses_a_missing_non_nullable_column(repo):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("must", pa.string(), nullable=False),
                        pa.field("may", pa.float64())])
    repo.create_table("t", pa.table({"id": [1], "must": ["x"], "may": [1.5]}, schema=schema), primary_key="id")
    assert not repo.schema("t").field("must").nullable
    before = state(repo)
    with pytest.raises(trimerge.SchemaMismatchError, match="must"):
        repo.append("t", pa.table({"id": [2], "may": [2.5]}))
    assert state(repo) == before and repo.read("t").num_rows == 1
    repo.append("t", pa.table({"id": [2], "must": ["y"]}))
    assert repo.read("t").sort_by("id").to_pylist()[1] == {"id": 2, "must": "y", "may": None}
    with repo.transaction(message="two") as tx:
        tx.append("t", pa.table({"must": ["z"], "id": [3]}))
    assert repo.entity("t", 3) == {"id": 3, "must": "z", "may": None}


# ---------------------------------------------------------------------------------------------- the selection, by property
from hypothesis import given, settings, strategies as st  # noqa: E402

from trimerge.lineage.history import graph as graphalg  # noqa: E402
from trimerge.lineage.history import logselect  # noqa: E402


@st.composite
def dags(draw):
    n = draw(st.integers(1, 14))
    parents = {}
    for i in range(n):
        earlier = list(range(i))
        ps = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
        parents[f"c{i:02d}"] = [f"c{p:02d}" for p in ps]
    return graphalg.DictGraph(parents, {c: float(i) for i, c in enumerate(parents)})


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_selection_is_the_filtered_range_and_keeps_ancestry(graph, data):
    commits = list(graph)
    include = data.draw(st.lists(st.sampled_from(commits), min_size=1, max_size=3))
    exclude = data.draw(st.lists(st.sampled_from(commits), max_size=2))
    shown = set(data.draw(st.lists(st.sampled_from(commits), max_size=len(commits))))
    hidden = logselect.excluded(graph, exclude, [])
    sel = logselect.Selection(graph, shown.__contains__, hidden)
    expect = [c for c in graphalg.iter_history(graph, include) if c not in hidden and c in shown]
    assert list(sel.walk(include)) == expect
    for c in expect:
        # the rewritten parents: the shown commits in the range reached from c through hidden-by-filter
        # commits only (git's parent rewriting)
        nearest, todo, seen = set(), list(graph.parents(c)), set()
        while todo:
            x = todo.pop()
            if x in seen or x in hidden:
                continue
            seen.add(x)
            if x in shown:
                nearest.add(x)
            else:
                todo.extend(graph.parents(x))
        assert set(sel.parents(c)) == nearest and len(sel.parents(c)) == len(nearest)
