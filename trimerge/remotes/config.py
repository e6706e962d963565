"""``repo.remotes``: named remote repositories, kept in ``_trimerge/remotes/<name>.json`` ({name, uri,
and the storage options that say where and how to connect, never credentials}).

A remote's name is one identifier-like word (no ``/``: ``REMOTE/BRANCH`` names a remote-tracking
ref, and branch names may contain ``/``). Its branches as last fetched or pushed are the
remote-tracking refs of :class:`~trimerge.lineage.history.refs.RefStore`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from trimerge.lineage.errors import AlreadyExistsError, InvalidNameError, InvalidOperationError, RemoteError
from trimerge.lineage.storage.location import Location

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

FOLDER = "remotes"
ORIGIN = "origin"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def validate_remote_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith((".", ".lock")) or ".." in name \
            or name == "HEAD":
        raise InvalidNameError(f"invalid remote name {name!r}: use a letter or '_' then letters, digits, '_', '.' "
                               "or '-' (at most 64, no '/')")
    return name


#: Storage options a remote keeps (where and how to connect: an endpoint, a region, plain http...),
#: with or without the store's prefix (``aws_``, ``azure_``, ``google_``). Anything else — keys,
#: secrets, tokens, SAS keys, service accounts, a proxy URL that may carry a password — is a
#: credential or may be one: it comes from the environment or the call, and is never written down.
CONNECTION_OPTIONS = frozenset({
    "endpoint", "endpoint_url", "region", "default_region", "bucket", "virtual_hosted_style_request",
    "skip_signature", "checksum_algorithm", "conditional_put", "unsigned_payload", "s3_express",
    "request_payer", "copy_if_not_exists", "disable_tagging", "imdsv1_fallback", "metadata_endpoint",
    "account_name", "storage_account_name", "use_emulator", "storage_use_emulator", "container_name",
    "use_azure_cli", "use_fabric_endpoint", "allow_http", "allow_invalid_certificates", "connect_timeout",
    "timeout", "user_agent", "http1_only", "http2_only",
})
_STORE_PREFIXES = ("aws_", "azure_", "google_")


#: ``scheme://userinfo@``: what a URL may carry before its host. Object stores take no credentials
#: there (they come from the environment or storage options); only Azure's ``abfs[s]://`` puts a
#: container before an ``@``, without a ``:``.
#: (The user information runs to the last ``@`` before the path: a password may hold one.)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s'\"]+)@")
_CONTAINER_AT = ("abfs://", "abfss://")


def _is_credential(scheme: str, userinfo: str) -> bool:
    return ":" in userinfo or scheme.lower() not in _CONTAINER_AT


def has_credentials(uri: object) -> bool:
    """Whether ``uri`` carries credentials before its host (``s3://KEY:SECRET@bucket/p``)."""
    return isinstance(uri, str) and any(_is_credential(m["scheme"], m["userinfo"]) for m in _USERINFO.finditer(uri))


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***`` (``s3://***@bucket/p``):
    never printed, logged or written down."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@" if _is_credential(m["scheme"], m["userinfo"]) else m[0], text)


def refuse_credentials(uri: object, what: str) -> None:
    """Refuse (:class:`RemoteError`) a URI that carries credentials, naming it without them."""
    if has_credentials(uri):
        raise RemoteError(f"{what} {redact(str(uri))!r}: a URI carries no credentials here (they would be printed "
                          "and written down): give them through the environment (AWS_ACCESS_KEY_ID...) or "
                          "--storage-option / storage_options")


def is_connection_option(key: str) -> bool:
    """Whether storage option ``key`` says where and how to connect (kept with a remote) rather than
    who connects (a credential, never kept)."""
    bare = key.lower()
    for prefix in _STORE_PREFIXES:
        if bare.startswith(prefix):
            bare = bare[len(prefix):]
            break
    return bare in CONNECTION_OPTIONS


def connection_options(options: Mapping[str, str] | None) -> tuple[dict[str, str], list[str]]:
    """(the options a remote may keep, the names of those it must not: credentials), of ``options``."""
    kept: dict[str, str] = {}
    withheld: list[str] = []
    for key, value in (options or {}).items():
        if is_connection_option(str(key)):
            kept[str(key)] = str(value)
        else:
            withheld.append(str(key))
    return kept, sorted(withheld)


@dataclass(frozen=True)
class Remote:
    """A remote: its name, URI and the storage options it keeps (see :data:`CONNECTION_OPTIONS`)."""

    name: str
    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "uri": redact(self.uri)}  # (a hand-edited document's too)
        if self.storage_options:
            out["storage_options"] = dict(self.storage_options)
        return out

    def options_with(self, given: Mapping[str, str] | None) -> dict[str, str] | None:
        """The options to open the remote with: the kept ones, overridden by those of the call."""
        merged = {**self.storage_options, **(given or {})}
        return merged or None


