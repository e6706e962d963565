"""The model test of the new verbs (issue 39, item 7): tests/test_model.py's model, extended.

:class:`VerbsModel` is :class:`test_model.RepositoryModel` — every rule of it (transactions and
one-shot writes, refused writes, branches and tags, merges at every granularity with strategies
and hand resolutions, criss-cross merges, reverts, cherry-picks, gc, reads, diffs, merge bases) —
plus rules for the verbs added since, interleaved with those at random:

* **restore** (``repo.restore``, at ref expressions and at ``BRANCH~N``, also right after a check
  was added): the table becomes its state at the ref (dropped, brought back) and keeps the checks
  and derived declarations the branch has (issue 39 point 4) — refused when the restored table
  cannot carry them — or, with ``keep_gates=False``, takes the ref's; refused on a protected
  branch, also when it would change nothing.
* **reset** (``repo.branches.reset``, also ``dry_run``): the branch moves; ``unreachable`` counts the
  commits no branch or tag reaches any more, on the model's DAG.
* **rebase** (``trimerge.merge.rebase``, with and without a strategy, ``skip_merges``): the branch's
  first-parent commits since the merge base replayed one by one as the model's cherry-picks;
  conflicts name the model's commit and conflicts; every replay is checked (parents, tables, rows);
  the branch moves once; no temporary branch is left (not even a hidden one), and a user's branch
  named like an old temporary one (``rebasing/<ulid>``) is never touched; checks gating the
  branch run on the result (``checks=False`` skips them).
* **squash** and **per-table merges** (``merge(..., squash=True)``, ``merge(..., tables=[...])``):
  the model's three-way merge, restricted to the tables taken, published with one parent.
* **the reflog**: every move of every branch in the model; after every step ``repo.reflog(b)`` is
  the model's list of (old, new) moves, and ``NAME@{N}`` ref expressions (also past the end of the
  log, and with ``~``/``^`` steps) are drawn wherever test_model draws a ref; ``gc(retention="now")``
  expires them.
* **column writes**: backfills (one column of every row, as column files, rows or auto) and
  ``add_columns`` with a table that fills the new column for some rows.
* **derived columns** (``repo.set_derived``): declarations are table state — versioned, merged
  three-way by column, dropped with a column they name; every tip's declarations are checked, and
  a merge's stale rows must be rows both sides changed.
* **upkeep**: the upkeep settings changed mid-history (tiny thresholds, so writes take the keyed
  and compaction paths), and ``repo.optimize`` maintenance commits (rows unchanged, hidden by
  ``log(maintenance=False)``).
* **protection** (``repo.branches.protect``/``unprotect``): every direct write, reset, restore,
  rebase, check change and delete of a protected branch is refused with ``ProtectedBranchError``
  and changes nothing; merges, reverts and cherry-picks into it are allowed.
* **gated merges** (``repo.checks.add``/``remove``): checks are table state merged three-way by
  name; a merge, revert, cherry-pick, squash or per-table merge into a branch they gate whose model
  result has a failing row raises ``MergeCheckError`` naming exactly the model's failing checks (a
  dry run says ``check_failed``), and nothing moves. The checks judging a change are those gating
  the branch in the result and those gating it before that the change removes (issue 39 point 4);
  ``checks=False`` skips them; ``repo.checks.run`` fails exactly where the model does.
* **blame** (``repo.blame``, rows and cells): git's rule — the blame passes to the first parent with
  the same value — walked on the model's DAG and states.
* **merge requests** (``repo.requests``, issue 51): create, review (a self-review refused), close,
  reopen (refused beside an open twin) and merge — the request's merge is the model's three-way
  merge of its source into its target (conflicts and failing checks refused, nothing moves), one
  merge commit naming the request; after every step the requests are the model's.

After every step every branch and table is checked against the model as in test_model.py, plus
each tip's checks and derived declarations, the protected set, and the reflog.

Deterministic by default: 40 histories of up to 20 steps, about 30 s (``TRIMERGE_MODEL_VERBS_EXAMPLES`` /
``TRIMERGE_MODEL_VERBS_STEPS`` set them); ``TRIMERGE_LONG_TESTS=N``: 40*N random histories of up
to 60 steps (``=100`` runs for hours). ``TRIMERGE_MODEL_EXCLUDE`` tokens of test_model.py apply, and
these: ``restore``, ``reset``, ``rebase``, ``squash``, ``tables`` (per-table merges), ``reflog``,
``backfill``, ``derived``, ``upkeep``, ``protect``, ``checks``, ``blame``, ``requests``, and ``noop_restore`` (a
restore that changes nothing on a protected branch may answer ``unchanged``).
``TRIMERGE_MODEL_NO_SHRINK=1`` reports a failing history as found (shrinking can take many minutes).
"""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

import test_model as M
from test_model import (EXCLUDE, SPECS, STATS, Decider, Ref, RepositoryModel, engine_conflicts,
                        model_conflicts, model_merge, row_change, states_equal, table_src, teq, to_arrow)
from trimerge.lineage import errors as E
from trimerge.merge import MergeCheckError, MergeConflictError, RebaseCheckError, RebaseConflictError, merge, rebase

LONG = M.LONG
EXAMPLES = int(os.environ.get("TRIMERGE_MODEL_VERBS_EXAMPLES", "0") or 0) or (40 * LONG if LONG else 40)
STEPS = int(os.environ.get("TRIMERGE_MODEL_VERBS_STEPS", "0") or 0) or (60 if LONG else 20)

# Data checks: the failing rows are keys present (key columns are never dropped, so every check
# stays valid whatever the history does to the value columns). name -> (table, sql, gates, key).
CHECKS = {
    "no_t4": ("t", "SELECT * FROM t WHERE id = 4", None, (4,)),
    "no_uy1": ("u", "SELECT * FROM u WHERE k1 = 'y' AND k2 = 1", ("b1", "main"), ("y", 1)),
    "no_w2": ("w", "SELECT id FROM w WHERE id = 2", ("b2",), (2,)),
}
# Derived-column declarations: (table, column) -> inputs (one definition each: merges never conflict)
DERIVED = {("t", "s"): ("a",), ("t", "c"): ("s",), ("u", "v"): ("k2",), ("w", "v"): ("id",)}
#: ``TRIMERGE_MODEL_NO_SHRINK=1``: report a failing history as found (shrinking one can take many minutes)
NO_SHRINK = bool(os.environ.get("TRIMERGE_MODEL_NO_SHRINK"))
#: Branch names a user may hold that look like trimerge's (old rebases used ``rebasing/<ulid>``), and
#: one in the internal space no user can create.
USER_NAMES = ["rebasing/01jabcdefghjkmnpqrstvwxyz0", "rebasing/mine", "__trimerge__/rebase/x"]
UPKEEP = {"compaction.max_small_fragments": [2, 3, 64], "index.key_min_rows": [1, 5, 100_000]}


