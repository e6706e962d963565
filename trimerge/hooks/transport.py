"""Sending one event: an HTTP POST to a webhook, or a command run with the event on stdin.

Both are bounded: a deadline for the whole attempt (connect, send, answer; or the command's run,
after which its process group is killed) and a cap on what is kept of the answer or the output
(the rest is read and dropped, so a chatty command never blocks on a full pipe). Neither raises:
every failure is an :class:`Outcome` with one line saying what happened. Redirects are not
followed (a signed body goes only where the hook says). No message ever holds the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO, Mapping
from urllib.parse import urlsplit

from trimerge.hooks.model import shown_url

#: Bytes kept of a webhook's answer or a command's output (the rest is counted, not kept).
KEEP_BYTES = 64 * 1024
USER_AGENT = "trimerge-hooks/1"


@dataclass(frozen=True)
class Outcome:
    """One attempt: ``ok`` (2xx answer / exit 0), the HTTP ``code`` or exit status, how long it
    took, what went wrong (one line) and the start of the answer or output."""

    ok: bool
    code: int | None
    seconds: float
    error: str | None = None
    output: str = ""


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-Trimerge-Signature-256`` value: ``sha256=`` and the hex HMAC-SHA256 of ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def _text(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", "replace")
    return text + (f"\n… {dropped} more bytes not kept" if dropped else "")


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Outcome:
    """POST ``body`` to ``url``; success is a 2xx answer within ``timeout`` seconds."""
    started = time.monotonic()
    deadline = started + timeout

    def left() -> float:
        return max(0.001, deadline - time.monotonic())

    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: http.client.HTTPConnection
    if parts.scheme.lower() == "https":
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=left(),
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=left())
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "User-Agent": USER_AGENT,
                                                       **headers})
        if conn.sock is not None:
            conn.sock.settimeout(left())
        response = conn.getresponse()
        kept, dropped = bytearray(), 0
        while True:  # the answer is read to its end or the deadline, whichever comes first
            if conn.sock is not None:
                conn.sock.settimeout(left())
            chunk = response.read(65536)
            if not chunk:
                break
            room = KEEP_BYTES - len(kept)
            kept += chunk[:room]
            dropped += max(0, len(chunk) - room)
            if time.monotonic() >= deadline:
                break
        seconds = time.monotonic() - started
        code = response.status
        output = _text(bytes(kept), dropped)
        if 200 <= code < 300:
            return Outcome(True, code, seconds, None, output)
        if 300 <= code < 400:
            where = response.getheader("Location") or "?"
            return Outcome(False, code, seconds, f"HTTP {code}: redirect to {shown_url(where)} not followed "
                                                 "(give the hook the final URL)", output)
        return Outcome(False, code, seconds, f"HTTP {code} {response.reason}".strip(), output)
    except (socket.timeout, TimeoutError):
        return Outcome(False, None, time.monotonic() - started, f"no answer within {timeout:g} s (timed out)")
    except ssl.SSLError as exc:
        return Outcome(False, None, time.monotonic() - started, f"TLS failed: {exc.reason or exc}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
        return Outcome(False, None, time.monotonic() - started,
                       f"cannot deliver to {shown_url(url)}: {' '.join(str(what).split())[:300]}")
    finally:
        conn.close()


def _drain(stream: IO[bytes], into: bytearray, counted: list[int]) -> None:
    """Read ``stream`` to its end, keeping the first KEEP_BYTES (a command printing megabytes must
    not block on a full pipe, nor fill memory)."""
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return
        room = KEEP_BYTES - len(into)
        into += chunk[:room]
        counted[0] += max(0, len(chunk) - room)


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
    except (BrokenPipeError, OSError):  # the command did not read its input: that is its business
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


def run(command: str, stdin: bytes, env: Mapping[str, str], timeout: float, cwd: str | None) -> Outcome:
    """Run ``command`` with ``/bin/sh -c`` in a session of its own, ``stdin`` as its input and
    ``env`` added to the environment; success is exit status 0 within ``timeout`` seconds. On the
    deadline the whole process group is killed (TERM, then KILL)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=cwd,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        return Outcome(False, None, time.monotonic() - started, f"cannot run the command: {exc.strerror or exc}")
    assert proc.stdin is not None and proc.stdout is not None  # both are pipes (asked above)
    kept, dropped = bytearray(), [0]
    feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
    reader = threading.Thread(target=_drain, args=(proc.stdout, kept, dropped), daemon=True)
    feeder.start()
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    # Children the command left behind may still hold the pipe: they go with the group.
    reader.join(timeout=2.0)
    if reader.is_alive():
        _kill_group(proc)
        reader.join(timeout=2.0)
    seconds = time.monotonic() - started
    output = _text(bytes(kept), dropped[0])
    if timed_out:
        return Outcome(False, None, seconds, f"did not finish within {timeout:g} s (killed)", output)
    code = proc.returncode
    if code == 0:
        return Outcome(True, 0, seconds, None, output)
    if code < 0:
        return Outcome(False, code, seconds, f"killed by signal {-code}", output)
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
    return Outcome(False, code, seconds, f"exit status {code}" + (f": {last[:300]}" if last else ""), output)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGKILL:
                return
        except subprocess.TimeoutExpired:
            continue
    # TERM was enough for the shell; KILL whatever of the group is left (children that ignore TERM).
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
