"""A real Azure Blob server for the tests: Azurite (npm package ``azurite``; ``.ci/run`` installs it
into ``.ci/node``).

Usage::

    with AzuriteServer() as server:
        repo = trimerge.Repository.init(server.uri("t1/repo"), storage_options=server.storage_options)

Like :mod:`s3server`: one per pytest-xdist worker, bound to 127.0.0.1 on a free port, data in a
temporary directory, stopped at exit. The account is Azurite's well-known development account;
the options name its endpoint explicitly (path-style URLs), so no ``AZURITE_*`` environment is needed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from s3server import free_ports

ROOT = Path(__file__).resolve().parent.parent
ACCOUNT = "devstoreaccount1"
#: Azurite's published development key (the same in every Azurite; not a secret).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> str | None:
    """``azurite-blob``: ``$TRIMERGE_AZURITE``, the copy ``.ci/run`` installs, or one on PATH."""
    for candidate in (os.environ.get("TRIMERGE_AZURITE"), ROOT / ".ci" / "node" / "node_modules" / ".bin" / "azurite-blob"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return shutil.which("azurite-blob")


class AzuriteServer:
    def __init__(self, container: str = "trimerge-test"):
        self.container = container
        self.endpoint = ""
        self._proc: subprocess.Popen | None = None
        self._dir: str | None = None

    @property
    def storage_options(self) -> dict[str, str]:
        return {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY, "endpoint": self.endpoint, "allow_http": "true"}

    def uri(self, prefix: str) -> str:
        return f"az://{self.container}/{prefix.strip('/')}"

    def start(self, timeout: float = 60.0, attempts: int = 3) -> "AzuriteServer":
        """Start and wait until the container exists (retried on a port another process took)."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start(timeout)
            except RuntimeError:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> "AzuriteServer":
        binary = azurite_binary()
        if binary is None:
            raise RuntimeError("azurite-blob is missing (npm install --prefix .ci/node azurite@3)")
        self._dir = tempfile.mkdtemp(prefix="trimerge-az-")
        port = free_ports(1)[0]
        self.endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        self._log = open(Path(self._dir) / "azurite.log", "wb")
        self._proc = subprocess.Popen(
            [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(Path(self._dir) / "data"),
             "--skipApiVersionCheck", "--loose", "--disableTelemetry"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self._dir, start_new_session=True)
        atexit.register(self.stop)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={self.endpoint};",
            retry_total=0)  # poll here, not in the SDK's backoff
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline and self._proc is not None and self._proc.poll() is None:
            try:
                client.create_container(self.container, timeout=2)
                return
            except ResourceExistsError:
                return
            except Exception as exc:  # not up yet
                last = exc
                time.sleep(0.25)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"Azurite did not become ready ({last!r}); log tail:\n{tail}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join((Path(self._dir or "") / "azurite.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self._dir is not None:
            self._log.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "AzuriteServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