def meta_of(tv) -> dict:
    """The model's ``meta`` of a table version: its checks and derived declarations."""
    out = {}
    for name, record in tv.checks or ():
        doc = json.loads(record)
        gates = doc.get("gates")
        out[("check", name)] = (doc.get("sql"), None if gates is None else tuple(gates))
    for column, inputs in tv.derived or ():
        out[("derived", column)] = tuple(inputs)
    return out


def check_meta(name: str) -> tuple:
    table, sql, gates, _ = CHECKS[name]
    return ("check", name), (sql, gates)


class LoggedBranches(dict):
    """The model's branches, logging every move (old, new) in the model's reflog."""

    def __init__(self, log: dict, items):
        super().__init__(items)
        self.log = log

    def __setitem__(self, name, cid):
        old = self.get(name)
        if old != cid:
            self.log.setdefault(name, []).append((old, cid))
        super().__setitem__(name, cid)

    def __delitem__(self, name):
        self.log.setdefault(name, []).append((self[name], None))
        super().__delitem__(name)


class VerbsModel(RepositoryModel):
    def __init__(self):
        super().__init__()
        self.protected: set[str] = set()
        self.requests: dict[int, dict] = {}  # merge requests: number -> source, into, state, reviews
        self.skip_checks = False  # a merge with checks=False runs
        root = self.branches["main"]
        self.reflog: dict[str, list] = {"main": [(None, root)]}
        self.branches = LoggedBranches(self.reflog, self.branches)
        self.say("from trimerge.merge import rebase")

    # -- what the model says about the new state
    def failing_gates(self, dest: str, state: dict, before: dict | None = None) -> list[str]:
        """The checks judging a change of ``dest`` from ``before`` (default: its tip) to ``state`` that
        fail there: those gating it in ``state``, and those gating it in ``before`` that the change
        removes, as they were defined (issue 39 point 4: no merge removes a gate unseen), if their
        table is still there."""
        if self.skip_checks:
            return []
        before = self.state(self.branches[dest]) if before is None else before

        def gating(tables: dict) -> dict:
            return {(key[1], table): value for table, mt in tables.items() for key, value in mt.meta.items()
                    if key[0] == "check" and dest in (self.protected if value[1] is None else set(value[1]))}
        judging = gating(state)
        for (name, table), definition in gating(before).items():
            if (name, table) not in judging and table in state:
                judging[(name, table)] = definition
        return sorted(name for name, table in judging if CHECKS[name][3] in state[table].rows)

    def check_merge_result(self, verb: str, result, B: dict, O: dict, T: dict) -> None:
        """Stale rows (derived values and inputs from different sides) are rows both sides changed."""
        for table, keys in (result.stale or {}).items():
            assert table in O and table in T, f"{verb}: stale rows in {table}, which is not on both sides"
            key = O[table].key
            for k in keys:
                kt = tuple(k[c] for c in key)
                assert row_change(B.get(table), O[table], kt) is not None and \
                    row_change(B.get(table), T[table], kt) is not None, \
                    f"{verb}: {table} row {kt} is stale, but not both sides changed it"
            STATS["merges with stale rows"] += 1

    def refused(self, what: str, error, call, reads: tuple = ()) -> None:
        """``call()`` must raise ``error`` (and change nothing: the invariant checks that), or
        ``DataReclaimedError`` first if it reads a commit gc may have reclaimed (``reads``)."""
        try:
            with pytest.raises(error):
                call()
        except E.DataReclaimedError:
            assert self.reclaimable(*reads)
            return
        STATS[f"{what}: refused ({error.__name__})"] += 1

    def protected_refusal(self, exc: Exception) -> None:
        assert any(f"'{b}'" in str(exc) for b in self.protected), f"refused for no protected branch: {exc}"
        STATS["refused: protected branch"] += 1

    def add_node(self, cid: str, parents: tuple, state: dict) -> None:
        """A published commit no branch moved to (a rebase's replay)."""
        commit = self.repo.commit(cid)
        assert tuple(commit.parents) == tuple(parents), (commit.parents, parents)
        assert cid not in self.nodes
        self.nodes[cid] = M.Node(parents, state, 1 + max(self.nodes[p].gen for p in parents), len(self.nodes))
        self.names[cid] = f"c{len(self.names)}"
        self.say(f"{self.names[cid]} = {cid!r}  # a replay")
        STATS["commits"] += 1

    # -- ref expressions: NAME@{N} too
    def draw_ref(self, data, label: str = "ref") -> Ref:
        if "reflog" in EXCLUDE or data.draw(st.integers(0, 5), label=f"{label} reflog") != 0:
            return super().draw_ref(data, label)
        name = data.draw(st.sampled_from(sorted(self.branches)), label=label)
        values = [self.branches[name]] + [old for old, _new in reversed(self.reflog.get(name, []))]
        n = data.draw(st.integers(0, len(values)), label=f"{label} @{{n}}")
        cid = values[n] if n < len(values) else None
        expr, src = f"{name}@{{{n}}}", repr(f"{name}@{{{n}}}")
        steps = data.draw(st.sampled_from(M.STEPS_SUFFIX), label=f"{label} steps")
        text = "".join(f"{op}{k}" for op, k in steps)
        for op, k in steps:
            if cid is None:
                break
            if op == "^":
                ps = self.nodes[cid].parents
                cid = cid if k == 0 else (ps[k - 1] if len(ps) >= k else None)
            else:
                for _ in range(k):
                    ps = self.nodes[cid].parents if cid else ()
                    cid = ps[0] if ps else None
        STATS["reflog ref expressions"] += 1
        return Ref(expr + text, repr(expr + text), cid)

    # -- the invariant, beyond test_model's
    @invariant()
    def tips_gates_and_reflog(self):
        for name, cid in sorted(self.branches.items()):
            commit = self.repo.commit(cid)
            for table, mt in self.state(cid).items():
                got = meta_of(commit.tables[table])
                assert got == mt.meta, f"branch {name}, table {table}: checks/derived {got}, model {mt.meta}"
        got = sorted(b.name for b in self.repo.branches.list() if getattr(b, "protected", False))
        assert got == sorted(self.protected), f"protected {got}, model {sorted(self.protected)}"
        if "reflog" not in EXCLUDE:
            for name in sorted(self.branches):
                got = [(e.old, e.new) for e in self.repo.reflog(name)]
                want = list(reversed(self.reflog.get(name, [])))
                assert got == want, f"reflog of {name}: {[(o and o[:8], n and n[:8]) for o, n in got]}, model " \
                                    f"{[(o and o[:8], n and n[:8]) for o, n in want]}"

    # -- test_model's writes under protection
    def run_transaction(self, branch: str, ops: list, state: dict) -> None:
        if branch not in self.protected:
            return super().run_transaction(branch, ops, state)
        self.say(f"# refused: a transaction on protected {branch!r}")
        with pytest.raises(E.ProtectedBranchError) as info:
            with self.repo.transaction(branch, actor="model", message="model") as tx:
                for op in ops:
                    method, args, _src = M.op_call(op)
                    getattr(tx, method)(*args)
        self.protected_refusal(info.value)

    def _guarded(self, fn, data) -> None:
        """A rule of test_model's that writes a branch directly: refused on a protected branch."""
        before = {b: self.branches[b] for b in self.protected}
        try:
            fn(self, data)
        except E.ProtectedBranchError as exc:
            self.protected_refusal(exc)
            assert {b.name: b.commit_id for b in self.repo.branches.list()} == dict(self.branches)
        assert {b: self.branches.get(b) for b in before} == before, "a protected branch was written"

    @rule(data=st.data())
    def one_shot_write(self, data):
        self._guarded(RepositoryModel.one_shot_write, data)

    @rule(data=st.data())
    def refused_write(self, data):
        self._guarded(RepositoryModel.refused_write, data)

    @rule(data=st.data())
    def delete_branch(self, data):
        self._guarded(RepositoryModel.delete_branch, data)

    @rule(data=st.data())
    def gc(self, data):
        if "gc" in EXCLUDE:
            return
        self.count("gc")
        retention = data.draw(st.sampled_from(["now", "7d"]), label="retention")
        self.say(f"repo.gc(retention={retention!r})")
        self.repo.gc(retention=retention)
        self.cache.clear()
        if retention == "now":
            self.maybe_reclaimed |= set(self.nodes) - self.live()
            for moves in self.reflog.values():  # every entry is older than "now"
                moves.clear()

    # -- names like trimerge's own
    @rule(data=st.data())
    def user_branch_like_internal(self, data):
        """A user's branch named like an old rebase's temporary branch: no rebase, cleanup or gc may
        remove it (issue 39 point 2); a name in trimerge's internal space is refused."""
        if "rebase" in EXCLUDE:
            return
        self.count("branch create (internal-looking name)")
        name = data.draw(st.sampled_from(USER_NAMES), label="name")
        if name in self.branches:
            return
        ref = self.draw_ref(data, "from")
        self.say(f"repo.branches.create({name!r}, from_ref={ref.src})")
        if name.startswith("__trimerge__/"):
            return self.refused("branch create", E.InvalidNameError, lambda: self.repo.branches.create(name))
        if ref.id is None:
            return self.refused("branch create", E.RefNotFoundError,
                                lambda: self.repo.branches.create(name, from_ref=ref.expr))
        try:
            b = self.repo.branches.create(name, from_ref=ref.expr)
        except E.DataReclaimedError:
            assert self.reclaimable(ref.id)
            return
        assert b.commit_id == ref.id
        self.branches[name] = ref.id
        self.origins[name] = ref.expr if ref.expr in self.branches and ref.expr != name else None
        self.maybe_reclaimed.discard(ref.id)

    # -- protection
    @rule(data=st.data())
    def protect(self, data):
        if "protect" in EXCLUDE:
            return
        self.count("protect / unprotect")
        name = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        if name in self.protected:
            self.say(f"repo.branches.unprotect({name!r})")
            self.repo.branches.unprotect(name)
            self.protected.discard(name)
        else:
            self.say(f"repo.branches.protect({name!r})")
            self.repo.branches.protect(name)
            self.protected.add(name)

    # -- data checks
    def _meta_commit(self, branch: str, table: str, change, call, what: str) -> None:
        """A write that changes only a table's ``meta`` (``change(meta)`` in place)."""
        tip = self.branches[branch]
        state = dict(self.state(tip))
        mt = state[table] = state[table].copy()
        change(mt.meta)
        if branch in self.protected:
            with pytest.raises(E.ProtectedBranchError) as info:
                call()
            self.protected_refusal(info.value)
            return
        call()
        commit = self.repo.resolve(branch)
        if commit.id == tip:
            assert mt.meta == self.state(tip)[table].meta, f"{what} published nothing"
            return
        self.record(branch, commit, (tip,), state)

    @rule(data=st.data())
    def gate_add_or_remove_check(self, data):
        if "checks" in EXCLUDE:
            return
        self.count("check add / remove")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        name = data.draw(st.sampled_from(sorted(CHECKS)), label="check")
        table, sql, gates, _ = CHECKS[name]
        state = self.state(self.branches[branch])
        ident, value = check_meta(name)
        if table not in state:
            self.say(f"repo.checks.add({name!r}, {table!r}, {sql!r}, branch={branch!r})  # no table")
            with pytest.raises(E.TableNotFoundError):
                self.repo.checks.add(name, table, sql, gates=gates, branch=branch)
            return
        if ident in state[table].meta:
            if data.draw(st.booleans(), label="add again"):
                with pytest.raises(E.AlreadyExistsError):
                    self.repo.checks.add(name, table, sql, gates=gates, branch=branch)
                return
            self.say(f"repo.checks.remove({name!r}, branch={branch!r})")
            self._meta_commit(branch, table, lambda meta: meta.pop(ident),
                              lambda: self.repo.checks.remove(name, branch=branch), "check remove")
            STATS["check removed"] += 1
        else:
            self._add_check(branch, name)

    def _add_check(self, branch: str, name: str) -> None:
        table, sql, gates, _ = CHECKS[name]
        ident, value = check_meta(name)
        self.say(f"repo.checks.add({name!r}, {table!r}, {sql!r}, gates={gates!r}, branch={branch!r})")
        self._meta_commit(branch, table, lambda meta: meta.__setitem__(ident, value),
                          lambda: self.repo.checks.add(name, table, sql, gates=gates, branch=branch), "check add")
        STATS["check added"] += 1

    @rule(data=st.data())
    def gate_run_checks(self, data):
        """``repo.checks.run`` at a branch: exactly the checks the model has there, failing on the model's rows."""
        if "checks" in EXCLUDE:
            return
        self.count("check run")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        state = self.state(self.branches[branch])
        want = {k[1]: CHECKS[k[1]][3] in mt.rows for mt in state.values() for k in mt.meta if k[0] == "check"}
        self.say(f"repo.checks.run({branch!r})")
        got = {r.name: not r.passed for r in self.repo.checks.run(branch)}
        assert got == want, f"checks at {branch}: failing {got}, model {want}"

    # -- derived columns
    @rule(data=st.data())
    def set_derived(self, data):
        if "derived" in EXCLUDE:
            return
        self.count("set_derived")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        state = self.state(self.branches[branch])
        (table, column), inputs = data.draw(st.sampled_from(sorted(DERIVED.items())), label="declaration")
        if table not in state:
            return
        mt = state[table]
        undeclare = data.draw(st.booleans(), label="undeclare")
        given = None if undeclare else list(inputs)
        self.say(f"repo.set_derived({table!r}, {column!r}, inputs={given!r}, branch={branch!r})")
        call = lambda: self.repo.set_derived(table, column, inputs=given, branch=branch)  # noqa: E731
        valid = column in mt.types and (undeclare or set(inputs) <= set(mt.types))
        if branch not in self.protected and not valid:
            with pytest.raises(E.SchemaMismatchError):
                call()
            return

        def change(meta):
            if undeclare:
                meta.pop(("derived", column), None)
            else:
                meta[("derived", column)] = tuple(inputs)
        self._meta_commit(branch, table, change, call, "set_derived")

    # -- column writes
    @rule(data=st.data())
    def update_backfill(self, data):
        """One column of every row rewritten, as column files, row rewrites or by cost."""
        if "backfill" in EXCLUDE:
            return
        self.count("backfill")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        state = dict(self.state(self.branches[branch]))
        tables = sorted(n for n, mt in state.items() if mt.rows and mt.values)
        if not tables:
            return
        name = data.draw(st.sampled_from(tables), label="table")
        mt = state[name]
        column = data.draw(st.sampled_from(mt.values), label="column")
        rows = {k: data.draw(st.sampled_from(M.domain(name, column)), label="value") for k in sorted(mt.rows, key=repr)}
        types = {c: mt.types[c] for c in (*mt.key, column)}
        full = {k: {column: v} for k, v in rows.items()}
        write = data.draw(st.sampled_from(["auto", "columns", "rows"]), label="write")
        op = {"kind": "update", "table": name, "column": column, "rows": rows, "data": to_arrow(types, mt.key, full),
              "src": table_src(types, mt.key, full), "write": write}
        M.apply_op(state, op)
        self.run_transaction(branch, [op], state)

    @rule(data=st.data())
    def update_filled_column(self, data):
        """``add_columns`` with a table of keys and the new column's values (other rows: null)."""
        if "backfill" in EXCLUDE or "schema" in EXCLUDE:
            return
        self.count("add filled column")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        state = dict(self.state(self.branches[branch]))
        tables = sorted(n for n, mt in state.items() if mt.rows and M.ADDED[0] not in mt.types)
        if not tables:
            return
        name = data.draw(st.sampled_from(tables), label="table")
        mt = state[name] = state[name].copy()
        keys = data.draw(st.lists(st.sampled_from(sorted(mt.rows, key=repr)), min_size=1, unique=True), label="keys")
        col, typ = M.ADDED
        fill = {k: data.draw(st.sampled_from(M.DOMAINS["c"]), label="value") for k in keys}
        types = {**{c: mt.types[c] for c in mt.key}, col: typ}
        table = to_arrow(types, mt.key, {k: {col: v} for k, v in fill.items()})
        mt.types[col] = typ
        mt.rows = {k: {**r, col: fill.get(k)} for k, r in mt.rows.items()}
        self.say(f"repo.add_columns({name!r}, {table_src(types, mt.key, {k: {col: v} for k, v in fill.items()})}, "
                 f"branch={branch!r})")
        tip = self.branches[branch]
        if branch in self.protected:
            with pytest.raises(E.ProtectedBranchError) as info:
                self.repo.add_columns(name, table, branch=branch)
            self.protected_refusal(info.value)
            return
        commit = self.repo.add_columns(name, table, branch=branch)
        self.record(branch, commit, (tip,), state)

    # -- upkeep
    @rule(data=st.data())
    def upkeep(self, data):
        """Upkeep settings changed mid-history, or an optimize maintenance commit."""
        if "upkeep" in EXCLUDE:
            return
        self.count("upkeep")
        if data.draw(st.booleans(), label="setting"):
            name = data.draw(st.sampled_from(sorted(UPKEEP)), label="setting")
            value = data.draw(st.sampled_from(UPKEEP[name]), label="value")
            self.say(f"repo.settings.set({name!r}, {value!r})")
            self.repo.settings.set(name, value)
            return
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        tip = self.branches[branch]
        state = self.state(tip)
        table = data.draw(st.sampled_from([None, *sorted(state)]), label="table")
        self.say(f"repo.optimize({table!r}, branch={branch!r})")
        if branch in self.protected:
            with pytest.raises(E.ProtectedBranchError) as info:
                self.repo.optimize(table, branch=branch)
            self.protected_refusal(info.value)
            return
        commit = self.repo.optimize(table, branch=branch)
        if commit is None:
            STATS["optimize: nothing to do"] += 1
            return
        self.record(branch, commit, (tip,), state)
        assert commit.id not in {c.id for c in self.repo.log(branch, maintenance=False)}
        STATS["optimize: maintenance commit"] += 1

    # -- history editing
    @rule(data=st.data())
    def restore(self, data):
        if "restore" in EXCLUDE:
            return
        self.count("restore")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        table = data.draw(st.sampled_from(sorted(SPECS)), label="table")
        back = data.draw(st.integers(0, 4), label="commits back")
        if back:  # the usual restore: the table as it was a few commits ago on the branch
            ref = self._back(branch, back)
        else:
            ref = self.draw_ref(data, "at")
        self._restore(branch, table, ref, keep=data.draw(st.integers(0, 3), label="keep_gates=False") != 3)

    def _back(self, branch: str, n: int) -> Ref:
        cid = self.branches[branch]
        for _ in range(n):
            cid = self.nodes[cid].parents[0] if cid and self.nodes[cid].parents else None
        return Ref(f"{branch}~{n}", repr(f"{branch}~{n}"), cid)

    @rule(data=st.data())
    def restore_past_a_gate(self, data):
        """The issue's case: a check is added to a table, the table changes, then is restored to a
        state before the check — which must keep it (and a merge of that into a gated branch must
        still be judged by it)."""
        if "restore" in EXCLUDE or "checks" in EXCLUDE:
            return
        self.count("restore past a gate")
        branch = data.draw(st.sampled_from(sorted(b for b in self.branches if b not in self.protected) or ["main"]),
                           label="branch")
        name = data.draw(st.sampled_from(sorted(CHECKS)), label="check")
        table = CHECKS[name][0]
        if table not in self.state(self.branches[branch]):
            return
        if check_meta(name)[0] not in self.state(self.branches[branch])[table].meta:
            self._add_check(branch, name)
        if data.draw(st.booleans(), label="declare derived"):
            (column, inputs) = next((c, i) for (t, c), i in sorted(DERIVED.items()) if t == table)
            if column in self.state(self.branches[branch])[table].types:
                self.say(f"repo.set_derived({table!r}, {column!r}, inputs={list(inputs)!r}, branch={branch!r})")
                self._meta_commit(branch, table, lambda meta: meta.__setitem__(("derived", column), inputs),
                                  lambda: self.repo.set_derived(table, column, inputs=list(inputs), branch=branch),
                                  "set_derived")
        ops, state = self.draw_ops(data, branch, 2)
        if ops:
            self.run_transaction(branch, ops, state)
        self._restore(branch, table, self._back(branch, data.draw(st.integers(1, 4), label="commits back")),
                      keep=data.draw(st.integers(0, 3), label="keep_gates=False") != 3)

    def _restore(self, branch: str, table: str, ref: Ref, keep: bool = True) -> None:
        """``repo.restore``: the table as it was at ``ref``, keeping the checks and derived declarations
        the branch has now (issue 39 point 4: ``keep_gates=True``, the default; refused when the
        restored table cannot carry them) or taking the ref's (``keep_gates=False``)."""
        kw = {} if keep else {"keep_gates": False}
        self.say(f"r = repo.restore({table!r}, {ref.src}, branch={branch!r}{', keep_gates=False' if not keep else ''})")
        call = lambda: self.repo.restore(table, ref.expr, branch=branch, **kw)  # noqa: E731
        if ref.id is None:
            return self.refused("restore", E.RefNotFoundError, call)
        tip = self.branches[branch]
        then, now_ = self.state(ref.id).get(table), self.state(tip).get(table)
        if then is None and now_ is None:
            return self.refused("restore", E.TableNotFoundError, call, (ref.id,))
        new = then.copy() if then is not None else None
        if keep and now_ is not None:
            if new is not None:
                new.meta = dict(now_.meta)
        if branch in self.protected and "noop_restore" not in EXCLUDE:
            # issue 39 point 5: refused like every other write, also when it would change nothing
            try:
                with pytest.raises(E.ProtectedBranchError) as info:
                    call()
            except E.DataReclaimedError:
                assert self.reclaimable(ref.id)
                return
            self.protected_refusal(info.value)
            noop = new is not None and now_ is not None and teq(new, now_) and new.meta == now_.meta
            STATS["restore: refused (protected" + (", a no-op)" if noop else ")")] += 1
            return
        if keep and now_ is not None and now_.meta:
            lost = [k[1] for k in now_.meta if k[0] == "derived" and then is not None and
                    not (k[1] in then.types and set(now_.meta[k]) <= set(then.types))]
            if then is None or lost:  # a dropped table or a missing column cannot carry them
                return self.refused("restore (gates it cannot keep)", E.InvalidOperationError, call, (ref.id,))
        try:
            result = call()
        except E.DataReclaimedError:
            assert self.reclaimable(ref.id)
            return
        if result.commit is None:
            assert result.action == "unchanged"
            assert new is not None and now_ is not None and teq(new, now_) and new.meta == now_.meta, \
                f"restore of {table} at {ref.expr} said unchanged, but the model differs"
            STATS["restore: unchanged"] += 1
            return
        state = dict(self.state(tip))
        if new is None:
            assert result.action == "dropped"
            del state[table]
        else:
            assert result.action == ("brought back" if now_ is None else "restored"), result.action
            state[table] = new
        self.record(branch, result.commit, (tip,), state)
        STATS[f"restore: {result.action}" + ("" if keep else " (gates from the ref)")] += 1

    @rule(data=st.data())
    def reset(self, data):
        if "reset" in EXCLUDE:
            return
        self.count("reset")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        ref = self.draw_ref(data, "to")
        dry = data.draw(st.integers(0, 4), label="dry run") == 0
        self.say(f"r = repo.branches.reset({branch!r}, {ref.src}, dry_run={dry})")
        call = lambda: self.repo.branches.reset(branch, ref.expr, dry_run=dry)  # noqa: E731
        if branch in self.protected:
            with pytest.raises(E.ProtectedBranchError) as info:
                call()
            self.protected_refusal(info.value)
            return
        if ref.id is None:
            return self.refused("reset", E.RefNotFoundError, call)
        old = self.branches[branch]
        try:
            result = call()
        except E.DataReclaimedError:
            assert self.reclaimable(ref.id)
            return
        others = [c for n, c in self.branches.items() if n != branch] + list(self.tags.values())
        reached = set(self.ancestors(ref.id))
        for c in others:
            reached |= self.ancestors(c)
        want = len(self.ancestors(old) - reached)
        assert (result.old, result.new, result.unreachable) == (old, ref.id, want), \
            f"reset: {(result.old[:8], result.new[:8], result.unreachable)}, model {(old[:8], ref.id[:8], want)}"
        if not dry:
            self.branches[branch] = ref.id
            self.maybe_reclaimed.discard(ref.id)
            STATS["reset: moved" if old != ref.id else "reset: in place"] += 1

    @rule(data=st.data())
    def rebase_branch(self, data):
        if "rebase" in EXCLUDE:
            return
        self.count("rebase")
        # usually a branch that can move, onto a branch it has diverged from
        pairs = [(b, o) for b in sorted(self.branches) for o in sorted(self.branches)
                 if b not in self.protected and self.branches[o] not in self.ancestors(self.branches[b])
                 and self.branches[b] not in self.ancestors(self.branches[o])]
        if pairs and data.draw(st.integers(0, 3), label="diverged pair") != 0:
            branch, onto = data.draw(st.sampled_from(pairs), label="branch, onto")
            target = Ref(onto, repr(onto), self.branches[onto])
        else:
            branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
            target = None
        if target is not None:
            pass
        elif data.draw(st.booleans(), label="onto a branch"):
            others = sorted(b for b in self.branches if b != branch)
            if not others:
                return
            onto = data.draw(st.sampled_from(others), label="onto")
            target = Ref(onto, repr(onto), self.branches[onto])
        else:
            target = self.draw_ref(data, "onto")
        strategy = data.draw(st.sampled_from([None, "source-wins", "dest-wins"]), label="strategy")
        skip = data.draw(st.booleans(), label="skip merges")
        checks = "checks" in EXCLUDE or data.draw(st.integers(0, 3), label="checks=False") != 3
        self.say(f"r = rebase({branch!r}, {target.src}, repo=repo, strategy={strategy!r}, skip_merges={skip}, "
                 f"checks={checks})")
        call = lambda: rebase(branch, target.expr, repo=self.repo, strategy=strategy, skip_merges=skip,  # noqa: E731
                              checks=checks)
        if branch in self.protected:
            with pytest.raises(E.ProtectedBranchError) as info:
                call()
            self.protected_refusal(info.value)
            return
        if target.id is None:
            return self.refused("rebase", E.RefNotFoundError, call)
        tip = self.branches[branch]
        if target.expr == branch or target.id == tip or tip in self.ancestors(target.id):
            return self.refused("rebase", E.InvalidOperationError, call)
        if target.id in self.ancestors(tip):
            assert call().status == "up-to-date"
            STATS["rebase: up to date"] += 1
            return
        onto_anc = self.ancestors(target.id)
        todo, cur = [], tip
        while cur not in onto_anc:
            todo.append(cur)
            if not self.nodes[cur].parents:
                break
            cur = self.nodes[cur].parents[0]
        todo.reverse()
        merges = [c for c in todo if len(self.nodes[c].parents) > 1]
        if merges and not skip:
            return self.refused("rebase (merge commits)", E.InvalidOperationError, call)
        todo = [c for c in todo if len(self.nodes[c].parents) <= 1]
        # the model's replays: cherry-picks onto the target, one after the other
        state = self.state(target.id)
        replays = []
        for c in todo:
            parent = self.nodes[c].parents[0]
            new, conflicts = model_merge(self.state(parent), state, self.state(c), "cell", Decider(strategy=strategy))
            if conflicts:
                try:
                    with pytest.raises(RebaseConflictError) as info:
                        call()
                except E.DataReclaimedError:
                    assert self.reclaimable(target.id, *todo)
                    return
                res = info.value.rebase_result
                assert res.conflict_commit == c, f"rebase conflicts replaying {res.conflict_commit[:8]}, model {c[:8]}"
                got = engine_conflicts(res.conflicts)
                assert got == model_conflicts(conflicts), f"rebase conflicts: engine {got}, model {conflicts}"
                assert self.repo.resolve(branch).id == tip
                STATS["rebase: conflicts"] += 1
                return
            # git's rule: a replay that changes nothing is dropped, unless its commit changed nothing itself
            replays.append((c, new, states_equal(new, state) and not states_equal(self.state(parent), self.state(c))))
            state = new
        failing = self.failing_gates(branch, state, self.state(tip)) if checks else []
        try:
            result = call()
        except RebaseCheckError as exc:
            assert failing, f"rebase refused by checks {[c.name for c in exc.rebase_result.failed_checks]}, model none"
            assert sorted(c.name for c in exc.rebase_result.failed_checks) == failing
            assert self.repo.resolve(branch).id == tip
            STATS["rebase: refused by a data check"] += 1
            return
        except E.DataReclaimedError:
            assert self.reclaimable(target.id, *todo)
            return
        assert not failing, f"rebase passed checks the model fails: {failing}"
        assert result.status == "rebased", result.status
        assert result.skipped_merges == merges
        replayed, dropped = dict(result.replayed), set(result.dropped)
        assert set(replayed) | dropped == set(todo) and not set(replayed) & dropped
        prev = target.id
        before = self.state(target.id)
        for c, new, drop in replays:
            if c in dropped:
                assert drop or ("emptyrule" in EXCLUDE and states_equal(new, before)), \
                    f"rebase dropped {self.names[c]}, whose replay changes {branch} in the model"
                STATS["rebase: replay dropped"] += 1
                continue
            before = new
            assert not drop or "emptyrule" in EXCLUDE, \
                f"rebase replayed {self.names[c]}, whose change {target.expr} has already"
            self.add_node(replayed[c], (prev,), new)
            self.check_commit(replayed[c], f"replay of {self.names[c]}")
            prev = replayed[c]
            STATS["rebase: replayed"] += 1
        assert result.new_tip == prev
        left = [b.name for b in self.repo.branches.list(include_internal=True) if b.name not in self.branches
                and b.name != "__schema_apply_lock__"]
        assert not left, f"branches left after a rebase: {left}"
        self.branches[branch] = prev
        self.say(f"{self.names.get(prev, prev)} = repo.resolve({branch!r}).id")
        STATS["rebase: rebased"] += 1

    def _merge_variant(self, data, verb: str):
        dest = data.draw(st.sampled_from(sorted(self.branches)), label="dest")
        others = sorted(b for b in self.branches if b != dest)
        if not others:
            return
        name = data.draw(st.sampled_from(others), label="source")
        for side in (name, dest):
            if data.draw(st.booleans(), label=f"write on {side} first"):
                ops, state = self.draw_ops(data, side, 2)
                if ops:
                    self.run_transaction(side, ops, state)
        source, dest_tip = self.branches[name], self.branches[dest]
        kw: dict = {"squash": True} if verb == "squash" or data.draw(st.booleans(), label="squash too") else {}
        if "checks" not in EXCLUDE and data.draw(st.integers(0, 3), label="checks=False") == 3:
            kw["checks"] = False
        tables = None
        if verb == "per-table merge":
            known = sorted(set(self.state(source)) | set(self.state(dest_tip)))
            if not known:
                return
            tables = set(data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=2, unique=True),
                                   label="tables"))
            kw["tables"] = sorted(tables)
        shown = "".join(f", {k}={v!r}" for k, v in kw.items())
        call_src = f"merge({name!r}, {dest!r}, repo=repo{shown}"
        if source in self.ancestors(dest_tip):
            self.say(f"{call_src})")
            r = merge(name, dest, repo=self.repo, **kw)
            assert r.status == "up-to-date" and r.commit is None
            STATS[f"{verb}: up to date"] += 1
            return
        self.skip_checks = kw.get("checks") is False
        try:
            self.three_way(data, verb, lambda **more: merge(name, dest, repo=self.repo, **kw, **more), call_src, dest,
                           self.merge_bases(source, dest_tip), source, None, (source,), tables=tables)
        finally:
            self.skip_checks = False

    @rule(data=st.data())
    def squash_merge(self, data):
        if "squash" in EXCLUDE:
            return
        self.count("squash merge")
        self._merge_variant(data, "squash")

    @rule(data=st.data())
    def per_table_merge(self, data):
        if "tables" in EXCLUDE:
            return
        self.count("per-table merge")
        self._merge_variant(data, "per-table merge")

    # -- merge requests (issue 51): create, review, close, reopen and merge, against the model's merge
    @rule(data=st.data())
    def merge_request(self, data):
        if "requests" in EXCLUDE:
            return
        self.count("merge request")
        dest = data.draw(st.sampled_from(sorted(self.branches)), label="into")
        others = sorted(b for b in self.branches if b != dest)
        if not others:
            return
        source = data.draw(st.sampled_from(others), label="request source")
        found = [n for n, r in sorted(self.requests.items()) if (r["source"], r["into"], r["state"]) ==
                 (source, dest, "open")]
        if found:
            number = found[0]
        else:
            self.say(f"repo.requests.create({source!r}, into={dest!r}, title='model', actor='ann')")
            number = self.repo.requests.create(source, into=dest, title="model", actor="ann").id
            assert number == len(self.requests) + 1, f"request numbered {number}, model {len(self.requests) + 1}"
            self.requests[number] = {"source": source, "into": dest, "state": "open", "reviews": 0}
        if data.draw(st.booleans(), label="pick an earlier request"):
            number = data.draw(st.sampled_from(sorted(self.requests)), label="request")
        want = self.requests[number]
        action = data.draw(st.sampled_from(["review", "close", "reopen", "merge", "merge"]), label="action")
        self.say(f"# request #{number} {want}: {action}")
        if action == "review":
            who = data.draw(st.sampled_from(["ann", "bob"]), label="reviewer")
            call = lambda: self.repo.requests.review(number, "approve", actor=who)  # noqa: E731
            if want["state"] != "open" or who == "ann" or want["source"] not in self.branches:
                return self.refused("request review", E.InvalidOperationError, call)
            call()
            want["reviews"] += 1
        elif action == "close":
            call = lambda: self.repo.requests.close(number, actor="bob")  # noqa: E731
            if want["state"] != "open":
                return self.refused("request close", E.InvalidOperationError, call)
            call()
            want["state"] = "closed"
        elif action == "reopen":
            call = lambda: self.repo.requests.reopen(number, actor="ann")  # noqa: E731
            twin = any(r["state"] == "open" and (r["source"], r["into"]) == (want["source"], want["into"])
                       for r in self.requests.values())
            if want["state"] != "closed" or want["source"] not in self.branches:
                return self.refused("request reopen", E.InvalidOperationError, call)
            if want["into"] not in self.branches:
                return self.refused("request reopen", E.BranchNotFoundError, call)
            if twin:
                return self.refused("request reopen", E.AlreadyExistsError, call)
            call()
            want["state"] = "open"
        else:
            self._merge_request(number, want)

    def _merge_request(self, number: int, want: dict) -> None:
        call = lambda: self.repo.requests.merge(number, actor="carl")  # noqa: E731
        if want["state"] != "open" or want["source"] not in self.branches:
            return self.refused("request merge", E.InvalidOperationError, call)
        dest, name = want["into"], want["source"]
        if dest not in self.branches:
            return self.refused("request merge", E.BranchNotFoundError, call)
        source, dest_tip = self.branches[name], self.branches[dest]
        if source in self.ancestors(dest_tip):
            done = call()
            assert done.state == "merged" and done.merge_commit is None and self.repo.resolve(dest).id == dest_tip
            want["state"] = "merged"
            STATS["request merge: up to date"] += 1
            return
        virtual: dict = {}
        B, O, T = self.base_state(self.merge_bases(source, dest_tip), virtual), self.state(dest_tip), self.state(source)
        state, unresolved = model_merge(B, O, T, "cell", Decider())
        error = MergeConflictError if unresolved else MergeCheckError if self.failing_gates(dest, state) else None
        try:
            if error is not None:
                with pytest.raises(error):
                    call()
                assert self.repo.resolve(dest).id == dest_tip and self.repo.requests.get(number).state == "open"
                STATS[f"request merge: {error.__name__}"] += 1
                return
            done = call()
        except E.DataReclaimedError:
            assert self.reclaimable(source, dest_tip, *virtual)
            return
        assert done.state == "merged" and done.merged_by == "carl" and done.merged_source == source
        commit = self.repo.commit(done.merge_commit)
        assert commit.metadata["request.id"] == str(number)
        self.record(dest, commit, (dest_tip, source), state)
        want["state"] = "merged"
        STATS["request merge: published"] += 1

    @invariant()
    def requests_as_modelled(self):
        got = {r.id: (r.source, r.into, r.state, len(r.reviews)) for r in self.repo.requests.list()}
        want = {n: (r["source"], r["into"], r["state"], r["reviews"]) for n, r in self.requests.items()}
        assert got == want, f"requests {got}, model {want}"

    # -- blame
    def model_blame(self, cid: str, table: str, key: tuple, columns: tuple) -> str:
        def value(c):
            mt = self.state(c).get(table)
            if mt is None or key not in mt.rows:
                return None
            return tuple(mt.rows[key].get(col) for col in columns)
        v = value(cid)
        while True:
            for p in self.nodes[cid].parents:
                if value(p) == v:
                    cid = p
                    break
            else:
                return cid

    @rule(data=st.data())
    def show_blame(self, data):
        if "blame" in EXCLUDE:
            return
        self.count("blame")
        branch = data.draw(st.sampled_from(sorted(self.branches)), label="branch")
        tip = self.branches[branch]
        state = self.state(tip)
        if not state:
            return
        table = data.draw(st.sampled_from(sorted(state)), label="table")
        mt = state[table]
        cells = mt.values and data.draw(st.booleans(), label="cells")
        columns = data.draw(st.lists(st.sampled_from(mt.values), min_size=1, max_size=2, unique=True),
                            label="columns") if cells else None
        self.say(f"repo.blame({table!r}, ref={branch!r}, columns={columns!r})")
        got = self.repo.blame(table, ref=branch, columns=columns).to_pylist()
        if columns is None:
            assert sorted((tuple(r[c] for c in mt.key) for r in got), key=repr) == sorted(mt.rows, key=repr)
            for r in got:
                k = tuple(r[c] for c in mt.key)
                want = self.model_blame(tip, table, k, tuple(mt.values))
                assert r["commit"] == want, f"blame {table} {k} at {branch}: {self.names.get(r['commit'])}, " \
                                            f"model {self.names[want]}"
        else:
            want_cells = sorted(((k, c) for k in mt.rows for c in columns), key=repr)
            assert sorted(((tuple(r[c] for c in mt.key), r["column"]) for r in got), key=repr) == want_cells
            for r in got:
                k = tuple(r[c] for c in mt.key)
                want = self.model_blame(tip, table, k, (r["column"],))
                assert r["commit"] == want, f"blame {table} {k}.{r['column']} at {branch}: " \
                                            f"{self.names.get(r['commit'])}, model {self.names[want]}"
        STATS["blamed rows and cells"] += len(got)


