"""trimerge as a Lance Namespace: LanceDB, pylance and other Lance clients open any ref's tables.

``lance_namespace.connect("trimerge", {"root": URI, "ref": REF, ...storage options})`` (and so
``lancedb.connect_namespace("trimerge", {...})``) gives a namespace over one repository:

* ``list_tables`` lists the tables at the ref (default: the repository's current branch);
* ``describe_table`` gives the location and version that open exactly the ref's data, with the
  storage options, always with ``managed_versioning``: Lance asks this namespace which version is
  the latest (``list_table_versions``: the ref's), and asks it to commit any write
  (``create_table_version``). A table on its dataset's Lance ``main`` is located at the dataset;
  a fork's state (Lance branch ``tree/f-<ulid>``, which Lance will not open managed by path) at a
  pinned location, a shallow clone of exactly that version (see
  :mod:`trimerge.lineage.tables.served`), so a plain ``open_table(name)`` is exact for every ref;
* ``query_table`` runs a query a LanceDB connection pushes down
  (``namespace_client_pushdown_operations=["QueryTable"]``) on the ref's table version with pylance
  and answers an Arrow IPC file (:mod:`trimerge.namespace.query`); without the pushdown LanceDB runs
  the query in its own engine, which reads in 1024-row batches (about 4x pylance's time on a scan);
* ``DescribeTableRequest.branch`` / ``.tag`` name trimerge branches and tags; any other ref
  (``main~2``, a commit id, ``feat^``) is either the ``ref`` property or a child namespace: table id
  ``[REF, TABLE]`` (``db.open_table(TABLE, namespace_path=[REF])``). A Lance branch Lance itself
  asks for (LanceDB's ``open_table(name, branch=...)``) is refused with the way to name the ref.

A write through a Lance client (LanceDB ``add``, ``delete``, ``update``, ``merge_insert``, index
creation; pylance's too) on a branch becomes one trimerge commit on that branch, under its lease,
by the ``actor``/``message`` properties (:func:`~trimerge.lineage.tables.served.take_commit`); on
a tag, commit id, expression or protected branch it is refused, and the files the refused commit
had already written are removed (:func:`~trimerge.lineage.safety.orphans.discard_refused_write`). The namespace's own write
operations (create, insert, merge-insert, drop, ...) are refused
(:class:`lance_namespace.UnsupportedOperationError`): a trimerge write is a multi-table commit with a
branch lease. Bad input (not a repository, a ref that does not resolve, a table not at the ref)
raises the namespace's own error types and writes nothing: the repository is opened read-only
(and for writing only to take a client's commit).
"""

from __future__ import annotations

from typing import Any, Mapping, NoReturn

import lance_namespace as ln

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import TrimergeError, lance_message
from trimerge.lineage.tables.filters import check_filter, plan_filter
from trimerge.lineage.history.names import MAIN
from trimerge.lineage.safety.orphans import discard_refused_write
from trimerge.lineage.safety.recovery import INTENTS
from trimerge.namespace.hook import CLASS_PATH, IMPL_NAME
from trimerge.namespace.query import run_query
from trimerge.lineage.tables.served import (Served, refuse_lance_branch, refused_extras, remove_pinned_leftovers,
                                             serve, staged_pinned, take_commit)
from trimerge.lineage.repository import Repository

__all__ = ["IMPL_NAME", "TrimergeNamespace", "register"]

_U64_MAX = 2**64 - 1
_WRITE_HINT = ("the trimerge namespace is read-only: a trimerge write is a multi-table commit on a branch; "
               "write with trimerge (repo.transaction(branch=...), repo.upsert(...), or the CLI) instead")


def register() -> None:
    """Register :class:`TrimergeNamespace` with ``lance_namespace`` under the name ``"trimerge"``."""
    ln.register_namespace_impl(IMPL_NAME, CLASS_PATH)


def _field(request: Any, name: str) -> Any:
    """A request field: Python clients pass pydantic models, Lance's Rust bridge passes dicts."""
    if request is None:
        return None
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)


