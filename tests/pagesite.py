"""What the web view's tests share (tests/test_pages.py over HTTP, tests/test_pages_browser.py in
Chromium): a repository with history worth looking at, and ``trimerge serve`` started on it in a
subprocess on 127.0.0.1 (port 0: the server names its port), stopped with SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

import trimerge
from trimerge.merge import merge

WRITE = "w" * 8 + "-pages-write"  # writes every branch, as alice
REVIEWER = "b" * 8 + "-pages-bob-1"  # writes every branch, as bob
READ = "r" * 8 + "-pages-read-"
FEAT = "f" * 8 + "-pages-feat-"  # writes feat* only
TOKENS = (f"# the web view's test tokens\n{WRITE} write * alice\n{REVIEWER} write * bob\n{READ} read * carol\n"
          f"{FEAT} write feat* dave\n")
SCRIPT = "<script>window.pwned = 1</script>"
IMG = '<img src=x onerror="window.pwned = 2">'
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def items(ids: list[int], suffix: str = "", price: float = 1.0) -> pa.Table:
    names = [SCRIPT if i == 3 else IMG if i == 5 else f"item{i}{suffix}" for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "name": names,
                     "price": pa.array([price * i for i in ids], pa.float64()),
                     "note": [f"n{i}" for i in ids]})


def build(uri: str) -> trimerge.Repository:
    """main: ``items`` (30 rows, two of them hostile markup) and ``teams`` (a two-column key), a
    merge in its history and tag v1; ``feat`` (two commits: an update of names, an insert, a
    delete, then a repricing) forked before main's last commit."""
    repo = trimerge.Repository.init(uri)
    repo.create_table("items", items(list(range(1, 31))), primary_key="id")
    repo.create_table("teams", pa.table({"team": ["a", "a", "b"], "member": [1, 2, 1],
                                         "role": ["lead", "dev", "dev"]}), primary_key=["team", "member"])
    repo.tags.create("v1")
    repo.branches.create("side")
    repo.upsert("teams", pa.table({"team": ["b"], "member": [2], "role": ["ops"]}), branch="side")
    merge("side", "main", repo=repo, message="Merge side")
    repo.branches.create("feat")
    repo.upsert("items", items([2, 7], " renamed"), branch="feat", message="Rename two items")
    repo.upsert("items", items([31]), branch="feat")
    repo.delete("items", where="id = 4", branch="feat")
    repo.upsert("items", items([3, 5, 8, 9, 10], price=2.5), branch="feat", message="Reprice five items")
    repo.upsert("items", items([1], " on main"), message="Rename item 1 on main")
    return repo


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, html[:2000]
    return found.group(1)


class PageServer:
    """``trimerge -C ROOT serve --port 0 [ARGS]`` in a subprocess."""

    def __init__(self, root: str, *args: str):
        self.log = tempfile.TemporaryFile("w+")  # (a pipe nobody reads would fill up with the request log)
        self.proc = subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", root, "serve", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url = ""

    def wait_ready(self) -> "PageServer":
        line = self.proc.stdout.readline()  # printed once the socket listens
        if not line.startswith("listening on "):
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not start: {line!r} {self.stderr()}")
        self.url = line.split()[-1]
        return self

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return code, self.stderr()


def start(*servers: PageServer) -> tuple[PageServer, ...]:
    """The servers (started together: each takes seconds to import its stack), once all listen."""
    try:
        for one in servers:
            one.wait_ready()
    except AssertionError:
        for one in servers:
            one.proc.kill()
        raise
    return servers


def tokens_file(directory: Path) -> str:
    path = directory / "tokens"
    path.write_text(TOKENS)
    return str(path)
