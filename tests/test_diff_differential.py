"""Differential property test of the diff planner (issue 25, item 4).

Random histories on two tables (``t``: int32 key, string, int32, float with NaN/-0.0/nulls;
``u``: composite int64/string key, string, list) over up to five branches, built from every write kind (upsert, append,
update, delete by predicate, delete by keys, overwrite — also with a column more or fewer —,
identical rewrites, compaction, add/drop columns — also re-adding a dropped one —, widening
int32 -> int64 and string -> large_string — also of key columns —, revert, cherry-pick, merge
including criss-cross merges that need virtual bases, table drop/create/re-create, two writes in
one commit, branches from older commits); see ``histories.py``. For random pairs of commits (of all
branches, both directions, parent/child pairs, branch tips and their merge bases) every table is
diffed with every plan the planner can choose (``plan="auto"|"delta"|"fragments"|"full"``) and
compared with a brute-force diff (both snapshots read whole, joined by key; ``diffref.py``):
change kind and changed columns per key, the ``before``/``after`` values, the counts and the
table's status. ``plan="auto"`` runs with ``verify=True``, which must raise exactly when its rows
differ from those of ``plan="full"``. For one pair per history (branch tips), the automatic plan also
runs with a memory budget of one byte (every candidate spilled to disk and classified per
key-hash bucket).

One history is built per example and then compared many times (building dominates otherwise).
Deterministic by default (the same examples on every run). Environment:

* ``TRIMERGE_LONG_TESTS=N``: N times the histories and up to 4 times the ref pairs per history,
  random instead of derandomized (e.g. ``TRIMERGE_LONG_TESTS=20``).
* ``TRIMERGE_DIFF_SHRINK=1``: let Hypothesis shrink a failing history (slow: each step rebuilds it).

A failure prints a standalone script that rebuilds the history plus one ``diff(...)`` call per
kind of mismatch. ``pytest -s`` prints how many histories, commits and comparisons ran."""

from __future__ import annotations

import inspect
import os
import random
import tempfile
from collections import Counter

import pyarrow as pa
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from diffref import engine_rows, reference_diff, same
from histories import KEYS, HistoryBuilder, random_operations
from trimerge.diff import diff
from trimerge.diff.verify import same_value

LONG = int(os.environ.get("TRIMERGE_LONG_TESTS", "0") or 0)
SHRINK = os.environ.get("TRIMERGE_DIFF_SHRINK") == "1"
EXAMPLES = 20 * max(1, LONG)
PAIRS_PER_HISTORY = 24 * (min(LONG, 4) if LONG else 1)
SPILLED_PAIRS = 1  # the first pair (branch tips) also runs spilled to disk (64 buckets: slow)

_DIFF_PARAMS = inspect.signature(diff).parameters
HAS_PLAN = "plan" in _DIFF_PARAMS
HAS_VERIFY = "verify" in _DIFF_PARAMS
PLANS = ("auto", "delta", "fragments", "full") if HAS_PLAN else ("auto",)
# A forced plan whose precondition does not hold falls back to the next exact plan, never to a cheaper one.
ALLOWED = {"auto": {"delta", "fragments", "full"}, "delta": {"delta", "fragments", "full"},
           "fragments": {"fragments", "full"}, "full": {"full"}}

STATS: Counter = Counter()  # histories, commits, pairs, comparisons, ...
METHODS: Counter = Counter()  # (requested plan, method that ran)
OPS: Counter = Counter()  # write kind -> applied
REFUSED: Counter = Counter()  # (write kind, error) -> refused
MISMATCH_KINDS: Counter = Counter()


def verification_error():
    try:
        from trimerge.diff import DiffVerificationError
    except ImportError:
        return None
    return DiffVerificationError


def fields(schema: pa.Schema | None, key: list[str]) -> dict:
    """What a table's schema status depends on: each column's type (and nullability off the key)."""
    if schema is None:
        return {}
    return {f.name: str(f.type) + ("" if f.nullable or f.name in key else " not null") for f in schema}


class Snapshots:
    """Each (table, commit) read once (None where the commit has no such table)."""

    def __init__(self, repo):
        self.repo, self.cache = repo, {}

    def get(self, table: str, commit) -> pa.Table | None:
        k = (table, commit.id)
        if k not in self.cache:
            self.cache[k] = self.repo.read(table, ref=commit.id) if table in commit.tables else None
        return self.cache[k]


def keyed(t: pa.Table | None, key: list[str]) -> dict:
    return {} if t is None else {tuple(r[c] for c in key): r for r in t.to_pylist()}


