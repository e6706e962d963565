"""Merge requests through the API (issue 51 points 1, 2 and 5): ``repo.requests`` and the approval
rule of ``branches.protect(name, approvals=K)``, on real repositories.

Every refusal of the issue's "Bad input" list is one typed error, and changes nothing: the
repository's metadata is byte-for-byte what it was (leases aside, which a refusal puts back as it
found them). Races (two reviewers, a merge against a push to its source) end in exactly one
recorded outcome."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage import errors as E
from trimerge.lineage.storage import faults
from trimerge.merge import MergeCheckError, MergeConflictError, merge, revert

T0 = pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]})


def snapshot(repo: trimerge.Repository) -> dict[str, bytes]:
    """Every metadata file but the leases (a refusal puts a lease back released, as git's lock files go)."""
    root = Path(repo.uri) / "_trimerge"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "locks" not in p.parts and "queues" not in p.parts}


def setup_repo(tmp_path: Path, *, approvals: int | None = None) -> trimerge.Repository:
    repo = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    repo.create_table("t", T0, primary_key=["id"], actor="setup")
    repo.branches.create("feature")
    repo.upsert("t", pa.table({"id": [2, 5], "v": ["B", "e"]}), branch="feature", actor="ann")
    if approvals is not None:
        repo.branches.protect("main", approvals=approvals, actor="admin")
    return repo


@pytest.fixture
def repo1(tmp_path):
    return setup_repo(tmp_path, approvals=1)


def rows(repo, ref="main"):
    return sorted(repo.read("t", ref).to_pylist(), key=lambda r: r["id"])


# ---------------------------------------------------------------------------------------------- records
def test_a_request_is_a_numbered_record_everyone_who_opens_the_repository_sees(tmp_path):
    repo = setup_repo(tmp_path)
    r1 = repo.requests.create("feature", into="main", title="Fix b", body="b was wrong", actor="ann")
    assert (r1.id, r1.source, r1.into, r1.state, r1.title, r1.body, r1.author) == \
        (1, "feature", "main", "open", "Fix b", "b was wrong", "ann")
    assert r1.created_at == r1.updated_at and [e.kind for e in r1.events] == ["created"]
    repo.branches.create("other")
    r2 = repo.requests.create("other", title="Nothing yet", actor="bob")
    assert r2.id == 2 and r2.into == "main" and r2.body is None
    again = trimerge.Repository.open(repo.uri)  # another opener sees the same requests
    assert [r.id for r in again.requests.list()] == [1, 2]
    assert again.requests.get(1) == r1 and again.requests.get("#2") == r2
    assert [r.id for r in again.requests.list(state="open", into="main")] == [1, 2]
    assert again.requests.list(state="merged") == [] and again.requests.list(into="other") == []
    doc = r1.to_json()
    assert json.loads(json.dumps(doc))["id"] == 1 and doc["events"][0]["kind"] == "created"


def test_numbers_are_never_reused_and_racing_creators_get_one_each(tmp_path):
    repo = setup_repo(tmp_path)
    names = [f"b{i}" for i in range(8)]
    for n in names:
        repo.branches.create(n)
    got, errors = [], []
    barrier = threading.Barrier(len(names))

    def create(name):
        mine = trimerge.Repository.open(repo.uri)
        barrier.wait()
        try:
            got.append(mine.requests.create(name, title=name, actor=name).id)
        except E.TrimergeError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(got) == list(range(1, 9))
    assert {r.title: r.source for r in repo.requests.list()} == {n: n for n in names}
    b7 = next(r for r in repo.requests.list() if r.source == "b7")
    repo.requests.close(b7.id, actor="x")
    assert repo.requests.create("b7", title="again", actor="y").id == 9  # a closed one keeps its number


