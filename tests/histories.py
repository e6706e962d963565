"""Random multi-branch histories built from every kind of write, for differential tests.

A history is plain data — a list of ``(kind, branch_index, seed)``, e.g. from
:func:`random_operations` — and every detail of an operation (which keys, values, columns, commits) is drawn from
``random.Random(seed)`` against the repository's state at that point. :class:`HistoryBuilder`
applies it to a fresh repository and records each operation as a line of Python, so a failure
can print a standalone script that rebuilds the same history (``builder.script()``).

Two tables: ``t`` (key ``id`` int32; string, int32 and float columns with NaN, -0.0 and nulls) and
``u`` (composite key ``k1`` int64, ``k2`` string; a string and a list column). Operations a repository legitimately refuses (a
widening it does not allow, a conflict a strategy cannot settle, a missing key) are skipped and
counted in ``builder.refused``; any other exception propagates."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Sequence

import pyarrow as pa

import trimerge
from trimerge.lineage.errors import (AlreadyExistsError, InvalidOperationError, PrimaryKeyError,
                                     SchemaMismatchError, TableNotFoundError)
from trimerge.merge import cherry_pick, merge, rebase, revert
from trimerge.merge.result import MergeConflictError

# What a repository may refuse on a well-formed random call (the message says why); nothing else.
REFUSALS = (InvalidOperationError, SchemaMismatchError, PrimaryKeyError, MergeConflictError, TableNotFoundError,
            AlreadyExistsError)

BASE_SCHEMAS = {
    "t": pa.schema([("id", pa.int32()), ("s", pa.string()), ("n", pa.int32()), ("f", pa.float64())]),
    # the list column is on the composite-key table: updates there join on two key columns
    "u": pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.string()), ("l", pa.list_(pa.int64()))]),
}
KEYS = {"t": ["id"], "u": ["k1", "k2"]}
KEY_VALUES = {"t": [(i,) for i in range(13)], "u": [(i, g) for i in range(6) for g in ("p", "q")]}
# Columns add_column may add: new ones, and the base columns again once dropped (same or a wider type).
EXTRA_COLUMNS = [("x", pa.int64()), ("y", pa.string())]
WIDER = {pa.int8(): pa.int16(), pa.int16(): pa.int32(), pa.int32(): pa.int64(), pa.float32(): pa.float64(),
         pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}
STRATEGIES = ("source-wins", "dest-wins")
WRITES = ("auto", "columns", "rows")  # how updates write (trimerge.lineage.tables.columnwrites)

# Each kind once per line; weights by repetition.
KINDS = (["upsert"] * 4 + ["update"] * 2 + ["delete"] * 2 + ["delete_keys", "append", "overwrite", "rewrite",
         "compact", "add_column", "drop_column", "widen", "fill_column", "backfill"] + ["revert"] * 2 + ["cherry_pick"] + ["merge"] * 3
         + ["crisscross", "drop_table", "create_table", "recreate", "branch", "multi"]
         + ["reset", "restore", "rebase", "squash", "merge_tables"])  # history editing (issue 30)
MAX_BRANCHES = 5

NAN = float("nan")


def random_operations(seed: int, n: int) -> list[tuple[str, int, int]]:
    """``n`` operations drawn from ``KINDS`` (with its weights); a shorter ``n`` gives a prefix."""
    rng = random.Random(seed)
    return [(rng.choice(KINDS), rng.randrange(MAX_BRANCHES), rng.randrange(2**32)) for _ in range(n)]


def value_for(rng: random.Random, t: pa.DataType) -> Any:
    """A small random value of type ``t`` (nulls, NaN, -0.0 and empty values included)."""
    if pa.types.is_integer(t):
        return rng.choice([None, 0, 1, 2, 3, -1] if pa.types.is_signed_integer(t) else [None, 0, 1, 2, 3])
    if pa.types.is_floating(t):
        return rng.choice([None, 0.0, -0.0, 1.5, -2.25, NAN])
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return rng.choice([None, "", "a", "b", "ab"])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return rng.choice([None, [], [1], [1, None], [2, 3]])
    raise AssertionError(f"no values for {t}")


def type_code(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"pa.list_({type_code(t.value_type)})"
    if pa.types.is_large_list(t):
        return f"pa.large_list({type_code(t.value_type)})"
    names = {pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64",
             pa.uint8(): "uint8", pa.uint16(): "uint16", pa.uint32(): "uint32", pa.uint64(): "uint64",
             pa.float32(): "float32", pa.float64(): "float64", pa.string(): "string",
             pa.large_string(): "large_string", pa.binary(): "binary", pa.large_binary(): "large_binary"}
    return f"pa.{names[t]}()"


def schema_code(schema: pa.Schema) -> str:
    return "pa.schema([" + ", ".join(f"({f.name!r}, {type_code(f.type)})" for f in schema) + "])"


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` without metadata and nullability: what input tables are built with."""
    return pa.schema([pa.field(f.name, f.type) for f in schema])