def check_values(side: str, struct: dict | None, ref_row: dict | None, key: list[str]) -> str | None:
    """The ``before``/``after`` struct of a changed row holds the snapshot's values."""
    if ref_row is None:
        return None if struct is None else f"{side} should be null, is {struct}"
    if struct is None:
        return f"{side} is null, the snapshot has {ref_row}"
    missing = [c for c in ref_row if c not in key and c not in struct]
    if missing:
        return f"{side} lacks column(s) {missing}"
    wrong = {c: (struct[c], ref_row[c]) for c in struct if c in ref_row and not same(struct[c], ref_row[c])}
    return f"{side} values differ (engine, snapshot): {wrong}" if wrong else None


class Outcome:
    """One table diff checked against the brute-force diff."""

    def __init__(self):
        self.problems: list[tuple[str, str]] = []  # (mismatch class, detail)
        self.rows: list[dict] | None = None  # the engine's rows (None: it raised)
        self.verified: str | None = None  # verify=True: "" passed, else the error; None: not asked


def compare(repo, snaps: Snapshots, a, b, table: str, plan: str, spill: bool = False) -> Outcome:
    """The diff of ``table`` from commit ``a`` to ``b`` forced to ``plan`` against the brute-force
    diff; ``spill``: with a memory budget of one byte (every candidate spilled to key-hash buckets
    on disk). ``plan="auto"`` (not spilled) runs with ``verify=True``."""
    key = KEYS[table]
    before, after = snaps.get(table, a), snaps.get(table, b)
    want = reference_diff(before, after, key)
    kwargs = {"plan": plan} if HAS_PLAN else {}
    if spill:
        kwargs["memory_budget"] = 1
    verify_error = verification_error()
    out = Outcome()
    problems = out.problems
    try:
        if plan == "auto" and not spill and HAS_VERIFY and verify_error is not None:
            try:
                td = diff(a.id, b.id, repo=repo, tables=[table], engine="local", verify=True, **kwargs).tables[table]
                rows = td.rows()
                out.verified = ""
            except verify_error as exc:
                out.verified = f"{type(exc).__name__}: {str(exc)[:300]}"
                td = diff(a.id, b.id, repo=repo, tables=[table], engine="local", verify=False,
                          **kwargs).tables[table]
                rows = td.rows()
        else:
            td = diff(a.id, b.id, repo=repo, tables=[table], engine="local", **kwargs).tables[table]
            rows = td.rows()
        got = engine_rows(rows, key)
        counts = td.counts
        if not spill and plan in ("auto", "fragments"):
            # Counts asked first are computed apart (a column write's through its columns only).
            alone = diff(a.id, b.id, repo=repo, tables=[table], engine="local", **kwargs).tables[table].counts
            if alone != counts:
                problems.append(("counts alone differ from the rows' counts", f"{alone} != {counts}"))
        # Counts without rows (a merge that counts the source's diff only: TableDiff.count_first).
        only = diff(a.id, b.id, repo=repo, tables=[table], engine="local", **kwargs).tables[table]
        only.count_first = True
        if only.counts != counts or only.counts.by_column != counts.by_column:
            problems.append(("counts without rows differ from the rows' counts",
                             f"{only.counts} {only.counts.by_column} != {counts} {counts.by_column}"))
        if plan in ("delta", "fragments") or spill:  # the reads that choose images (auto runs one of them)
            problems.extend(merge_reads(repo, a, b, table, kwargs, rows, key))
        changed = td.changed
        method = td.plan.method
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a pyo3 PanicException is a BaseException
        first = str(exc).splitlines()[0][:300] if str(exc).strip() else ""
        problems.append((f"raised {type(exc).__name__} (plan={plan})", f"{type(exc).__name__}: {first}"))
        return out
    out.rows = rows.to_pylist()
    tag = f"{method}{' spilled' if spill else ''}"
    METHODS[(plan + (" spilled" if spill else ""), method)] += 1
    if td.storage_status == "modified" and method not in ALLOWED[plan]:
        problems.append((f"plan={plan} ran {method}", f"plan {plan!r} ran {method!r}"))
    if got != want:
        extra = {k: v for k, v in got.items() if want.get(k) != v}
        lost = {k: v for k, v in want.items() if got.get(k) != v}
        kinds = sorted({(want.get(k, ("none",))[0], got.get(k, ("none",))[0]) for k in extra.keys() | lost.keys()})
        problems.append((f"rows ({tag}): " + ", ".join(f"want {w} got {g}" for w, g in kinds),
                         f"engine has {extra}, brute force has {lost}"))
    else:
        bk, ak = keyed(before, key), keyed(after, key)
        for r in out.rows:
            k = tuple(r[c] for c in key)
            for side, struct, ref in (("before", r["before"], bk.get(k)), ("after", r["after"], ak.get(k))):
                problem = check_values(side, struct, ref, key)
                if problem:
                    problems.append((f"values ({tag}): {side}", f"key {k}: {problem}"))
                    break
    if counts.rows_changed != len(want):
        problems.append((f"counts ({tag})", f"counts {counts} for {len(want)} changed rows"))
    sb, sa = (fields(t.schema, key) if t is not None else None for t in (before, after))
    expect_changed = bool(want) or sb != sa
    if changed != expect_changed:
        problems.append((f"status ({tag})", f"changed={changed}, brute force: rows {len(want)}, schema {sb} -> {sa}"))
    return out


