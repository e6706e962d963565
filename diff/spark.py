"""Spark execution of table diffs (PySpark, no JVM connector needed).

The driver executes the same candidate plan as the local engine (:mod:`trimerge.diff.planner`,
its fragment form: identical fragments skipped, fragments that differ only in their deletion
vector reduced to the row ids whose deletion state differs, other fragments read, sliced when
large) by shipping small JSON tasks to executors,
which read with pylance (``diff/spark_tasks.py``). Spark then joins both sides by primary key and
compares values null-safely, producing the same schema and rows as the local ``rows()``.

Both snapshots are pinned with Lance tags ``p-<ulid>`` for the duration of a job so cleanup cannot
remove them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import sys
import warnings
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import lance
import pyarrow as pa
from ulid import ULID

from trimerge.diff import columns as column_pairs
from trimerge.diff.rules import change_kind_spark, same_values_spark
from trimerge.diff.planner import set_minus, stable_row_ids
from trimerge.lineage.errors import TrimergeError

if TYPE_CHECKING:
    from trimerge.diff.engine import TableDiff
    from trimerge.diff.planner import Snapshot

#: Planned candidate rows above which ``engine="auto"`` hands a table's diff to Spark. Chosen from
#: the crossover measured by ``benchmarks/bench_spark.py`` on a 2-core machine (see README).
ROWS_PER_TASK = 1_000_000  # fragment slice size
IDS_PER_TASK = 200_000


#: Planned rows up to which trimerge's own Spark work runs as one job per action (see
#: :func:`small_jobs`); above, the session's settings apply unchanged.
SMALL_ROWS = 2_000_000
ROWS_PER_PARTITION = 250_000  # shuffle partitions of a small job: one per this many planned rows


class SparkUnavailableError(TrimergeError):
    """PySpark or Java is missing, or no Spark session could be started."""


@contextmanager
def small_jobs(spark: Any, rows: int) -> Iterator[None]:
    """Plan and run the frames made inside as few Spark jobs as the work allows when ``rows``
    (planned candidate rows) is small: adaptive execution off (it submits every shuffle stage as
    a job of its own and re-plans between them), broadcast joins off (collecting the small side is
    a job too) and one shuffle partition per :data:`ROWS_PER_PARTITION` planned rows (at most the
    session's own number). A diff or merge of a few rows then costs a handful of jobs, not ~20.
    Persisted frames keep the plan they were made with. The session's settings are restored on
    exit; above :data:`SMALL_ROWS` nothing changes."""
    if rows > SMALL_ROWS:
        yield
        return
    conf = spark.conf
    partitions = max(1, -(-rows // ROWS_PER_PARTITION))
    with contextlib.suppress(TypeError, ValueError):  # never more than the session's own number
        partitions = max(1, min(partitions, int(conf.get("spark.sql.shuffle.partitions"))))
    tuned = {"spark.sql.adaptive.enabled": "false", "spark.sql.autoBroadcastJoinThreshold": "-1",
             "spark.sql.shuffle.partitions": str(partitions)}
    saved = {k: conf.get(k, None) for k in tuned}
    for k, v in tuned.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)



@contextlib.contextmanager
def _jvm_stderr_silenced():
    """Start the JVM with stderr on /dev/null: it inherits that for its life, so Spark's and Java's
    log lines never reach the terminal. Python's own stderr is restored right after."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _quiet() -> None:
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    warnings.filterwarnings("ignore", category=UserWarning, module="pyspark")
    warnings.filterwarnings("ignore", message="lance is not fork-safe")


def get_spark(master: str | None = None, memory: str | None = None, *, verbose: bool = False):
    """An existing active SparkSession, or a new one configured for trimerge.

    Sets ``PYSPARK_PYTHON`` to this interpreter (executors need pylance and pyarrow) and gives a
    clear error when PySpark or Java is missing. Unless ``verbose``, the JVM's own log lines (start-up
    banners, warnings) are kept off stderr; failures still come back as Python errors."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailableError("PySpark is not installed: pip install 'trimerge[spark]'") from None
    _quiet()
    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SparkUnavailableError("Java is not installed (Spark needs Java 17+): install a JDK or set JAVA_HOME")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName("trimerge-diff").master(master or os.environ.get("TRIMERGE_SPARK_MASTER", "local[*]"))
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(max(2, 2 * (os.cpu_count() or 2))))
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
               .config("spark.python.worker.reuse", "true")
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"))
    if memory:
        builder = builder.config("spark.driver.memory", memory).config("spark.executor.memory", memory)
    for name, value in os.environ.items():
        # Object-store credentials and endpoints reach executors on other machines too.
        if name.startswith(("AWS_", "AZURE_", "GOOGLE_")):
            builder = builder.config(f"spark.executorEnv.{name}", value)
    try:
        with contextlib.nullcontext() if verbose else _jvm_stderr_silenced():
            session = builder.getOrCreate()
    except Exception as exc:  # the JVM failed to start
        raise SparkUnavailableError(f"could not start Spark: {str(exc).splitlines()[0]}") from None
    session.sparkContext.setLogLevel("ERROR")
    return session


# ------------------------------------------------------------------------------------------ planning
def _task_base(snap: "Snapshot") -> dict:
    """Where an executor reads one side: the dataset URI, the pinned version and the storage options
    (credentials and endpoint travel with the task, so executors need no configuration of their own)."""
    return {"path": snap.repo.dataset_path(snap.tv), "lance_branch": snap.tv.lance_branch, "version": snap.tv.version,
            "storage_options": snap.repo.table_store.options}


def _side_tasks_full(snap: "Snapshot", fragments: list) -> list[dict]:
    if not fragments:  # also a side the table is missing from (added or dropped)
        return []
    tasks = []
    base = _task_base(snap)
    for frag in fragments:
        n = frag.physical_rows
        if n <= ROWS_PER_TASK:
            tasks.append({**base, "mode": "fragment", "fragment": frag.fragment_id})
        else:
            for off in range(0, n, ROWS_PER_TASK):
                tasks.append({**base, "mode": "fragment", "fragment": frag.fragment_id, "offset": off,
                              "limit": ROWS_PER_TASK})
    return tasks


def _side_tasks_rows(snap: "Snapshot", ids: pa.Array) -> list[dict]:
    base = _task_base(snap)
    # Ids travel as base64 of their 8-byte little-endian form: a Python list of millions of ints
    # cost the driver ~50 bytes an id.
    ids = ids.cast(pa.uint64())
    return [{**base, "mode": "rows", "row_ids_b64": base64.b64encode(ids.slice(i, IDS_PER_TASK).to_numpy().tobytes())
             .decode("ascii")} for i in range(0, len(ids), IDS_PER_TASK)]


def plan_tasks(td: "TableDiff") -> tuple[list[dict], list[dict]]:
    """(before tasks, after tasks): the table's candidate plan as executor tasks. Spark reads the
    fragment plan (a delta is read on the driver by pylance, so it is not worth a job)."""
    b, a = td.before_snapshot, td.after_snapshot
    plan = td.candidate_plan
    if plan.method == "none":
        return [], []
    ids_b, ids_a = [], []
    for frag_b, frag_a in plan.deletion_pairs:
        rb, ra = stable_row_ids(b, frag_b), stable_row_ids(a, frag_a)
        ids_b.append(set_minus(rb, ra))
        ids_a.append(set_minus(ra, rb))
    key, common, added = td.compared_columns()
    for pair in plan.column_pairs:  # compared on the driver through their changed columns only
        pb, pa_ = column_pairs.row_ids(column_pairs.compare_pair(b, a, pair, key, common, added))
        ids_b.append(pb)
        ids_a.append(pa_)
    before = _side_tasks_full(b, plan.read_before) + (_side_tasks_rows(b, pa.concat_arrays(ids_b)) if ids_b else [])
    after = _side_tasks_full(a, plan.read_after) + (_side_tasks_rows(a, pa.concat_arrays(ids_a)) if ids_a else [])
    return before, after


@contextmanager
def pinned(td: "TableDiff") -> Iterator[None]:
    """Lance tags on both snapshots while a Spark job reads them."""
    pins = []
    for snap in (td.before_snapshot, td.after_snapshot):
        if snap.tv is None:
            continue
        ds = snap.repo.table_store.dataset(snap.tv.dataset)
        name = f"p-{str(ULID()).lower()}"
        ds.tags.create(name, (snap.tv.lance_branch, snap.tv.version))
        pins.append((ds, name))
    try:
        yield
    finally:
        for ds, name in pins:
            try:
                ds.tags.delete(name)
            except Exception:  # removed by cleanup once old
                pass


# ------------------------------------------------------------------------------------------ execution
def _side_frame(spark, tasks: list[dict], schema: pa.Schema, rows: int = SMALL_ROWS + 1):
    """A DataFrame of one side's candidate rows, read by executors: one task per partition, or
    for a small diff (``rows`` planned rows, :func:`small_jobs`) one partition per
    :data:`ROWS_PER_PARTITION` rows reading its tasks in turn (each task costs a Python worker's turn)."""
    from pyspark import cloudpickle
    from pyspark.sql.pandas.types import from_arrow_schema

    from trimerge.diff import spark_tasks

    cloudpickle.register_pickle_by_value(spark_tasks)
    spark_schema = from_arrow_schema(schema)
    columns = schema.names
    texts = [(json.dumps(t),) for t in tasks]
    if not texts:
        return spark.createDataFrame([], spark_schema)
    slices = len(texts) if rows > SMALL_ROWS else max(1, min(len(texts), -(-rows // ROWS_PER_PARTITION)))
    # parallelize: the tasks reach their partitions without a shuffle
    frame = spark.createDataFrame(spark.sparkContext.parallelize(texts, slices), "task string")
    reader = spark_tasks.make_reader(columns, schema.serialize().to_pybytes())
    return frame.mapInArrow(reader, spark_schema)


def _spark_safe(schema: pa.Schema) -> pa.Schema:
    """Spark has no unsigned or large types; read them as the nearest signed/plain ones."""
    out = []
    for f in schema:
        t = f.type
        if pa.types.is_unsigned_integer(t):
            t = {8: pa.int16(), 16: pa.int32(), 32: pa.int64(), 64: pa.decimal128(20, 0)}[t.bit_width]
        out.append(f.with_type(t))
    return pa.schema(out)


ROW_ID = "_rowid"


def spark_frame(td: "TableDiff", spark, row_ids: bool = False) -> Any:
    """The table's changed rows as a Spark DataFrame (same columns as ``TableDiff.rows()``;
    ``row_ids``: as ``rows_with_row_ids()``, with each side's stable row id as a long)."""
    from pyspark.sql import functions as F

    key, common, added = td.compared_columns()
    b_schema = td.before_snapshot.schema if td.before_snapshot.tv else None
    a_schema = td.after_snapshot.schema if td.after_snapshot.tv else None
    before_tasks, after_tasks = plan_tasks(td)
    ref_schema = a_schema or b_schema
    b_schema = _spark_safe(b_schema or pa.schema([ref_schema.field(k) for k in key]))
    a_schema = _spark_safe(a_schema or pa.schema([ref_schema.field(k) for k in key]))
    bcols = [c for c in b_schema.names if c not in key]
    acols = [c for c in a_schema.names if c not in key]
    if row_ids:  # stable row ids stay below 2**63: a long holds them
        b_schema, a_schema = (s.append(pa.field(ROW_ID, pa.int64())) for s in (b_schema, a_schema))
    rows = td.candidate_plan.estimated_rows
    bdf = _side_frame(spark, before_tasks, b_schema, rows)
    adf = _side_frame(spark, after_tasks, a_schema, rows)
    ids_b = [F.col(ROW_ID).alias("__rid_b")] if row_ids else []
    ids_a = [F.col(ROW_ID).alias("__rid_a")] if row_ids else []
    bdf = bdf.select(*key, *[F.col(f"`{c}`").alias(f"b__{c}") for c in bcols], *ids_b, F.lit(True).alias("__in_b"))
    adf = adf.select(*key, *[F.col(f"`{c}`").alias(f"a__{c}") for c in acols], *ids_a, F.lit(True).alias("__in_a"))
    j = bdf.join(adf, on=key, how="full_outer")
    in_b = F.coalesce(F.col("__in_b"), F.lit(False))
    in_a = F.coalesce(F.col("__in_a"), F.lit(False))
    flags = []
    for c in common:
        same = same_values_spark(F.col(f"b__{c}"), F.col(f"a__{c}"), bdf.schema[f"b__{c}"].dataType,
                                 adf.schema[f"a__{c}"].dataType)
        flags.append(F.when(~same, F.lit(c)))
    for c in added:
        flags.append(F.when(F.col(f"a__{c}").isNotNull(), F.lit(c)))
    empty = F.array().cast("array<string>")
    changed = F.filter(F.array(*flags), lambda x: x.isNotNull()) if flags else empty
    before = F.when(in_b, F.struct(*[F.col(f"b__{c}").alias(c) for c in bcols])) if bcols else F.lit(None)
    after = F.when(in_a, F.struct(*[F.col(f"a__{c}").alias(c) for c in acols])) if acols else F.lit(None)
    ids = [F.col("__rid_b").alias("_before_rowid"), F.col("__rid_a").alias("_after_rowid")] if row_ids else []
    # One select, then the filter: each DataFrame step is a round trip and an analysis in the JVM.
    j = j.select(*key, change_kind_spark(in_b, in_a).alias("change"),
                 F.when(in_b & in_a, changed).otherwise(empty).alias("changed_columns"),
                 before.alias("before"), after.alias("after"), *ids)
    return j.filter((F.col("change") != "update") | (F.size("changed_columns") > 0))


def changes(td: "TableDiff", spark) -> Any:
    """The table's changed rows with row ids (:func:`spark_frame`), computed by the first job that
    needs them and then kept on the executors' disks, so counting, collecting and merging read the
    tables once. Freed by :func:`release`, or when the diff is garbage."""
    if td.spark_changes is None:
        from pyspark import StorageLevel

        td.spark_changes = spark_frame(td, spark, row_ids=True).persist(StorageLevel.DISK_ONLY)
        weakref.finalize(td, _unpersist, td.spark_changes)
    return td.spark_changes


def _unpersist(frame: Any) -> None:
    with contextlib.suppress(Exception):  # the session may be gone already
        frame.unpersist()


def release(td: "TableDiff") -> None:
    """Free the executors' copy of the table's changed rows."""
    if td.spark_changes is not None:
        _unpersist(td.spark_changes)
        td.spark_changes = None


_COUNTED: "weakref.WeakKeyDictionary[TableDiff, dict[str, tuple[int, int]]]" = weakref.WeakKeyDictionary()


def spark_counts(td: "TableDiff", spark) -> dict[str, tuple[int, int]]:
    """Per kind of change: (rows, changed cells), counted on Spark without collecting rows."""
    if td not in _COUNTED:
        count_together([td], spark)
    return _COUNTED.pop(td)


def count_together(tds: "list[TableDiff]", spark) -> None:
    """Count the changes of several Spark diffs in one job (a merge needs both of a table's diffs:
    counted apart they cost a job each). Each diff's changed rows are persisted by the same pass
    (:func:`changes`); :func:`spark_counts` then answers from what was counted here."""
    from pyspark.sql import functions as F

    tds = [td for td in tds if td not in _COUNTED]
    if not tds:
        return
    with contextlib.ExitStack() as stack:
        for td in tds:
            stack.enter_context(pinned(td))
        stack.enter_context(small_jobs(spark, sum(td.candidate_plan.estimated_rows for td in tds)))
        frames = [changes(td, spark).groupBy("change").agg(F.count(F.lit(1)).alias("rows"),
                                                          F.sum(F.size("changed_columns")).alias("cells"))
                  .withColumn("side", F.lit(i)) for i, td in enumerate(tds)]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        counted = union.collect()
    for i, td in enumerate(tds):
        _COUNTED[td] = {r["change"]: (int(r["rows"]), int(r["cells"] or 0)) for r in counted if r["side"] == i}


def spark_rows(td: "TableDiff", spark, schema: pa.Schema) -> pa.Table:
    """Run the table's diff on Spark and collect it as Arrow in ``schema`` (the local engine's, with
    or without the row id columns)."""
    with pinned(td), small_jobs(spark, td.candidate_plan.estimated_rows):
        table = changes(td, spark).toArrow()
    if table.num_rows == 0:
        return schema.empty_table()
    return table.select(schema.names).cast(schema).sort_by([(k, "ascending") for k in td.primary_key])


def write_lance(df, uri: str, storage_options: dict[str, str] | None = None) -> None:
    """Write a Spark DataFrame to a Lance dataset (a path or an object-store URI): executors write
    fragments, the driver commits once."""
    from pyspark import cloudpickle

    from trimerge.diff import spark_tasks

    cloudpickle.register_pickle_by_value(spark_tasks)

    def write(batches):
        import lance as _lance
        import pyarrow as _pa

        batches = list(batches)
        if not batches:
            return
        reader = _pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))
        frags = _lance.fragment.write_fragments(reader, uri, storage_options=storage_options)
        yield _pa.RecordBatch.from_pydict({"fragment": [json.dumps(f.to_json()) for f in frags],
                                           "schema": [batches[0].schema.serialize().to_pybytes()] * len(frags)})

    out = df.mapInArrow(write, "fragment string, schema binary").collect()
    if not out:
        return
    from lance.fragment import FragmentMetadata

    frags = [FragmentMetadata.from_json(r["fragment"]) for r in out]
    schema = pa.ipc.read_schema(pa.py_buffer(out[0]["schema"]))
    lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(schema, frags), read_version=None,
                              storage_options=storage_options)
