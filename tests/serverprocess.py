"""What the test servers (:mod:`s3server`, :mod:`azserver`, :mod:`gcsserver`) share: a child process in a session of
its own with a temporary directory and a log, started with retries (a free port can be taken by
another process between choosing it and binding it), stopped at exit even when a run is
interrupted. A server class supplies ``_launch`` (the command, once per attempt) and
``_wait_ready``."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path


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


class ServerProcess:
    name = "server"
    log_name = "server.log"

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._dir: str | None = None

    def start(self, timeout: float = 60.0, attempts: int = 3):
        """Start the server and wait until it answers; retried with fresh ports and a fresh directory."""
        for attempt in range(1, attempts + 1):
            self._dir = tempfile.mkdtemp(prefix=f"trimerge-{self.name}-")
            try:
                self._proc = self._launch(Path(self._dir))
                atexit.register(self.stop)
                self._wait_ready(timeout)
                return self
            except RuntimeError as exc:
                tail = self.log_tail()
                self.stop()
                if attempt == attempts:
                    raise RuntimeError(f"{exc}; log tail:\n{tail}") from None
        raise AssertionError("unreachable")

    def _launch(self, directory: Path) -> subprocess.Popen:
        raise NotImplementedError

    def _wait_ready(self, timeout: float) -> None:
        raise NotImplementedError

    def _popen(self, cmd: list[str], directory: Path) -> subprocess.Popen:
        self._log = open(directory / self.log_name, "wb")
        return subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=directory, start_new_session=True)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id (benchmarks read its command line, e.g. SeaweedFS's metrics port)."""
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join((Path(self._dir or "") / self.log_name).read_text(errors="replace").splitlines()[-n:])
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
            if getattr(self, "_log", None) is not None:
                self._log.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