def merge_reads(repo, a, b, table: str, kwargs: dict, rows: pa.Table, key: list[str]) -> list[tuple[str, str]]:
    """The two narrower reads a merge asks of a diff agree with its rows (one of them per diff):
    deleted rows' images by key only (``key_only_deletes``), and the rows of some keys only
    (``only_keys``)."""
    problems: list[tuple[str, str]] = []
    # One of the two per diff, half the extra diffs; each plan meets both over a history's pairs.
    if (kwargs.get("plan") == "delta") == bool(rows.num_rows % 2):
        return only_keys_problems(repo, a, b, table, kwargs, rows, key)
    lean = diff(a.id, b.id, repo=repo, tables=[table], engine="local", **kwargs).tables[table]
    lean.key_only_deletes = True
    want = [{**r, "before": None} if r["change"] == "delete" else r for r in rows.to_pylist()]
    got = lean.rows().to_pylist()
    if not same_value([{**r, "before": None} if r["change"] == "delete" else r for r in got], want):
        problems.append(("key-only deletes: rows differ", f"{got} != {rows.to_pylist()}"))
    return problems


def only_keys_problems(repo, a, b, table: str, kwargs: dict, rows: pa.Table, key: list[str]) -> list[tuple[str, str]]:
    problems = []
    whole = diff(a.id, b.id, repo=repo, tables=[table], engine="local", **kwargs).tables[table]
    some = rows.select(key).take(pa.array(range(0, rows.num_rows, 2), pa.int64()))
    part = whole.only_keys(some)
    wanted = {tuple(r[k] for k in key) for r in some.to_pylist()}
    expect = [r for r in rows.to_pylist() if tuple(r[k] for k in key) in wanted]
    if not same_value(part.rows().to_pylist(), expect):
        problems.append(("only_keys: rows differ", f"{part.rows().to_pylist()} != {expect}"))
    if part.whole_changed and not rows.num_rows:
        problems.append(("only_keys: whole_changed without rows", f"plan {part.plan.method}"))
    return problems


def verify_problems(outcomes: dict[tuple[str, bool], Outcome]) -> list[tuple[str, str]]:
    """``verify=True`` raises exactly when the automatic plan's rows differ from the full plan's."""
    auto, full = outcomes.get(("auto", False)), outcomes.get(("full", False))
    if auto is None or full is None or auto.verified is None or auto.rows is None or full.rows is None:
        return []
    differ = not same(auto.rows, full.rows)
    if differ == bool(auto.verified):
        return []
    if differ:
        return [("verify=True missed a difference", "the auto and full plans' rows differ; verify passed")]
    return [("verify=True raised, plans agree", auto.verified)]


def ref_pairs(builder: HistoryBuilder, rng: random.Random) -> list[tuple]:
    """Pairs of commits to compare: branch tips against each other and their merge bases, parent
    and child both ways, then random pairs — ``PAIRS_PER_HISTORY`` in all."""
    repo = builder.repo
    commits = [c for c in builder.commits() if c.tables]
    by_id = {c.id: c for c in commits}
    tip_ids = {repo.resolve(b).id for b in builder.branches}
    tips = [c for c in commits if c.id in tip_ids]
    first: list[tuple] = []
    for x in tips:
        for y in tips:
            if x.id != y.id:
                first.append((x, y))
                base = repo.merge_base(x.id, y.id)
                if base is not None and base.id != y.id and base.id in by_id:
                    first.append((by_id[base.id], y))
    edges = [(by_id[p], c) for c in commits for p in c.parents if p in by_id]
    edges += [(c, p) for p, c in list(edges)]
    rest = [(x, y) for x in commits for y in commits if x.id != y.id]
    for pairs in (first, edges, rest):
        rng.shuffle(pairs)
    out, seen = [], set()
    for x, y in first[:PAIRS_PER_HISTORY // 3] + edges[:PAIRS_PER_HISTORY // 3] + rest:
        if (x.id, y.id) not in seen:
            seen.add((x.id, y.id))
            out.append((x, y))
        if len(out) >= PAIRS_PER_HISTORY:
            break
    return out


PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target] + ([Phase.shrink] if SHRINK else [])