def test_model_of_the_new_verbs(capsys):
    """Random histories of the new verbs among the old ones, checked step by step against the model."""
    STATS.clear()
    started = time.monotonic()
    try:
        run_state_machine_as_test(VerbsModel, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=not LONG,
            print_blob=True, suppress_health_check=list(HealthCheck),
            **({"phases": [p for p in Phase if p != Phase.shrink]} if NO_SHRINK else {})))
    finally:
        with capsys.disabled():
            took = time.monotonic() - started
            print(f"\nmodel test of the new verbs: {STATS['histories']} histories, {STATS['steps']} steps, "
                  f"{STATS['commits']} commits in {took:.0f} s (max_examples={EXAMPLES}, stateful_step_count={STEPS})")
            for what, n in sorted(STATS.items()):
                if what not in ("histories", "steps", "commits"):
                    print(f"  {what}: {n}")


def test_a_merge_keeps_no_declaration_naming_a_column_the_result_lacks(tmp_path):
    """Found by the model: one side declared ``s`` derived from ``a``, the other dropped ``a``. The
    merge (and a cherry-pick) recorded ``s <- a`` on a table without ``a`` — a declaration no write
    can make (``set_derived`` refuses it, ``drop_columns`` drops it); the cherry-pick published a
    commit for it. Now the declaration goes with the column, and the cherry-pick changes nothing."""
    from trimerge.merge import cherry_pick

    repo = M.trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": pa.array([1], pa.int64()), "a": pa.array([2], pa.int16()), "s": ["p"]}),
                      "id")
    repo.branches.create("decl")
    repo.branches.create("drop")
    repo.drop_columns("t", ["a"], branch="drop")
    repo.set_derived("t", "s", inputs=["a"], branch="decl")
    assert cherry_pick("decl", "drop", repo=repo, dry_run=True).status == "up-to-date"
    assert cherry_pick("decl", "drop", repo=repo).commit is None
    assert repo.derived("t", ref="drop") == {}
    result = merge("decl", "drop", repo=repo)
    assert result.status == "merged" and result.commit.tables["t"].derived == ()


