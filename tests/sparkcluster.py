"""One Spark ``local-cluster[2,1,1024]`` (a master, two workers, two executor JVMs with Python
workers of their own) in a driver process of its own, shared by the tests that need separate
executor processes.

Starting such a cluster costs 30-90 s on a 2-core machine (five JVMs), so the suite starts it
once (the ``local_cluster`` session fixture) instead of once per test. Each test sends a Python
snippet; the driver runs it with ``spark`` bound to the cluster's session and answers with the
snippet's exit code, stdout and stderr, like ``subprocess.run`` of a script did. The driver
process has no ``AWS_*`` environment, so object-store options must travel inside the tasks.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass

MARK = "@@trimerge-local-cluster@@ "

DRIVER = r'''
import contextlib, io, json, sys, time, traceback
MARK = %r
reply_to = sys.stdout
sys.stdout = sys.stderr  # stray prints never reach the reply channel
from trimerge.diff.spark import get_spark
spark = get_spark("local-cluster[2,1,1024]")
status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
deadline = time.monotonic() + 240
while status().size() - 1 < 2 and time.monotonic() < deadline:  # both executors registered
    time.sleep(0.2)

def reply(**kw):
    reply_to.write(MARK + json.dumps(kw) + "\n")
    reply_to.flush()

reply(ready=True, executors=status().size() - 1)
for line in sys.stdin:
    job = json.loads(line)
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(job["code"], "<job>", "exec"), {"spark": spark, "__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=err)
        except BaseException:
            code = 1
            traceback.print_exc(file=err)
    reply(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())
spark.stop()
''' % MARK


@dataclass
class JobResult:
    returncode: int
    stdout: str
    stderr: str


class LocalCluster:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["PYSPARK_PYTHON"] = sys.executable
        self._log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, env=env)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._next(300)
        self.executors = ready["executors"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                self._lines.put(json.loads(line[len(MARK):]))
        self._lines.put(None)  # the driver is gone

    def _next(self, timeout: float) -> dict:
        try:
            got = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the local-cluster driver did not answer in {timeout} s:\n{self.log()}") from None
        if got is None:
            raise AssertionError(f"the local-cluster driver exited ({self.proc.wait()}):\n{self.log()}")
        return got

    def log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-3000:]

    def run(self, code: str, timeout: float = 300) -> JobResult:
        """Run ``code`` in the driver (``spark`` is the cluster's session); like running a script."""
        self.proc.stdin.write(json.dumps({"code": textwrap.dedent(code)}) + "\n")
        self.proc.stdin.flush()
        got = self._next(timeout)
        return JobResult(got["returncode"], got["stdout"], got["stderr"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self._log.close()