def test_two_reviewers_racing_are_both_recorded_once(repo1):
    repo = repo1
    r = repo.requests.create("feature", title="Fix", actor="ann")
    reviewers = [f"rev{i}" for i in range(6)]
    barrier = threading.Barrier(len(reviewers))

    def review(who):
        mine = trimerge.Repository.open(repo.uri)
        barrier.wait()
        mine.requests.review(r.id, "approve" if who != "rev0" else "request-changes", actor=who, comment=who)

    threads = [threading.Thread(target=review, args=(w,)) for w in reviewers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = repo.requests.get(r.id)
    assert sorted(v.actor for v in done.reviews) == reviewers
    assert [e.seq for e in done.events] == list(range(1, len(reviewers) + 2))
    assert sorted(e.actor for e in done.events if e.kind == "reviewed") == reviewers
    view = repo.requests.show(r.id)
    assert not view.mergeable and "changes requested by rev0" in view.why  # the request-changes blocks


# ---------------------------------------------------------------------------------------------- the rule
def test_a_protected_branch_with_approvals_takes_only_approved_requests(repo1):
    repo = repo1
    before = rows(repo)
    with pytest.raises(E.ApprovalRequiredError, match="trimerge request create feature --into main") as info:
        merge("feature", "main", repo=repo)
    assert info.value.exit_code == 1 and rows(repo) == before
    tip = repo.resolve("feature").id
    with pytest.raises(E.ApprovalRequiredError):
        revert(tip, "main", repo=repo)  # a revert is no way around the rule either
    r = repo.requests.create("feature", title="Fix b", actor="ann")
    with pytest.raises(E.ApprovalRequiredError, match="needs 1 approval"):
        repo.requests.merge(r.id, actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    merged = repo.requests.merge(r.id, actor="ann")
    assert merged.state == "merged" and merged.merged_by == "ann" and merged.merged_source == tip
    commit = repo.resolve("main")
    assert merged.merge_commit == commit.id and commit.parents[1] == tip
    assert commit.metadata["request.id"] == "1" and commit.message == "Merge request #1: Fix b"
    assert {r["id"]: r["v"] for r in rows(repo)}[2] == "B"
    assert merged.merge_result.status == "merged"
    assert [e.kind for e in repo.requests.get(1).events] == ["created", "reviewed", "merged"]


def test_approvals_count_people_other_than_the_author_at_the_current_source_tip(tmp_path):
    repo = setup_repo(tmp_path, approvals=2)
    r = repo.requests.create("feature", title="Two needed", actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    view = repo.requests.show(r.id)
    assert not view.mergeable and "needs 2 approval(s)" in view.why and view.approvals.approvers == ("bob",)
    repo.upsert("t", pa.table({"id": [6], "v": ["f"]}), branch="feature", actor="ann")  # the source moves
    repo.requests.review(r.id, "approve", actor="cat")
    view = repo.requests.show(r.id)
    assert view.approvals.approvers == ("cat",) and view.approvals.stale == ("bob",)
    assert [v.stale for v in view.reviews] == [True, False] and "stale" in view.why
    with pytest.raises(E.ApprovalRequiredError):
        repo.requests.merge(r.id, actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")  # re-approved at the new tip
    repo.requests.review(r.id, "request-changes", actor="dan", comment="not yet")
    view = repo.requests.show(r.id)
    assert not view.mergeable and "changes requested by dan" in view.why
    repo.requests.review(r.id, "approve", actor="dan")  # the last review counts
    assert repo.requests.show(r.id).mergeable
    assert repo.requests.merge(r.id, actor="ann").state == "merged"
    assert 6 in {row["id"] for row in rows(repo)}


def test_a_rule_with_checks_refuses_a_merge_that_skips_them(tmp_path):
    repo = setup_repo(tmp_path)
    repo.checks.add("no_z", "t", "SELECT * FROM t WHERE v = 'z'", branch="main", actor="setup")
    repo.branches.protect("main", approvals=1)
    tip = repo.resolve("main").id
    r = repo.requests.create("feature", title="Fix", actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    with pytest.raises(E.ApprovalRequiredError, match="requires the data checks"):
        merge("feature", "main", repo=repo, checks=False, metadata={"request.id": "1"})
    assert repo.resolve("main").id == tip
    repo.branches.protect("main", checks=False, actor="admin")
    assert repo.branches.protection("main").to_json() == {"branch": "main", "approvals": 1, "checks": False}
    merge("feature", "main", repo=repo, checks=False, metadata={"request.id": "1"})  # allowed now
    repo.branches.unprotect("main")
    assert repo.branches.protection("main") is None


def test_protect_refuses_bad_rules_and_keeps_what_it_is_not_told(tmp_path):
    repo = setup_repo(tmp_path)
    for bad in (-1, 101, 1.5, True, "2"):
        with pytest.raises(E.InvalidOperationError, match="approvals"):
            repo.branches.protect("main", approvals=bad)
    with pytest.raises(E.InvalidOperationError):
        repo.branches.protect("main", checks="yes")
    with pytest.raises(E.BranchNotFoundError):
        repo.branches.protect("nope", approvals=1)
    assert repo.branches.protection("main") is None
    repo.branches.protect("main")
    assert repo.branches.protection("main").approvals == 0  # plain protection: merges of anything
    merge("feature", "main", repo=repo)
    repo.branches.protect("main", approvals=3)
    assert repo.branches.protection("main").to_json() == {"branch": "main", "approvals": 3, "checks": True}
    repo.branches.protect("main")  # nothing said: the rule stays
    assert repo.branches.protection("main").approvals == 3
    history = repo.branches.get("main")
    assert history.protected


# ---------------------------------------------------------------------------------------------- show
def test_show_answers_what_a_reviewer_needs(tmp_path):
    repo = setup_repo(tmp_path)
    # main and feature both change row 2: a conflict the dry run meets now.
    repo.upsert("t", pa.table({"id": [2], "v": ["bee"]}), branch="main", actor="setup")
    repo.checks.add("no_e", "t", "SELECT * FROM t WHERE v = 'e'", gates=["main"], branch="main", actor="setup")
    repo.branches.protect("main", approvals=1)
    r = repo.requests.create("feature", title="Fix b", actor="ann")
    before = snapshot(repo)
    view = repo.requests.show(r.id)
    assert snapshot(repo) == before  # a dry run publishes nothing
    assert view.diff.three_dot and view.diff.changed_tables() == ["t"]
    counts = view.diff.tables["t"].counts
    assert (counts.inserted, counts.updated, counts.deleted) == (1, 1, 0)
    assert [(c.kind, c.key) for c in view.conflicts] == [("row.update_update", {"id": 2})]
    assert [(c.name, c.failing_rows) for c in view.checks] == [("no_e", 1)]
    assert not view.mergeable and "1 conflict(s)" in view.why and "no_e" in view.why and "approval" in view.why
    doc = view.to_json()
    assert doc["diff"]["tables"]["t"]["rows_shown"] == 2 and doc["mergeable"] is False
    assert doc["conflicts"][0]["key"] == {"id": 2} and doc["checks"][0]["passed"] is False
    repo.requests.review(r.id, "approve", actor="bob")
    with pytest.raises(MergeConflictError):
        repo.requests.merge(r.id, actor="ann")
    assert repo.requests.get(r.id).state == "open"
    # settled by a strategy, the merge still fails the check on its result: nothing published
    tip = repo.resolve("main").id
    with pytest.raises(MergeCheckError):
        repo.requests.merge(r.id, strategy="dest-wins", actor="ann")
    assert repo.resolve("main").id == tip and repo.requests.get(r.id).state == "open"


def test_a_merged_request_shows_what_its_merge_changed(tmp_path):
    repo = setup_repo(tmp_path)
    r = repo.requests.create("feature", title="Fix", actor="ann")
    done = repo.requests.merge(r.id, actor="bob")
    view = repo.requests.show(r.id)
    assert view.state == "merged" and not view.mergeable and view.why == "the request is merged"
    assert view.diff.after.id == done.merge_commit and view.diff.changed_tables() == ["t"]
    repo.branches.delete("feature")
    assert repo.requests.show(r.id).diff is not None  # what it merged stays visible


def test_a_request_whose_source_is_contained_merges_as_nothing_to_do(tmp_path):
    repo = setup_repo(tmp_path)
    merge("feature", "main", repo=repo)
    r = repo.requests.create("feature", title="Already in", actor="ann")
    assert repo.requests.show(r.id).mergeable
    tip = repo.resolve("main").id
    done = repo.requests.merge(r.id, actor="bob")
    assert done.state == "merged" and done.merge_commit is None and repo.resolve("main").id == tip


# ---------------------------------------------------------------------------------------------- lifecycle
def test_close_reopen_and_the_events_hooks_will_read(tmp_path):
    repo = setup_repo(tmp_path)
    r = repo.requests.create("feature", title="Fix", actor="ann")
    repo.requests.enqueue(r.id, actor="ann")
    closed = repo.requests.close(r.id, actor="bob")
    assert closed.state == "closed" and closed.closed_by == "bob" and closed.queued is None
    with pytest.raises(E.InvalidOperationError, match="closed"):
        repo.requests.merge(r.id)
    again = repo.requests.reopen(r.id, actor="ann")
    assert again.state == "open" and again.closed_at is None
    repo.requests.review(r.id, "approve", actor="cat")
    repo.requests.merge(r.id, actor="ann")
    kinds = [e.kind for e in repo.requests.events()]
    assert kinds == ["created", "enqueued", "closed", "reopened", "reviewed", "merged"]
    events = repo.requests.events()
    assert [e.kind for e in repo.requests.events(since=events[2].id)] == kinds[3:]
    assert events[-1].detail["commit"] == repo.resolve("main").id
    with pytest.raises(E.InvalidOperationError, match="no request event"):
        repo.requests.events(since="9.9")


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_input_is_one_typed_error_and_changes_nothing(repo1, tmp_path):
    repo = repo1
    repo.tags.create("v1", "feature")
    r = repo.requests.create("feature", title="Fix", actor="ann")
    repo.branches.create("gone")
    other = repo.requests.create("gone", title="Closed one", actor="ann")
    repo.requests.close(other.id, actor="ann")
    before = snapshot(repo)
    cases = [
        (lambda: repo.requests.get(99), E.RequestNotFoundError, "no merge request #99"),
        (lambda: repo.requests.get("abc"), E.InvalidOperationError, "positive whole number"),
        (lambda: repo.requests.get(0), E.InvalidOperationError, "positive whole number"),
        (lambda: repo.requests.get(True), E.InvalidOperationError, "positive whole number"),
        (lambda: repo.requests.create("feature", into="nope", title="x", actor="a"), E.BranchNotFoundError, "nope"),
        (lambda: repo.requests.create("nope", title="x", actor="a"), E.BranchNotFoundError, "nope"),
        (lambda: repo.requests.create("v1", title="x", actor="a"), E.InvalidOperationError, "is a tag"),
        (lambda: repo.requests.create("main", into="main", title="x", actor="a"), E.InvalidOperationError,
         "both 'main'"),
        (lambda: repo.requests.create("feature", title="x", actor="a"), E.AlreadyExistsError, "#1"),
        (lambda: repo.requests.create("gone", title="", actor="a"), E.InvalidOperationError, "title"),
        (lambda: repo.requests.create("gone", title="a\nb", actor="a"), E.InvalidOperationError, "title"),
        (lambda: repo.requests.create("gone", title="x", body=3, actor="a"), E.InvalidOperationError, "body"),
        (lambda: repo.requests.create("gone", title="x", actor=" "), E.InvalidOperationError, "actor"),
        (lambda: repo.requests.review(r.id, "approve", actor="ann"), E.InvalidOperationError, "the author cannot"),
        (lambda: repo.requests.review(r.id, "approve", actor=""), E.InvalidOperationError, "reviewer"),
        (lambda: repo.requests.review(r.id, "lgtm", actor="bob"), E.InvalidOperationError, "verdict"),
        (lambda: repo.requests.review(r.id, "approve", actor="bob", commit="0" * 64), E.ConcurrentWriteError, "moved"),
        (lambda: repo.requests.review(other.id, "approve", actor="bob"), E.InvalidOperationError, "closed"),
        (lambda: repo.requests.merge(other.id, actor="bob"), E.InvalidOperationError, "closed"),
        (lambda: repo.requests.merge(r.id, actor="bob"), E.ApprovalRequiredError, "needs 1 approval"),
        (lambda: repo.requests.merge(r.id, strategy="mine", actor="bob"), E.ApprovalRequiredError, "approval"),
        (lambda: repo.requests.close(other.id), E.InvalidOperationError, "closed"),
        (lambda: repo.requests.reopen(r.id), E.InvalidOperationError, "only a closed request"),
        (lambda: repo.requests.list(state="done"), E.InvalidOperationError, "state"),
        (lambda: repo.requests.enqueue(other.id), E.InvalidOperationError, "closed"),
        (lambda: repo.requests.run_queue("nope"), E.BranchNotFoundError, "nope"),
    ]
    for call, error, text in cases:
        with pytest.raises(error, match=text) as info:
            call()
        assert "\n" not in str(info.value)
        assert snapshot(repo) == before, text
    read_only = trimerge.Repository.open(repo.uri, read_only=True)
    with pytest.raises(E.InvalidOperationError, match="read-only"):
        read_only.requests.create("gone", title="x", actor="a")
    assert snapshot(repo) == before


def test_a_stale_approval_is_no_approval(repo1):
    repo = repo1
    r = repo.requests.create("feature", title="Fix", actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    repo.upsert("t", pa.table({"id": [7], "v": ["g"]}), branch="feature", actor="ann")
    before = snapshot(repo)
    with pytest.raises(E.ApprovalRequiredError, match="stale .*bob"):
        repo.requests.merge(r.id, actor="ann")
    assert snapshot(repo) == before


def test_a_corrupted_request_document_is_named_and_nothing_changes(repo1):
    repo = repo1
    r = repo.requests.create("feature", title="Fix", actor="ann")
    path = Path(repo.uri) / "_trimerge" / "requests" / "items" / "1.json"
    for damage in (b"{not json", b'{"format": 1, "id": 2}', b'[1, 2]',
                   json.dumps({**r.stored(), "state": "weird"}).encode(),
                   json.dumps({**r.stored(), "reviews": [{"actor": 1}]}).encode()):
        path.write_bytes(damage)
        before = snapshot(repo)
        for call in (lambda: repo.requests.get(1), lambda: repo.requests.list(),
                     lambda: repo.requests.review(1, "approve", actor="bob"),
                     lambda: repo.requests.merge(1, actor="bob"), lambda: repo.requests.close(1)):
            with pytest.raises(E.CorruptRepositoryError, match="requests/items/1.json") as info:
                call()
            assert info.value.exit_code == 2 and "\n" not in str(info.value)
            assert snapshot(repo) == before
    path.write_bytes(json.dumps(r.stored()).encode())
    assert repo.requests.get(1).title == "Fix"


# ---------------------------------------------------------------------------------------------- races
def test_a_merge_racing_a_push_to_its_source_has_exactly_one_recorded_outcome(tmp_path):
    # The push lands while the merge is about to publish: the merge is refused, nothing published.
    repo = setup_repo(tmp_path, approvals=1)
    r = repo.requests.create("feature", title="Fix", actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    main_tip = repo.resolve("main").id

    def push():
        trimerge.Repository.open(repo.uri).upsert("t", pa.table({"id": [8], "v": ["late"]}), branch="feature",
                                                  actor="ann")

    with faults.at("intent_planned", push):
        with pytest.raises(E.ConcurrentWriteError, match="moved"):
            repo.requests.merge(r.id, actor="ann")
    assert repo.resolve("main").id == main_tip
    after = repo.requests.get(r.id)
    assert after.state == "open" and [e.kind for e in after.events] == ["created", "reviewed"]
    # its approval is stale now: the merge is refused until someone approves the new tip
    with pytest.raises(E.ApprovalRequiredError, match="stale"):
        repo.requests.merge(r.id, actor="ann")
    # The push lands just after the merge published: the merge is of the approved tip, recorded so.
    repo.requests.review(r.id, "approve", actor="bob")
    approved = repo.resolve("feature").id

    def push_again():
        trimerge.Repository.open(repo.uri).upsert("t", pa.table({"id": [9], "v": ["later"]}), branch="feature",
                                                  actor="ann")

    with faults.at("after_publish", push_again):
        done = repo.requests.merge(r.id, actor="ann")
    assert done.state == "merged" and done.merged_source == approved
    assert repo.resolve("main").parents[1] == approved and 9 not in {x["id"] for x in rows(repo)}
    assert [e.kind for e in done.events].count("merged") == 1


def test_clone_and_fetch_carry_the_requests(tmp_path):
    repo = setup_repo(tmp_path)
    r = repo.requests.create("feature", title="Fix", actor="ann")
    repo.requests.review(r.id, "approve", actor="bob")
    result = trimerge.Repository.clone(repo.uri, tmp_path / "copy")
    copy = result.repository
    assert copy.requests.get(1).title == "Fix" and copy.requests.get(1).reviews[0].actor == "bob"
    assert copy.requests.list(remote="origin")[0].remote == "origin" and copy.requests.remotes() == ["origin"]
    view = copy.requests.show(1, remote="origin")
    assert view.diff.changed_tables() == ["t"] and "remote 'origin'" in view.why
    repo.requests.close(1, actor="ann")
    repo.branches.create("b2")
    repo.requests.create("b2", title="Second", actor="cat")
    copy.fetch()
    assert [(x.id, x.state) for x in copy.requests.list(remote="origin")] == [(1, "closed"), (2, "open")]
    assert [(x.id, x.state) for x in copy.requests.list()] == [(1, "open")]  # its own record moves on its own
    with pytest.raises(E.RequestNotFoundError, match="remote 'origin'"):
        copy.requests.get(7, remote="origin")


# ---------------------------------------------------------------------------------------------- hostile input
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from test_hostile_input import hostile_text, values  # noqa: E402


def full_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


REQUEST_OPS = {
    "create": lambda rq, a, b, c: rq.create(a, into=b, title=c, actor="ann"),
    "create_body": lambda rq, a, b, c: rq.create("dev", title=a, body=b, actor=c),
    "get": lambda rq, a, b, c: rq.get(a),
    "list": lambda rq, a, b, c: rq.list(state=a, into=b),
    "review": lambda rq, a, b, c: rq.review(a, b, comment=c, actor="bob"),
    "review_actor": lambda rq, a, b, c: rq.review(1, "approve", comment=b, actor=a),
    "merge": lambda rq, a, b, c: rq.merge(a, strategy=b, actor=c),
    "close": lambda rq, a, b, c: rq.close(a, actor=b),
    "reopen": lambda rq, a, b, c: rq.reopen(a, actor=b),
    "enqueue": lambda rq, a, b, c: rq.enqueue(a, actor=b),
    "events": lambda rq, a, b, c: rq.events(since=a),
    "run_queue": lambda rq, a, b, c: rq.run_queue(a, actor=b),
    "protect": lambda rq, a, b, c: rq.repo.branches.protect(a, approvals=b, checks=c),
}


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_requests_answer_hostile_input_with_one_typed_line_and_change_nothing(data, tmp_path_factory):
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("hostile") / "repo")
    repo.create_table("t", pa.table({"id": [1, 2], "v": ["a", "b"]}), primary_key="id")
    repo.branches.create("dev")
    repo.upsert("t", pa.table({"id": [3], "v": ["c"]}), branch="dev")
    repo.requests.create("dev", title="t", actor="ann")
    root = Path(repo.uri)
    for _ in range(3):
        op = data.draw(st.sampled_from(sorted(REQUEST_OPS)), label="op")
        args = [data.draw(st.one_of(hostile_text, values), label=f"arg{i}") for i in range(3)]
        before = full_snapshot(root)
        try:
            REQUEST_OPS[op](repo.requests, *args)
        except E.TrimergeError as exc:
            assert str(exc) and "\n" not in str(exc), f"{op}{args}: {exc!r}"
            assert exc.exit_code in (1, 2, 3), f"{op}{args}: exit {exc.exit_code}"
            after = full_snapshot(root)
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            assert not changed, f"{op}{args} was refused ({exc}) but changed {changed[:5]}"
