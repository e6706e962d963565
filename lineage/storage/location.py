"""Where a repository lives: a local directory or a prefix in a bucket.

A repository URI is a local path, ``file://PATH``, ``s3://BUCKET/PREFIX``, ``gs://BUCKET/PREFIX``,
``az://CONTAINER/PREFIX`` (also ``abfs://`` and ``abfss://``). Credentials, region and endpoint come
from the environment variables Lance and obstore read (``AWS_ENDPOINT``/``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``; ``AZURE_STORAGE_*``;
``GOOGLE_*``) or from explicit ``storage_options``, which are handed to every Lance call and to the
metadata store alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Mapping

from trimerge.lineage.errors import InvalidOperationError

META_DIR = "_trimerge"
TABLES_DIR = "tables"

OBJECT_STORE_SCHEMES = ("s3", "gs", "az", "abfs", "abfss")

#: Bounds on one object-store request, so a dead endpoint fails in seconds, not minutes.
REQUEST_TIMEOUT = os.environ.get("TRIMERGE_STORE_TIMEOUT", "30s")
CONNECT_TIMEOUT = os.environ.get("TRIMERGE_STORE_CONNECT_TIMEOUT", "5s")
MAX_RETRIES = int(os.environ.get("TRIMERGE_STORE_RETRIES", "3"))

# Environment variables obstore's builders do not read under these names but Lance does.
# (allow_http is an HTTP-client option: obstore's clients get it only when it is passed.)
_ENV_ALIASES = {
    "s3": {"AWS_ENDPOINT_URL": "aws_endpoint", "AWS_ENDPOINT": "aws_endpoint", "AWS_ALLOW_HTTP": "allow_http"},
    "az": {"AZURE_ALLOW_HTTP": "allow_http"}, "abfs": {"AZURE_ALLOW_HTTP": "allow_http"},
    "abfss": {"AZURE_ALLOW_HTTP": "allow_http"}, "gs": {"GOOGLE_ALLOW_HTTP": "allow_http"},
}


# Options that obstore takes as HTTP-client settings rather than store settings (Lance takes both
# kinds in one dict).
_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url",
                "proxy_ca_certificate", "proxy_excludes", "user_agent", "http1_only", "http2_only",
                "pool_idle_timeout", "pool_max_idle_per_host", "default_content_type"}
# obstore's Azure keys mix two prefixes (``azure_storage_account_name``, ``azure_client_id``) and take
# every bare name too (``account_name``, ``client_id``): Azure options pass through as given.
_CONFIG_PREFIX = {"s3": "aws_", "gs": "google_", "az": "", "abfs": "", "abfss": ""}


def client_options(extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"timeout": REQUEST_TIMEOUT, "connect_timeout": CONNECT_TIMEOUT, **(extra or {})}


def retry_config() -> dict[str, Any]:
    return {"max_retries": MAX_RETRIES, "retry_timeout": timedelta(seconds=20)}


@dataclass(frozen=True)
class Location:
    """A parsed repository URI plus the storage options for it."""

    uri: str  # normalised: an absolute local path, or scheme://bucket/prefix without a trailing '/'
    scheme: str  # "file" for local directories
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, uri: str | os.PathLike, storage_options: Mapping[str, str] | None = None) -> "Location":
        text = os.fspath(uri)
        if not isinstance(text, str) or not text.strip():
            raise InvalidOperationError("repository location is empty")
        options = {str(k): str(v) for k, v in (storage_options or {}).items()}
        if text.startswith("file://"):
            text = text[len("file://"):]
        elif "://" in text:
            scheme, rest = text.split("://", 1)
            scheme = scheme.lower()
            if scheme not in OBJECT_STORE_SCHEMES:
                raise InvalidOperationError(
                    f"repository {text!r}: unknown scheme {scheme!r} (use a local path, file://, "
                    f"{', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)})")
            bucket = rest.split("/", 1)[0]
            if not bucket:
                raise InvalidOperationError(f"repository {text!r}: no bucket or container after {scheme}://")
            return cls(f"{scheme}://{rest.strip('/')}", scheme, options)
        if options:
            raise InvalidOperationError("storage options apply to object-store URIs (s3://, gs://, az://) only")
        # Normalised (no `..`): Lance records this path in fork manifests, and fsck and clone compare
        # the paths they find there with it as strings.
        return cls(os.path.abspath(os.path.expanduser(text)), "file", {})

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def path(self) -> Path:
        """The local directory (only for local repositories)."""
        if not self.is_local:
            raise InvalidOperationError(f"{self.uri} is not a local directory")
        return Path(self.uri)

    def join(self, *parts: str) -> str:
        return "/".join([self.uri.rstrip("/"), *parts])

    def ancestors(self) -> list["Location"]:
        """The enclosing folders (prefixes in the bucket), nearest first."""
        if self.is_local:
            return [Location(str(p), "file", {}) for p in Path(self.uri).parents]
        head, _, rest = self.uri.partition("://")
        parts = rest.split("/")
        return [Location(f"{head}://{'/'.join(parts[:n])}", self.scheme, self.storage_options)
                for n in range(len(parts) - 1, 0, -1)]

    def same_place(self, other: str | os.PathLike) -> bool:
        try:
            return Location.parse(other, self.storage_options or None).uri == self.uri
        except InvalidOperationError:
            return False

    def lance_options(self) -> dict[str, str] | None:
        """Options for Lance calls (None on local disk: Lance needs nothing there)."""
        if self.is_local:
            return None
        return dict(self.merged_options())

    def merged_options(self) -> dict[str, str]:
        """Explicit options over the environment's, under the lower-case keys both libraries accept."""
        merged: dict[str, str] = {}
        for env, key in _ENV_ALIASES.get(self.scheme, {}).items():
            if os.environ.get(env) and key not in merged:
                merged[key] = os.environ[env]
        merged.update({k.lower(): v for k, v in self.storage_options.items()})
        return merged

    def obstore_options(self) -> tuple[dict[str, str], dict[str, Any]]:
        """The merged options split into obstore's store config and its HTTP-client options."""
        prefix = _CONFIG_PREFIX[self.scheme]
        config: dict[str, str] = {}
        client: dict[str, str] = {}
        for key, value in self.merged_options().items():
            if key in _CLIENT_KEYS:
                client[key] = value
            else:
                config[key if key.startswith(prefix) else prefix + key] = value
        return config, client_options(client)

    def backend(self, folder: str):
        """The metadata-store backend for ``folder`` of this location."""
        from trimerge.lineage.storage.backends import LocalBackend, ObjectStoreBackend

        if self.is_local:
            return LocalBackend(self.path / folder)
        return ObjectStoreBackend.from_url(self.join(folder), *self.obstore_options())

    def describe(self) -> str:
        return self.uri


def parse_storage_options(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` strings (the CLI's ``--storage-option``) as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidOperationError(f"storage option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out
