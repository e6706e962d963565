"""Object-store failures say why (issue 29, item 7): unknown option (listing the valid ones, in
the user's spelling), refused connection, timeout (how long, which option), plain http without
AWS_ALLOW_HTTP, missing bucket. Local sockets stand in for broken endpoints; the bucket case uses
the SeaweedFS server."""

from __future__ import annotations

import socket

import pytest

import trimerge
from trimerge.lineage.errors import StorageError

BASE = {"access_key_id": "a", "secret_access_key": "b", "region": "us-east-1"}


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _open_error(options: dict, uri: str = "s3://bucket/repo") -> str:
    with pytest.raises(StorageError) as exc:
        trimerge.Repository.open(uri, storage_options=options)
    text = str(exc.value)
    assert "\n" not in text and "Debug source" not in text and "UnknownConfigurationKey {" not in text
    return text


def test_unknown_option_lists_the_valid_ones_in_the_users_spelling():
    text = _open_error({**BASE, "nosuchkey": "1"})
    assert "unknown storage option 'nosuchkey'" in text and "aws_nosuchkey" not in text
    assert "endpoint" in text and "allow_http" in text and "access_key_id" in text


def test_refused_connection():
    text = _open_error({**BASE, "endpoint": f"http://127.0.0.1:{_free_port()}", "allow_http": "true"})
    assert "cannot be reached" in text and "refused" in text


def test_plain_http_without_allow_http_says_how_to_allow_it(monkeypatch):
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    text = _open_error({**BASE, "endpoint": f"http://127.0.0.1:{_free_port()}"})
    assert "plain http" in text and "AWS_ALLOW_HTTP" in text and "allow_http=true" in text


def test_endpoint_that_never_answers_times_out_and_says_which_option_sets_it():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        text = _open_error({**BASE, "endpoint": f"http://127.0.0.1:{silent.getsockname()[1]}", "allow_http": "true",
                            "timeout": "300ms"})
    finally:
        silent.close()
    assert "timed out" in text and "gave up after" in text and "timeout" in text and "TRIMERGE_STORE_TIMEOUT" in text


@pytest.mark.s3
def test_missing_bucket(s3_server):
    options = dict(s3_server.storage_options)
    text = _open_error(options, "s3://no-such-bucket-here/repo")
    assert "bucket" in text and ("does not exist" in text or "not found" in text), text


@pytest.mark.s3
def test_denied(s3_server):
    options = {**s3_server.storage_options, "secret_access_key": "wrong"}
    options.pop("aws_secret_access_key", None)
    text = _open_error(options, s3_server.uri("denied/repo"))
    assert "denied" in text or "authenticated" in text, text
