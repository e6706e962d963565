"""trimerge as a Lance Namespace: LanceDB, pylance and other Lance clients open any ref's tables.

``lance_namespace.connect("trimerge", {"root": URI, "ref": REF, ...storage options})`` (and so
``lancedb.connect_namespace("trimerge", {...})``) gives a read-only namespace over one repository:

* ``list_tables`` lists the tables at the ref (default: the repository's current branch);
* ``describe_table`` gives the location and version that open exactly the ref's data, with the
  storage options. A table on its dataset's Lance ``main`` is served with ``managed_versioning``:
  Lance asks this namespace which version is the latest (``list_table_versions``: the ref's) and
  asks it to commit any write (``create_table_version``: refused). A table on a fork is located at
  the fork's dataset (``<dataset>/tree/f-<ulid>``, the Lance branch layout), unmanaged (Lance
  refuses a managed fork opened by path): at the fork's head its latest version is the ref's data,
  and for an older state the response's ``version`` must be applied by the client
  (``lance.dataset(..., version=...)``, ``db.open_table(name, version=...)``).
  ``properties["trimerge.exact_latest"]`` says which case applies;
* ``DescribeTableRequest.branch`` / ``.tag`` name trimerge branches and tags; any other ref
  (``main~2``, a commit id, ``feat^``) is either the ``ref`` property or a child namespace: table id
  ``[REF, TABLE]`` (``db.open_table(TABLE, namespace_path=[REF])``).

Writes through the namespace are refused (:class:`lance_namespace.UnsupportedOperationError`;
a write a client makes itself to a fork's location cannot be seen, hence not refused):
a trimerge write is a multi-table commit with a branch lease, which the namespace protocol's
per-table commits cannot carry. Write with :meth:`Repository.transaction` instead. Bad input (not
a repository, a ref that does not resolve, a table not at the ref) raises the namespace's own error
types and writes nothing: the repository is always opened read-only.
"""

from __future__ import annotations

from typing import Any, Mapping

import lance_namespace as ln

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.names import MAIN
from trimerge.lineage.namespace_hook import CLASS_PATH, IMPL_NAME
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

    def __init__(self, root: str | None = None, ref: str | None = None, **storage_options: str):
        if not root:
            raise ln.InvalidInputError("the trimerge namespace needs a 'root' property: the repository's location")
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
        return f"TrimergeNamespace {{ root: {self.repo.uri!r}, ref: {self.ref!r} }}"

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
        commit = self._resolve(ref)
        tv = commit.tables.get(table)
        if tv is None:
            raise ln.TableNotFoundError(
                f"no table {table!r} at {ref} (tables: {', '.join(sorted(commit.tables)) or 'none'})")
        return table, ref, commit, tv

    def _location(self, tv: TableVersion) -> str:
        base = self.repo.dataset_path(tv)
        return base if tv.lance_branch == "main" else f"{base}/tree/{tv.lance_branch}"

    def _is_head(self, tv: TableVersion) -> bool:
        """Whether ``tv`` is the latest version of its Lance branch (opening the latest is then exact)."""
        try:
            return self.repo.table_store.open(tv.dataset, tv.lance_branch, None).version == tv.version
        except (OSError, ValueError, RuntimeError) as exc:
            raise ln.TableNotFoundError(f"data of {tv.dataset} ({tv.lance_branch}) cannot be opened: {exc}") from None

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
        asked = _field(request, "version")
        if asked is not None and asked != tv.version:
            raise ln.TableVersionNotFoundError(
                f"{table} at {ref} is Lance version {tv.version}; open another ref (ref=, branch=, tag=, or "
                f"a [REF, TABLE] id) to see other states")
        managed = tv.lance_branch == "main"  # Lance then asks list_table_versions, and refuses writes through us
        head = managed or self._is_head(tv)
        location = self._location(tv)
        properties = {"trimerge.ref": ref, "trimerge.commit": commit.id, "trimerge.lance_branch": tv.lance_branch,
                      "trimerge.primary_key": ",".join(tv.primary_key),
                      "trimerge.exact_latest": "true" if head else "false"}
        return ln.DescribeTableResponse(
            table=table, namespace=[ref], location=location, table_uri=location, version=tv.version,
            storage_options=dict(self.storage_options) or None, managed_versioning=managed or None,
            properties=properties)

    def table_exists(self, request: Any) -> ln.TableExistsResponse:
        """Raises :class:`lance_namespace.TableNotFoundError` unless the table is at the ref."""
        self._table_version(request)
        return ln.TableExistsResponse()

    def count_table_rows(self, request: Any) -> ln.CountTableRowsResponse:
        """Rows of the table at the ref (``predicate``: a Lance filter)."""
        _, _, _, tv = self._table_version(request)
        count = self.repo.open_table_version(tv).count_rows(_field(request, "predicate"))
        return ln.CountTableRowsResponse(count=count)

    def list_table_versions(self, request: Any) -> ln.ListTableVersionsResponse:
        """One version: the one the ref pins (Lance asks this for a managed table's latest)."""
        _, _, _, tv = self._table_version(request)
        return ln.ListTableVersionsResponse(versions=[self._version_entry(tv)])

    def describe_table_version(self, request: Any) -> ln.DescribeTableVersionResponse:
        """The version the ref pins; any other version number is not part of the ref."""
        table, ref, _, tv = self._table_version(request)
        asked = _field(request, "version")
        if asked is not None and asked != tv.version:
            raise ln.TableVersionNotFoundError(
                f"{table} at {ref} is Lance version {tv.version}, not {asked}; open another ref for other states")
        return ln.DescribeTableVersionResponse(version=self._version_entry(tv))

    def _version_entry(self, tv: TableVersion) -> ln.TableVersion:
        return ln.TableVersion(version=tv.version, manifest_path=_manifest_path(self._location(tv), tv.version))


def _refuse(name: str):
    def refused(self: TrimergeNamespace, *args: Any, **kwargs: Any) -> Any:
        raise ln.UnsupportedOperationError(f"{name}: {_WRITE_HINT}")

    refused.__name__ = name
    refused.__doc__ = f"Refused: {_WRITE_HINT}."
    return refused


for _name in ("create_namespace", "drop_namespace", "register_table", "deregister_table", "drop_table",
              "create_table", "declare_table", "create_empty_table", "insert_into_table", "merge_insert_into_table",
              "update_table", "delete_from_table", "create_table_index", "create_table_scalar_index",
              "drop_table_index", "create_table_version", "create_materialized_view", "refresh_materialized_view", "batch_create_table_versions", "batch_commit_tables",
              "batch_delete_table_versions", "restore_table", "rename_table", "alter_table_add_columns",
              "alter_table_alter_columns", "alter_table_drop_columns", "alter_table_backfill_columns",
              "create_table_tag", "update_table_tag", "delete_table_tag", "create_table_branch",
              "delete_table_branch", "update_table_schema_metadata", "update_field_metadata", "alter_transaction"):
    setattr(TrimergeNamespace, _name, _refuse(_name))
