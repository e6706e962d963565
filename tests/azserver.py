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

import os
import shutil
import time
from pathlib import Path

from serverprocess import ServerProcess, free_ports

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


class AzuriteServer(ServerProcess):
    """One ``azurite-blob`` process with one container."""

    name, log_name = "az", "azurite.log"

    def __init__(self, container: str = "trimerge-test"):
        super().__init__()
        self.container = container
        self.endpoint = ""

    @property
    def storage_options(self) -> dict[str, str]:
        return {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY, "endpoint": self.endpoint, "allow_http": "true"}

    def uri(self, prefix: str) -> str:
        return f"az://{self.container}/{prefix.strip('/')}"

    def _launch(self, directory: Path):
        binary = azurite_binary()
        if binary is None:
            raise RuntimeError("azurite-blob is missing (npm install --prefix .ci/node azurite@3)")
        port = free_ports(1)[0]
        self.endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        return self._popen([binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location",
                            str(directory / "data"), "--skipApiVersionCheck", "--loose", "--disableTelemetry"], directory)

    def _wait_ready(self, timeout: float) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={self.endpoint};",
            retry_total=0)  # poll here, not in the SDK's backoff
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline and self.running():
            try:
                client.create_container(self.container, timeout=2)
                return
            except ResourceExistsError:
                return
            except Exception as exc:  # not up yet
                last = exc
                time.sleep(0.25)
        raise RuntimeError(f"Azurite did not become ready ({last!r})")