def test_a_virtual_base_carries_the_merged_checks(tmp_path):
    """Found by the model: a criss-cross merge's virtual base carried the bases' rows but not their
    checks, so a check dest had removed came back from a source that merely still had it."""
    repo = M.trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([1], pa.int64())}), "id")
    repo.branches.create("p")
    repo.branches.create("q")
    repo.checks.add("no_t4", "t", "SELECT * FROM t WHERE id = 4", branch="p")
    p1 = repo.resolve("p").id
    repo.upsert("t", pa.table({"id": pa.array([2], pa.int64()), "v": pa.array([2], pa.int64())}), branch="q")
    q1 = repo.resolve("q").id
    merge(q1, "p", repo=repo)  # criss-cross: each side merges the other's first commit
    merge(p1, "q", repo=repo)
    repo.checks.remove("no_t4", branch="p")  # dest removes the check...
    repo.upsert("t", pa.table({"id": pa.array([3], pa.int64()), "v": pa.array([3], pa.int64())}), branch="q")
    result = merge("q", "p", repo=repo)  # ...the source still has it, as both bases merged have
    assert result.virtual_base and result.status == "merged"
    assert [c.name for c in repo.checks.list("p")] == []
    assert sorted(r["id"] for r in repo.read("t", ref="p").to_pylist()) == [1, 2, 3]