class Remotes:
    """``repo.remotes``: add, list, get and remove remotes."""

    def __init__(self, repo: "Repository"):
        self.repo = repo

    @staticmethod
    def key(name: str) -> str:
        return f"{FOLDER}/{name}.json"

    def add(self, name: str, uri: str, storage_options: Mapping[str, str] | None = None) -> Remote:
        """Record remote ``name`` at ``uri`` (a directory, ``s3://``, ``az://``...) and the storage
        options that say where and how to connect to it (``endpoint``, ``region``, ``allow_http``...,
        :data:`CONNECTION_OPTIONS`); fetch, pull and push use them. Credentials are refused here
        (:class:`RemoteError`): they would be written into the repository; give them through the
        environment or the ``storage_options`` of each call."""
        self.repo.check_writable()
        validate_remote_name(name)
        refuse_credentials(uri, f"remote {name!r}:")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise RemoteError(f"remote {name!r}: storage_options must be a mapping of option names to strings")
        kept, withheld = connection_options(storage_options)
        if withheld:
            raise RemoteError(f"remote {name!r}: a remote keeps only where and how to connect, not "
                              f"{', '.join(repr(k) for k in withheld)} (a credential, or may be one): give it through "
                              "the environment or the storage_options of fetch, pull and push")
        try:
            location = Location.parse(uri)
        except InvalidOperationError as exc:
            raise RemoteError(f"remote {name!r}: {exc}") from None
        if location.same_place(self.repo.uri):
            raise RemoteError(f"remote {name!r} would be this repository itself ({self.repo.uri})")
        remote = Remote(name, location.uri, {} if location.is_local else kept)
        if self.repo.docs.create(self.key(name), remote.to_json()) is None:
            raise AlreadyExistsError(f"remote {name!r} exists already (remove it first)")
        return remote

    def get_or_none(self, name: str) -> Remote | None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            return None
        doc = self.repo.docs.get(self.key(name))
        if not isinstance(doc, dict) or not isinstance(doc.get("uri"), str):
            return None
        saved = doc.get("storage_options")
        kept = connection_options(saved)[0] if isinstance(saved, dict) else {}  # (never a credential, even if edited in)
        return Remote(name, doc["uri"], kept)

    def get(self, name: str) -> Remote:
        validate_remote_name(name)
        remote = self.get_or_none(name)
        if remote is None:
            known = ", ".join(r.name for r in self.list()) or "none; add one with 'trimerge remote add NAME URI'"
            raise RemoteError(f"no remote {name!r} (remotes: {known})")
        return remote

    def list(self) -> list[Remote]:
        names = [k.rsplit("/", 1)[1].removesuffix(".json") for k in self.repo.docs.list(FOLDER)]
        return [r for r in (self.get_or_none(n) for n in sorted(names)) if r is not None]

    def remove(self, name: str) -> Remote:
        """Forget remote ``name`` and its remote-tracking refs."""
        self.repo.check_writable()
        remote = self.get(name)
        for branch in self.repo.refs.tracking_names(name):
            self.repo.refs.set_tracking(name, branch, None)
        self.repo.docs.delete(self.key(name))
        return remote

    def __iter__(self):
        return iter(self.list())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get_or_none(name) is not None
