"""A webhook receiver for the hook tests: a real HTTP server on 127.0.0.1 in a thread.

It records every request (headers, body, when) and answers from a script: a status code, a
redirect, or a hang (for the timeout tests); by default 200. :meth:`Receiver.verified` checks a
request's signature as a receiver written against the documented header would:
``X-Trimerge-Signature-256: sha256=<hex of HMAC-SHA256(secret, raw body)>``, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def delivery(self) -> str:
        return self.headers["x-trimerge-delivery"]


class Receiver:
    """``url`` to give a hook; ``script``: answers to give, in order (an int status, ``("hang", s)``,
    ``("redirect", url)``); then ``default``."""

    def __init__(self, default: int = 200):
        self.received: list[Received] = []
        self.script: list[Any] = []
        self.default = default
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends every hang at once
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                      body, time.time()))
                    answer = receiver.script.pop(0) if receiver.script else receiver.default
                if isinstance(answer, tuple) and answer[0] == "hang":
                    receiver.release.wait(answer[1])
                    answer = 200
                if isinstance(answer, tuple) and answer[0] == "redirect":
                    self.send_response(302)
                    self.send_header("Location", answer[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                reply = json.dumps({"ok": answer < 300}).encode()
                self.send_response(int(answer))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r.event for r in self.received]

    def unique(self) -> dict[str, Received]:
        """The requests after deduplication by ``X-Trimerge-Delivery`` (first of each)."""
        out: dict[str, Received] = {}
        with self.lock:
            for r in self.received:
                out.setdefault(r.delivery, r)
        return out

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        with self.lock:
            return list(self.received)

    @staticmethod
    def verified(request: Received, secret: bytes) -> bool:
        given = request.headers.get("x-trimerge-signature-256", "")
        expected = "sha256=" + hmac.new(secret, request.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given, expected)