def table_code(rows: list[dict], schema: pa.Schema) -> str:
    return f"pa.Table.from_pylist({rows!r}, schema={schema_code(schema)})"


#: Upkeep settings that make tiny tables take the keyed-write and auto-compaction paths.
UPKEEP_EAGER = {"index.key_min_rows": 5, "compaction.max_small_fragments": 3}


class HistoryBuilder:
    """Applies a history to a fresh repository at ``path``; records a script that does the same."""

    def __init__(self, path: str, init_seed: int = 0):
        self.repo = trimerge.Repository.init(path)
        self.branches = ["main"]
        self.names: dict[str, str] = {}  # commit id -> variable of the script
        self.lines: list[str] = []
        self.applied: Counter = Counter()  # kind -> operations that published (or tried to)
        self.refused: Counter = Counter()  # (kind, error type) -> count
        if init_seed % 2:  # every other history: keyed writes through the key index, eager compaction
            for name, value in UPKEEP_EAGER.items():
                self.repo.settings.set(name, value)
                self.emit(f"repo.settings.set({name!r}, {value!r})")
        self.tips = {"main": self.repo.resolve("main").id}
        self._name_new_commits()
        rng = random.Random(init_seed)
        self._create(rng, "t", "main", min_rows=6, chunks=2)
        self._create(rng, "u", "main", min_rows=4, chunks=1)
        self._branch(rng, "b1", "main")

    # ---------------------------------------------------------------- script
    def emit(self, line: str) -> None:
        self.lines.append(line)

    def ref(self, commit_id: str) -> str:
        """The script's variable for a commit; a commit no tip ever was (one a rebase replayed
        on the way) by an expression that finds it in the rebuilt history by message."""
        if commit_id in self.names:
            return self.names[commit_id]
        message = self.repo.commit(commit_id).message
        return f"next(c.id for c in repo.all_commits() if c.message == {message!r})"

    def script(self) -> str:
        head = ["import pyarrow as pa", "import trimerge", "from trimerge.diff import diff",
                "from trimerge.merge import merge, revert, cherry_pick, rebase", "nan = float('nan')",
                "repo = trimerge.Repository.init('repro-repo')"]
        return "\n".join(head + self.lines)

    def _name_new_commits(self) -> None:
        for b in self.branches:
            tip = self.repo.resolve(b).id
            self.tips[b] = tip
            if tip not in self.names:
                var = f"c{len(self.names)}"
                self.names[tip] = var
                self.emit(f"{var} = repo.resolve({b!r}).id")
        self._mark = len(self.lines)  # what came before published: a refusal later comments out less

    # ---------------------------------------------------------------- state
    def current(self, table: str, branch: str) -> pa.Table:
        return self.repo.read(table, ref=branch)

    def tables_on(self, branch: str) -> list[str]:
        return sorted(self.repo.resolve(branch).tables)

    def commits(self) -> list[trimerge.lineage.commit.Commit]:
        return self.repo.all_commits()

    def random_row(self, rng: random.Random, table: str, key: tuple, schema: pa.Schema) -> dict:
        row = dict(zip(KEYS[table], key))
        for f in schema:
            if f.name not in row:
                row[f.name] = value_for(rng, f.type)
        return row

    @staticmethod
    def key_of(table: str, row: dict) -> tuple:
        return tuple(row[k] for k in KEYS[table])

    def key_predicate(self, table: str, keys: Sequence[tuple]) -> str:
        if table == "t":
            return "id IN (" + ", ".join(str(k[0]) for k in keys) + ")"
        return " OR ".join(f"(k1 = {a} AND k2 = '{b}')" for a, b in keys)

    def new_rows(self, rng: random.Random, table: str, branch: str, n: int, *, mutate_existing: float = 0.4,
                 keys: Sequence[tuple] | None = None) -> tuple[list[dict], pa.Schema]:
        """Rows for ``n`` random keys fitting the branch's current schema: new rows, existing rows
        with a few values changed, or existing rows unchanged (a no-op for upsert)."""
        cur = self.current(table, branch)
        schema = plain_schema(cur.schema)
        existing = {self.key_of(table, r): r for r in cur.to_pylist()}
        if keys is None:
            keys = rng.sample(KEY_VALUES[table], min(n, len(KEY_VALUES[table])))
        rows = []
        values = [f for f in schema if f.name not in KEYS[table]]
        for k in keys:
            if k in existing and rng.random() < mutate_existing:
                r = dict(existing[k])
                for f in rng.sample(values, rng.randint(0, min(2, len(values)))):
                    r[f.name] = value_for(rng, f.type)
            else:
                r = self.random_row(rng, table, k, schema)
            rows.append(r)
        return rows, schema

    # ---------------------------------------------------------------- operations
    def apply(self, kind: str, branch_index: int, seed: int) -> None:
        rng = random.Random(seed)
        branch = self.branches[branch_index % len(self.branches)]
        tables = self.tables_on(branch)
        table = rng.choice(tables) if tables else None
        if table is None and kind not in ("merge", "crisscross", "revert", "cherry_pick", "branch", "reset", "rebase",
                                          "squash", "merge_tables"):
            kind = "create_table"
        self._mark = len(self.lines)
        try:
            getattr(self, f"op_{kind}")(rng, branch, table)
            self.applied[kind] += 1
        except REFUSALS as exc:
            self.refused[(kind, type(exc).__name__)] += 1
            self.emit(f"# (refused: {type(exc).__name__}: {str(exc)[:150]})")
            self.lines[self._mark:] = ["# " + line if not line.startswith("#") else line
                                       for line in self.lines[self._mark:]]
        self._name_new_commits()

    def _create(self, rng: random.Random, table: str, branch: str, min_rows: int = 3, chunks: int = 1) -> None:
        schema = BASE_SCHEMAS[table]
        keys = sorted(rng.sample(KEY_VALUES[table], rng.randint(min_rows, len(KEY_VALUES[table]) - 3)))
        rows = [self.random_row(rng, table, k, schema) for k in keys]
        size = -(-len(rows) // chunks)
        parts = [rows[i:i + size] for i in range(0, len(rows), size)]
        self.emit(f"repo.create_table({table!r}, {table_code(parts[0], schema)}, primary_key={KEYS[table]!r}, "
                  f"branch={branch!r})")
        self.repo.create_table(table, pa.Table.from_pylist(parts[0], schema=schema), primary_key=KEYS[table],
                               branch=branch)
        self._name_new_commits()
        for part in parts[1:]:  # several appends: several fragments
            self.emit(f"repo.append({table!r}, {table_code(part, schema)}, branch={branch!r})")
            self.repo.append(table, pa.Table.from_pylist(part, schema=schema), branch=branch)
            self._name_new_commits()

    def _branch(self, rng: random.Random, name: str, from_id: str) -> None:
        from_ref = self.ref(self.repo.resolve(from_id).id)
        self.emit(f"repo.branches.create({name!r}, from_ref={from_ref})")
        self.repo.branches.create(name, from_ref=self.repo.resolve(from_id).id)
        self.branches.append(name)
        self.tips[name] = self.repo.resolve(name).id

    def op_upsert(self, rng, branch, table):
        rows, schema = self.new_rows(rng, table, branch, rng.randint(1, 4))
        self.emit(f"repo.upsert({table!r}, {table_code(rows, schema)}, branch={branch!r})")
        self.repo.upsert(table, pa.Table.from_pylist(rows, schema=schema), branch=branch)

    def op_append(self, rng, branch, table):
        cur = self.current(table, branch)
        present = {self.key_of(table, r) for r in cur.to_pylist()}
        free = [k for k in KEY_VALUES[table] if k not in present]
        if not free:
            return self.op_upsert(rng, branch, table)
        rows, schema = self.new_rows(rng, table, branch, 0, keys=rng.sample(free, min(len(free), rng.randint(1, 3))))
        self.emit(f"repo.append({table!r}, {table_code(rows, schema)}, branch={branch!r})")
        self.repo.append(table, pa.Table.from_pylist(rows, schema=schema), branch=branch)

    def op_update(self, rng, branch, table):
        cur = self.current(table, branch)
        existing = cur.to_pylist()
        values = [f for f in plain_schema(cur.schema) if f.name not in KEYS[table]]
        if not existing or not values:
            return self.op_upsert(rng, branch, table)
        cols = rng.sample(values, rng.randint(1, len(values)))
        schema = pa.schema([pa.field(k, cur.schema.field(k).type) for k in KEYS[table]] + cols)
        rows = []
        for r in rng.sample(existing, min(len(existing), rng.randint(1, 3))):
            rows.append({**{k: r[k] for k in KEYS[table]}, **{f.name: value_for(rng, f.type) for f in cols}})
        write = rng.choice(WRITES)
        self.emit(f"repo.update({table!r}, {table_code(rows, schema)}, write={write!r}, branch={branch!r})")
        self.repo.update(table, pa.Table.from_pylist(rows, schema=schema), write=write, branch=branch)

    def op_backfill(self, rng, branch, table):
        """One column of every row rewritten (a recomputed feature), as column files or as rows."""
        cur = self.current(table, branch)
        values = [f for f in plain_schema(cur.schema) if f.name not in KEYS[table]]
        if not cur.num_rows or not values:
            return self.op_upsert(rng, branch, table)
        col = rng.choice(values)
        rows = [{**{k: r[k] for k in KEYS[table]}, col.name: value_for(rng, col.type)} for r in cur.to_pylist()]
        schema = pa.schema([pa.field(k, cur.schema.field(k).type) for k in KEYS[table]] + [col])
        write = rng.choice(WRITES)
        self.emit(f"repo.update({table!r}, {table_code(rows, schema)}, write={write!r}, branch={branch!r})")
        self.repo.update(table, pa.Table.from_pylist(rows, schema=schema), write=write, branch=branch)

    def op_fill_column(self, rng, branch, table):
        """A new column filled for some rows (key + values): only the column is written."""
        cur = self.current(table, branch)
        names = {n.lower() for n in cur.schema.names}
        pool = [(n, t) for n, t in EXTRA_COLUMNS if n.lower() not in names]
        if not pool or not cur.num_rows:
            return self.op_add_column(rng, branch, table)
        name, t = rng.choice(pool)
        existing = cur.to_pylist()
        rows = [{**{k: r[k] for k in KEYS[table]}, name: value_for(rng, t)}
                for r in rng.sample(existing, rng.randint(1, len(existing)))]
        schema = pa.schema([pa.field(k, cur.schema.field(k).type) for k in KEYS[table]] + [pa.field(name, t)])
        self.emit(f"repo.add_columns({table!r}, {table_code(rows, schema)}, branch={branch!r})")
        self.repo.add_columns(table, pa.Table.from_pylist(rows, schema=schema), branch=branch)

    def op_delete(self, rng, branch, table):
        cur = self.current(table, branch)
        names = cur.schema.names
        choice = rng.random()
        if choice < 0.5:
            where = self.key_predicate(table, rng.sample(KEY_VALUES[table], rng.randint(1, 3)))
        else:
            preds = []
            if table == "t":
                preds += ["id >= 9", "id < 2"]
            else:
                preds += ["k1 >= 4", "k2 = 'q' AND k1 < 2"]
            for c, p in (("s", "s = 'a'"), ("n", "n = 1"), ("f", "f IS NULL"), ("v", "v = 'b'"), ("x", "x = 2"),
                         ("y", "y IS NOT NULL AND y = 'ab'")):
                if c in names:
                    preds.append(p)
            where = rng.choice(preds)
        self.emit(f"repo.delete({table!r}, {where!r}, branch={branch!r})")
        self.repo.delete(table, where, branch=branch)

    def op_delete_keys(self, rng, branch, table):
        keys = rng.sample(KEY_VALUES[table], rng.randint(1, 3))
        schema = plain_schema(self.current(table, branch).schema)
        kschema = pa.schema([schema.field(k) for k in KEYS[table]])
        rows = [dict(zip(KEYS[table], k)) for k in keys]
        self.emit(f"repo.delete_keys({table!r}, {table_code(rows, kschema)}, branch={branch!r})")
        self.repo.delete_keys(table, pa.Table.from_pylist(rows, schema=kschema), branch=branch)

    def op_overwrite(self, rng, branch, table):
        """New content: some rows kept, some changed, some new; sometimes with another schema."""
        cur = self.current(table, branch)
        keys = rng.sample(KEY_VALUES[table], rng.randint(2, len(KEY_VALUES[table]) - 2))
        rows, schema = self.new_rows(rng, table, branch, 0, keys=sorted(keys), mutate_existing=0.7)
        shape = rng.random()
        values = [f.name for f in schema if f.name not in KEYS[table]]
        if shape < 0.15 and len(values) > 1:  # one column fewer
            gone = rng.choice(values)
            schema = pa.schema([f for f in schema if f.name != gone])
            rows = [{k: v for k, v in r.items() if k != gone} for r in rows]
        elif shape < 0.3 and "z" not in cur.schema.names and "Z" not in cur.schema.names:  # one column more
            schema = schema.append(pa.field("z", pa.int64()))
            rows = [{**r, "z": value_for(rng, pa.int64())} for r in rows]
        self.emit(f"repo.overwrite({table!r}, {table_code(rows, schema)}, branch={branch!r})")
        self.repo.overwrite(table, pa.Table.from_pylist(rows, schema=schema), branch=branch)

    def op_rewrite(self, rng, branch, table):
        """Overwrite with the same rows: every row id changes, no value does."""
        self.emit(f"repo.overwrite({table!r}, repo.read({table!r}, ref={branch!r}), branch={branch!r})")
        self.repo.overwrite(table, self.current(table, branch), branch=branch)

    def op_compact(self, rng, branch, table):
        self.emit(f"repo.compact({table!r}, branch={branch!r})")
        self.repo.compact(table, branch=branch)

    def op_add_column(self, rng, branch, table):
        names = {n.lower() for n in self.current(table, branch).schema.names}
        pool = [(f.name, f.type) for f in BASE_SCHEMAS[table] if f.name not in KEYS[table]]
        pool += [(n, WIDER[t]) for n, t in pool if t in WIDER]
        pool += EXTRA_COLUMNS
        pool = [(n, t) for n, t in pool if n.lower() not in names]
        if not pool:
            return self.op_drop_column(rng, branch, table)
        name, t = rng.choice(pool)
        self.emit(f"repo.add_columns({table!r}, pa.field({name!r}, {type_code(t)}), branch={branch!r})")
        self.repo.add_columns(table, pa.field(name, t), branch=branch)

    def op_drop_column(self, rng, branch, table):
        values = [n for n in self.current(table, branch).schema.names if n not in KEYS[table]]
        if len(values) < 2:
            return self.op_add_column(rng, branch, table)
        gone = rng.choice(values)
        self.emit(f"repo.drop_columns({table!r}, [{gone!r}], branch={branch!r})")
        self.repo.drop_columns(table, [gone], branch=branch)

    def op_widen(self, rng, branch, table):
        schema = self.current(table, branch).schema
        options = [(f.name, WIDER[f.type]) for f in schema if f.type in WIDER]
        if not options:
            return self.op_upsert(rng, branch, table)
        col, t = rng.choice(options)
        self.emit(f"repo.alter_column({table!r}, {col!r}, {type_code(t)}, branch={branch!r})")
        self.repo.alter_column(table, col, t, branch=branch)

    def op_revert(self, rng, branch, table):
        candidates = [c for c in self.repo.log(branch) if c.parents]
        if not candidates:
            return
        commit = rng.choice(candidates[:6])  # mostly recent ones, as people do
        strategy = rng.choice(STRATEGIES)
        self.emit(f"revert({self.ref(commit.id)}, {branch!r}, repo=repo, strategy={strategy!r})")
        revert(commit.id, branch, repo=self.repo, strategy=strategy)

    def op_cherry_pick(self, rng, branch, table):
        mine = {c.id for c in self.repo.log(branch)}
        candidates = [c for c in self.commits() if c.id not in mine and c.parents and c.id in self.names]
        if not candidates:
            return
        commit = rng.choice(candidates)
        strategy = rng.choice(STRATEGIES)
        self.emit(f"cherry_pick({self.ref(commit.id)}, {branch!r}, repo=repo, strategy={strategy!r})")
        cherry_pick(commit.id, branch, repo=self.repo, strategy=strategy)

    def op_merge(self, rng, branch, table):
        others = [b for b in self.branches if b != branch]
        if not others:
            return
        other = rng.choice(others)
        if rng.random() < 0.6:
            source = self.repo.resolve(other).id
        else:  # an older commit of the other branch: later merges meet several merge bases
            mine = {c.id for c in self.repo.log(branch)}
            news = [c for c in self.repo.log(other) if c.id not in mine][:5]
            source = rng.choice(news).id if news else self.repo.resolve(other).id
        strategy = rng.choice(STRATEGIES)
        self.emit(f"merge({self.ref(source)}, {branch!r}, repo=repo, strategy={strategy!r})")
        merge(source, branch, repo=self.repo, strategy=strategy)

    def op_reset(self, rng, branch, table):
        """Move the branch back (or, every third time, undo its last move through the reflog)."""
        if rng.random() < 0.34 and len(self.repo.reflog(branch)) > 1:
            target = f"{branch}@{{1}}"
            self.emit(f"repo.branches.reset({branch!r}, {target!r})")
        else:
            older = self.repo.log(branch)[1:6]
            if not older:
                return
            target = rng.choice(older).id
            self.emit(f"repo.branches.reset({branch!r}, {self.ref(target)})")
        self.repo.branches.reset(branch, target)

    def op_restore(self, rng, branch, table):
        """One table back to an older commit's state (or dropped, if it did not exist there)."""
        older = self.repo.log(branch)[1:8]
        if not older:
            return
        at = rng.choice(older).id
        self.emit(f"repo.restore({table!r}, {self.ref(at)}, branch={branch!r})")
        self.repo.restore(table, at, branch=branch)

    def op_rebase(self, rng, branch, table):
        others = [b for b in self.branches if b != branch]
        if not others:
            return
        onto = rng.choice(others)
        strategy = rng.choice(STRATEGIES)
        self.emit(f"rebase({branch!r}, {onto!r}, repo=repo, strategy={strategy!r}, skip_merges=True)")
        rebase(branch, onto, repo=self.repo, strategy=strategy, skip_merges=True)

    def op_squash(self, rng, branch, table):
        others = [b for b in self.branches if b != branch]
        if not others:
            return
        other = rng.choice(others)
        strategy = rng.choice(STRATEGIES)
        self.emit(f"merge({other!r}, {branch!r}, repo=repo, strategy={strategy!r}, squash=True)")
        merge(other, branch, repo=self.repo, strategy=strategy, squash=True)

    def op_merge_tables(self, rng, branch, table):
        others = [b for b in self.branches if b != branch]
        if not others:
            return
        other = rng.choice(others)
        names = sorted(set(self.tables_on(branch)) | set(self.tables_on(other)))
        picked = rng.sample(names, 1) if names else []
        if not picked:
            return
        strategy = rng.choice(STRATEGIES)
        self.emit(f"merge({other!r}, {branch!r}, repo=repo, strategy={strategy!r}, tables={picked!r})")
        merge(other, branch, repo=self.repo, strategy=strategy, tables=picked)

    def op_crisscross(self, rng, branch, table):
        """Each branch merges the other's tip as it was: the next merge between them has two bases."""
        others = [b for b in self.branches if b != branch]
        if not others:
            return
        other = rng.choice(others)
        for b in (branch, other):  # both sides have a commit of their own
            tables = self.tables_on(b)
            if tables:
                self.op_upsert(rng, b, rng.choice(tables))
                self._name_new_commits()
        mine, theirs = self.repo.resolve(branch).id, self.repo.resolve(other).id
        s1, s2, s3 = (rng.choice(STRATEGIES) for _ in range(3))
        self.emit(f"merge({self.ref(theirs)}, {branch!r}, repo=repo, strategy={s1!r})")
        merge(theirs, branch, repo=self.repo, strategy=s1)
        self._name_new_commits()
        self.emit(f"merge({self.ref(mine)}, {other!r}, repo=repo, strategy={s2!r})")
        merge(mine, other, repo=self.repo, strategy=s2)
        self._name_new_commits()
        if rng.random() < 0.85:  # both sides move on, then merge again: through a virtual base
            for b in (branch, other):
                tables = self.tables_on(b)
                if tables:
                    self.op_upsert(rng, b, rng.choice(tables))
                    self._name_new_commits()
            self.emit(f"merge({other!r}, {branch!r}, repo=repo, strategy={s3!r})")
            merge(other, branch, repo=self.repo, strategy=s3)

    def op_drop_table(self, rng, branch, table):
        self.emit(f"repo.drop_table({table!r}, branch={branch!r})")
        self.repo.drop_table(table, branch=branch)

    def op_create_table(self, rng, branch, table):
        missing = [t for t in BASE_SCHEMAS if t not in self.tables_on(branch)]
        if not missing:
            return self.op_recreate(rng, branch, table)
        self._create(rng, rng.choice(missing), branch)

    def op_recreate(self, rng, branch, table):
        """Drop and create under the same name in one commit: a new dataset (compared in full)."""
        if rng.random() < 0.5:
            rows, schema = self.new_rows(rng, table, branch, 0, keys=sorted(
                rng.sample(KEY_VALUES[table], rng.randint(3, 9))), mutate_existing=0.8)
        else:
            cur = self.current(table, branch)
            rows, schema = cur.to_pylist(), plain_schema(cur.schema)
        self.emit(f"with repo.transaction(branch={branch!r}) as tx:")
        self.emit(f"    tx.drop_table({table!r})")
        self.emit(f"    tx.create_table({table!r}, {table_code(rows, schema)}, primary_key={KEYS[table]!r})")
        with self.repo.transaction(branch=branch) as tx:
            tx.drop_table(table)
            tx.create_table(table, pa.Table.from_pylist(rows, schema=schema), primary_key=KEYS[table])

    def op_branch(self, rng, branch, table):
        if len(self.branches) >= MAX_BRANCHES:
            return self.op_merge(rng, branch, table)
        start = rng.choice(self.repo.log(branch)[:6])
        self._branch(rng, f"b{len(self.branches)}", start.id)

    def op_multi(self, rng, branch, table):
        """Two writes in one commit (two Lance versions behind one commit)."""
        other = [t for t in self.tables_on(branch) if t != table]
        second = other[0] if other and rng.random() < 0.5 else table
        rows, schema = self.new_rows(rng, table, branch, rng.randint(1, 3))
        keys = rng.sample(KEY_VALUES[second], rng.randint(1, 2))
        where = self.key_predicate(second, keys)
        self.emit(f"with repo.transaction(branch={branch!r}) as tx:")
        self.emit(f"    tx.upsert({table!r}, {table_code(rows, schema)})")
        self.emit(f"    tx.delete({second!r}, {where!r})")
        with self.repo.transaction(branch=branch) as tx:
            tx.upsert(table, pa.Table.from_pylist(rows, schema=schema))
            tx.delete(second, where)