def _other_version(request: Any, tv: Any) -> Any:
    """The Lance version ``request`` asks for when it is not the one the ref pins, else None: a
    namespace serves exactly the ref's state, never another version of its dataset."""
    asked = _field(request, "version")
    return asked if asked is not None and asked != tv.version else None


def _manifest_path(location: str, version: int) -> str:
    """A manifest's path in its object store (V2 naming): a local path, or the key inside the bucket."""
    path = f"{location}/_versions/{_U64_MAX - version:020d}.manifest"
    scheme, sep, rest = path.partition("://")
    if sep and scheme != "file":
        return rest.partition("/")[2]
    return rest if sep else path


class TrimergeNamespace(ln.LanceNamespace):
    """A read-only Lance Namespace over one trimerge repository at one ref.

    Properties (all strings, as ``lance_namespace.connect`` passes them): ``root`` (the repository's
    location, required), ``ref`` (a branch, tag, commit id or expression such as ``main~1``; default
    the repository's current branch) and any other key as a storage option for object stores
    (``aws_endpoint``, ``aws_access_key_id``, ``region``, ...), handed on to the clients in
    ``describe_table``'s ``storage_options``."""

    def __init__(self, root: str | None = None, ref: str | None = None, actor: str | None = None,
                 message: str | None = None, **storage_options: str):
        if not root:
            raise ln.InvalidInputError("the trimerge namespace needs a 'root' property: the repository's location")
        self.root = root
        if actor and (not actor.isprintable() or len(actor) > 200):
            raise ln.InvalidInputError(f"actor={actor[:200]!r}: an actor is plain printable text of at most 200 "
                                       f"characters (no control or formatting characters)")
        #: Author and message of the commits LanceDB writes become (properties ``actor``, ``message``).
        self.actor, self.message = actor or None, message or None
        self._writable: Repository | None = None
        self.storage_options = {str(k): str(v) for k, v in storage_options.items()}
        try:
            self.repo = Repository.open(root, read_only=True, storage_options=self.storage_options or None)
        except TrimergeError as exc:
            raise ln.InvalidInputError(f"root={root!r}: {exc}") from None
        self.ref = ref or self.repo.current_branch
        self._resolve(self.ref, what="ref")  # a ref that does not resolve fails now, not at first use

    # ------------------------------------------------------------------ identity
    def namespace_id(self) -> str:
        """``TrimergeNamespace { root: ..., ref: ... }`` (equal ids share cached resources)."""
        writer = "".join(f", {k}: {v!r}" for k, v in (("actor", self.actor), ("message", self.message)) if v)
        return f"TrimergeNamespace {{ root: {self.repo.uri!r}, ref: {self.ref!r}{writer} }}"

    def __repr__(self) -> str:
        return f"TrimergeNamespace(root={self.repo.uri!r}, ref={self.ref!r})"

    # ------------------------------------------------------------------ refs
    def _resolve(self, expr: str, what: str = "ref") -> Commit:
        try:
            return self.repo.resolve(expr)
        except TrimergeError as exc:
            raise ln.InvalidInputError(f"{what}={expr!r} does not resolve in {self.repo.uri}: {exc}") from None

    def _namespace_ref(self, ident: list[str]) -> str:
        """The ref a namespace id names: [] is the connection's ref, [REF] a child namespace."""
        if len(ident) == 0:
            return self.ref
        if len(ident) == 1:
            return ident[0]
        raise ln.NamespaceNotFoundError(
            f"namespace {'/'.join(ident)!r}: a trimerge namespace has one level of child namespaces, one per ref")

    def _ref_for_namespace(self, request: Any) -> tuple[str, Commit]:
        ref = self._namespace_ref(list(_field(request, "id") or []))
        try:
            return ref, self.repo.resolve(ref)
        except TrimergeError as exc:
            raise ln.NamespaceNotFoundError(f"namespace {ref!r}: not a ref of {self.repo.uri}: {exc}") from None

    def _table_ref(self, request: Any) -> tuple[str, str]:
        """(table, ref) of a table request, honouring ``branch`` and ``tag`` as trimerge's."""
        ident = list(_field(request, "id") or [])
        if not ident:
            raise ln.InvalidInputError("a table request needs an id: [TABLE] or [REF, TABLE]")
        table, ref = ident[-1], self._namespace_ref(ident[:-1])
        branch, tag = _field(request, "branch"), _field(request, "tag")
        if branch and tag:
            raise ln.InvalidInputError(f"give branch={branch!r} or tag={tag!r}, not both")
        if branch:
            if branch != MAIN and not self.repo.branches.exists(branch):
                raise ln.TableBranchNotFoundError(f"no trimerge branch {branch!r} in {self.repo.uri}")
            ref = branch
        elif tag:
            if self.repo.tags.get_or_none(tag) is None:
                raise ln.TableTagNotFoundError(f"no trimerge tag {tag!r} in {self.repo.uri}")
            ref = tag
        return table, ref

    def _table_version(self, request: Any) -> tuple[str, str, Commit, TableVersion]:
        table, ref = self._table_ref(request)
        return self._at(table, ref)

    def _at(self, table: str, ref: str) -> tuple[str, str, Commit, TableVersion]:
        """``table`` at ``ref``, or the namespace's TableNotFoundError."""
        commit = self._resolve(ref)
        tv = commit.tables.get(table)
        if tv is None:
            raise ln.TableNotFoundError(
                f"no table {table!r} at {ref} (tables: {', '.join(sorted(commit.tables)) or 'none'})")
        return table, ref, commit, tv

    def _location(self, tv: TableVersion) -> str:
        base = self.repo.dataset_path(tv)
        return base if tv.lance_branch == "main" else f"{base}/tree/{tv.lance_branch}"

    def _served(self, table: str, ref: str, tv: TableVersion) -> Served:
        """The managed location serving ``tv`` (see :mod:`trimerge.lineage.tables.served`)."""
        return serve(self.repo, tv, f"{table} at {ref}")

    def _lance_table_version(self, request: Any) -> tuple[str, str, Commit, TableVersion]:
        """The table version of a request Lance makes for a managed table (``branch``: a Lance branch)."""
        ident = list(_field(request, "id") or [])
        if not ident:
            raise ln.InvalidInputError("a table request needs an id: [TABLE] or [REF, TABLE]")
        table, ref = ident[-1], self._namespace_ref(ident[:-1])
        refuse_lance_branch(request, table, ref)
        return self._at(table, ref)

    def writable_repo(self) -> Repository:
        """The repository opened for writing (a LanceDB write becoming a commit), on first use."""
        if self._writable is None:
            try:
                self._writable = Repository.open(self.root, storage_options=self.storage_options or None)
            except TrimergeError as exc:
                raise ln.PermissionDeniedError(f"root={self.root!r} cannot be written: {exc}") from None
        return self._writable

    # ------------------------------------------------------------------ namespaces
    def list_namespaces(self, request: Any) -> ln.ListNamespacesResponse:
        """Child namespaces of the root: the branches and tags (any other ref expression works too)."""
        if list(_field(request, "id") or []):
            return ln.ListNamespacesResponse(namespaces=[])
        names = sorted(set(self.repo.branches.names()) | {t.name for t in self.repo.tags.list()})
        return ln.ListNamespacesResponse(namespaces=names)

    def describe_namespace(self, request: Any) -> ln.DescribeNamespaceResponse:
        """The ref and commit a namespace stands for."""
        ref, commit = self._ref_for_namespace(request)
        return ln.DescribeNamespaceResponse(properties={"trimerge.ref": ref, "trimerge.commit": commit.id})

    def namespace_exists(self, request: Any) -> ln.NamespaceExistsResponse:
        """Raises :class:`lance_namespace.NamespaceNotFoundError` unless the namespace is a ref."""
        self._ref_for_namespace(request)
        return ln.NamespaceExistsResponse()

    # ------------------------------------------------------------------ tables
    def list_tables(self, request: Any) -> ln.ListTablesResponse:
        """The tables at the namespace's ref, sorted by name (``page_token``: the last name seen)."""
        _, commit = self._ref_for_namespace(request)
        names = sorted(commit.tables)
        token, limit = _field(request, "page_token"), _field(request, "limit")
        if token:
            names = [n for n in names if n > token]
        if limit and limit > 0 and len(names) > limit:
            names = names[:limit]
            return ln.ListTablesResponse(tables=names, page_token=names[-1])
        return ln.ListTablesResponse(tables=names)

    def describe_table(self, request: Any) -> ln.DescribeTableResponse:
        """Location, version and storage options that open exactly the table's data at the ref."""
        table, ref, commit, tv = self._table_version(request)
        if _other_version(request, tv) is not None:
            raise ln.TableVersionNotFoundError(
                f"{table} at {ref} is Lance version {tv.version}; open another ref (ref=, branch=, tag=, or "
                f"a [REF, TABLE] id) to see other states")
        # Always managed: Lance asks list_table_versions which version to open and create_table_version
        # to commit a write; a fork's state is served from a pinned location (namespace_refs.serve).
        served = self._served(table, ref, tv)
        properties = {"trimerge.ref": ref, "trimerge.commit": commit.id, "trimerge.lance_branch": tv.lance_branch,
                      "trimerge.primary_key": ",".join(tv.primary_key), "trimerge.exact_latest": "true",
                      "trimerge.pinned": "true" if served.pinned else "false"}
        return ln.DescribeTableResponse(
            table=table, namespace=[ref], location=served.location, table_uri=served.location, version=tv.version,
            storage_options=dict(self.storage_options) or None, managed_versioning=True, properties=properties)

    def table_exists(self, request: Any) -> ln.TableExistsResponse:
        """Raises :class:`lance_namespace.TableNotFoundError` unless the table is at the ref."""
        self._table_version(request)
        return ln.TableExistsResponse()

    def count_table_rows(self, request: Any) -> ln.CountTableRowsResponse:
        """Rows of the table at the ref (``predicate``: a Lance filter, checked as every trimerge
        filter is — a predicate Lance would crash on, or cut short at a ';', is refused)."""
        table, ref, _, tv = self._table_version(request)
        predicate = _field(request, "predicate")
        ds = self.repo.open_table_version(tv)
        try:
            if predicate is not None:
                plan_filter(ds, check_filter(predicate, "predicate"), f"count rows of {table} at {ref}")
            count = ds.count_rows(predicate)
        except TrimergeError as exc:
            raise ln.InvalidInputError(str(exc)) from None
        except (OSError, ValueError, RuntimeError) as exc:
            raise ln.InvalidInputError(f"count rows of {table} at {ref}: {lance_message(exc)[:300]}") from None
        return ln.CountTableRowsResponse(count=count)

    def query_table(self, request: Any) -> bytes:  # type: ignore[override]  # Lance's REST client takes IPC bytes
        """A LanceDB query pushed down to the namespace (``namespace_client_pushdown_operations=
        ["QueryTable"]``), run on exactly the table's version at the ref: an Arrow IPC file."""
        table, ref, _, tv = self._table_version(request)
        asked = _other_version(request, tv)
        if asked is not None:
            raise ln.TableVersionNotFoundError(
                f"{table} at {ref} is Lance version {tv.version}, not {asked}: open the table again to read the "
                f"ref's current state, or name another ref ([REF, TABLE] id) to read an older one")
        return run_query(self.repo.open_table_version(tv), request, f"{table} at {ref}")

    def list_table_versions(self, request: Any) -> ln.ListTableVersionsResponse:
        """One version: the one the ref pins (Lance asks this for a managed table's latest)."""
        table, ref, _, tv = self._lance_table_version(request)
        return ln.ListTableVersionsResponse(versions=[self._version_entry(table, ref, tv)])

    def describe_table_version(self, request: Any) -> ln.DescribeTableVersionResponse:
        """The version the ref pins; any other version number is not part of the ref."""
        table, ref, _, tv = self._lance_table_version(request)
        asked = _other_version(request, tv)
        if asked is not None:
            raise ln.TableVersionNotFoundError(
                f"{table} at {ref} is Lance version {tv.version}, not {asked}: a Lance version is not a trimerge "
                f"state; open the state's ref instead (open_table({table!r}, namespace_path=[REF]) or the 'ref' "
                f"property; REF: a branch, tag, commit id or expression such as {ref}~1)")
        return ln.DescribeTableVersionResponse(version=self._version_entry(table, ref, tv))

    def create_table_version(self, request: Any) -> Any:
        """A write a Lance client made (LanceDB ``add``, ``delete``, ``update``, ``merge_insert``, index
        creation) becomes one trimerge commit on the ref's branch (:func:`namespace_refs.take_commit`),
        or is refused: Lance has by then written the version's data, transaction and a staging manifest,
        and what no version names goes now."""
        table, ref, _, tv = self._lance_table_version(request)
        served = self._served(table, ref, tv)
        try:
            return take_commit(self, table, ref, tv, served, request)
        except ln.ConcurrentModificationError:
            raise  # Lance reads the newer version back, rebases and retries with the same data files
        except Exception as exc:
            self._remove_refused(tv, served, request)
            if isinstance(exc, ln.LanceNamespaceError):
                raise
            raise ln.InternalError(f"write to {table} at {ref} not taken: {type(exc).__name__}: {exc}") from exc

    def refuse_table_version(self, request: Any, error: ln.LanceNamespaceError) -> NoReturn:
        """Refuse a client's write for the caller's own reason (``trimerge serve``: a token that may
        not write there): the files Lance wrote for it go as for any refused write, then ``error``."""
        table, ref, _, tv = self._lance_table_version(request)
        self._remove_refused(tv, self._served(table, ref, tv), request)
        raise error

    def _remove_refused(self, tv: TableVersion, served: Served, request: Any) -> None:
        try:
            pinned = staged_pinned(self.repo, tv, request)  # the folder the client's handle wrote in
            if pinned is not None:
                remove_pinned_leftovers(self.repo, pinned)
            elif not served.pinned:  # (staged in a dataset the ref has since forked: gc's orphan sweep)
                extras = refused_extras(self.repo, tv, served, request)
                self._discard_refused_write(request)
                for key in extras:
                    self.repo.table_store.files.delete(key)
        except Exception:  # cleaning up is a courtesy: the refusal is the answer, whatever happens here
            pass

    def _discard_refused_write(self, request: Any) -> None:
        _, _, _, tv = self._table_version(request)
        path = str(_field(request, "manifest_path") or "")
        folder, _, name = path.replace("\\", "/").rpartition("/")
        expected = _manifest_path(self._location(tv), 0).rpartition("/")[0]
        if tv.lance_branch != "main" or folder.strip("/") != expected.strip("/"):
            return  # not the served table's own _versions folder: nothing of ours to clean
        busy = any((str(t.get("dataset")), str(t.get("lance_branch"))) == (tv.dataset, "main")
                   for key in self.repo.docs.list(INTENTS) if isinstance(doc := self.repo.docs.get(key), dict)
                   for t in doc.get("touched", []) if isinstance(t, dict))
        discard_refused_write(self.repo.table_store, tv.dataset, name, busy=busy)

    def _version_entry(self, table: str, ref: str, tv: TableVersion) -> ln.TableVersion:
        return ln.TableVersion(version=tv.version, manifest_path=self._served(table, ref, tv).manifest_path)


def _refuse(name: str):
    def refused(self: TrimergeNamespace, *args: Any, **kwargs: Any) -> Any:
        raise ln.UnsupportedOperationError(f"{name}: {_WRITE_HINT}")

    refused.__name__ = name
    refused.__doc__ = f"Refused: {_WRITE_HINT}."
    return refused


for _name in ("create_namespace", "drop_namespace", "register_table", "deregister_table", "drop_table",
              "create_table", "declare_table", "create_empty_table", "insert_into_table", "merge_insert_into_table",
              "update_table", "delete_from_table", "create_table_index", "create_table_scalar_index",
              "drop_table_index", "create_materialized_view", "refresh_materialized_view", "batch_create_table_versions", "batch_commit_tables",
              "batch_delete_table_versions", "restore_table", "rename_table", "alter_table_add_columns",
              "alter_table_alter_columns", "alter_table_drop_columns", "alter_table_backfill_columns",
              "create_table_tag", "update_table_tag", "delete_table_tag", "create_table_branch",
              "delete_table_branch", "update_table_schema_metadata", "update_field_metadata", "alter_transaction"):
    setattr(TrimergeNamespace, _name, _refuse(_name))