def check_history(builder: HistoryBuilder, pair_seed: int) -> dict[str, tuple]:
    """Compare every plan with the brute-force diff on ``PAIRS_PER_HISTORY`` pairs of the history's
    commits: {mismatch class: (commit a, commit b, table, plan, spilled, detail)} of the first of each."""
    commits = builder.commits()
    STATS["histories"] += 1
    STATS["commits"] += len(commits)
    STATS["virtual-base merges"] += sum(c.metadata.get("merge.virtual_base") == "recursive" for c in commits)
    OPS.update(builder.applied)
    REFUSED.update(builder.refused)
    snaps = Snapshots(builder.repo)
    found: dict[str, tuple] = {}
    for i, (a, b) in enumerate(ref_pairs(builder, random.Random(pair_seed))):
        STATS["ref pairs"] += 1
        variants = [(plan, False) for plan in PLANS] + ([("auto", True)] if i < SPILLED_PAIRS else [])
        for table in sorted(a.tables.keys() | b.tables.keys()):
            tv_a, tv_b = a.tables.get(table), b.tables.get(table)
            # Added, dropped or the same Lance version: every plan is the same code path.
            trivial = tv_a is None or tv_b is None or tv_a.location == tv_b.location
            outcomes = {}
            for plan, spill in variants[:1] if trivial else variants:
                STATS["comparisons"] += 1
                STATS["comparisons of modified tables"] += not trivial
                outcomes[(plan, spill)] = outcome = compare(builder.repo, snaps, a, b, table, plan, spill)
                for cls, detail in outcome.problems:
                    STATS["mismatches"] += 1
                    MISMATCH_KINDS[cls] += 1
                    found.setdefault(cls, (a, b, table, plan, spill, detail))
            for cls, detail in verify_problems(outcomes):
                STATS["mismatches"] += 1
                MISMATCH_KINDS[cls] += 1
                found.setdefault(cls, (a, b, table, "auto", False, detail))
    return found


def report(builder: HistoryBuilder, found: dict[str, tuple]) -> str:
    lines = [f"{len(found)} kind(s) of mismatch between the diff and the brute-force diff:"]
    for cls, (a, b, table, plan, spill, detail) in found.items():
        names = builder.names
        call = (f"diff({names.get(a.id, a.id)}, {names.get(b.id, b.id)}, repo=repo"
                + (f", plan={plan!r}" if HAS_PLAN else "") + (", memory_budget=1" if spill else "")
                + (", verify=True" if cls.startswith("verify") else "") + f").tables[{table!r}].rows()")
        lines.append(f"- {cls}\n    {call}\n    {detail[:600]}")
    lines.append("\nThe history, as a script:\n" + builder.script())
    return "\n".join(lines)


PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target] + ([Phase.shrink] if SHRINK else [])


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG,
          phases=PHASES, print_blob=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(10, 16))
def check_random_histories(seed, n_ops):
    """One history of ``n_ops`` operations drawn from ``seed`` (the kinds with their weights in
    ``KINDS``; shrinking ``n_ops`` drops operations from the end)."""
    with tempfile.TemporaryDirectory(prefix="trimerge-diffdiff-") as tmp:
        builder = HistoryBuilder(os.path.join(tmp, "repo"), init_seed=seed)
        try:
            for kind, branch, op_seed in random_operations(seed, n_ops):
                builder.apply(kind, branch, op_seed)
        except BaseException as exc:  # a write failed in a way no refusal explains: show the history
            exc.add_note("The history up to the failing write (its last lines), as a script:\n" + builder.script())
            raise
        found = check_history(builder, seed)
        if found:
            raise AssertionError(report(builder, found))


def summary() -> str:
    plans = ", ".join(f"{p}->{m}: {n}" for (p, m), n in sorted(METHODS.items()))
    refused = ", ".join(f"{k}/{e}: {n}" for (k, e), n in sorted(REFUSED.items())) or "none"
    lines = [f"diff differential: {STATS['histories']} histories, {STATS['commits']} commits, "
             f"{STATS['ref pairs']} ref pairs, {STATS['comparisons']} table comparisons "
             f"({STATS['comparisons of modified tables']} of tables modified between the two commits) "
             f"({STATS['mismatches']} mismatches); {STATS['virtual-base merges']} virtual-base merges",
             f"  plans (requested->ran): {plans}" + ("" if HAS_PLAN else "  [diff(plan=) not available: auto only]")
             + ("" if HAS_VERIFY else "  [diff(verify=) not available]"),
             "  writes applied: " + ", ".join(f"{k}: {n}" for k, n in sorted(OPS.items())),
             f"  writes refused: {refused}"]
    if MISMATCH_KINDS:
        lines.append("  mismatch kinds: " + "; ".join(f"{k}: {n}" for k, n in MISMATCH_KINDS.most_common()))
    return "\n".join(lines)


def test_every_plan_matches_a_brute_force_diff_on_random_histories():
    try:
        check_random_histories()
    finally:
        print("\n" + summary())
