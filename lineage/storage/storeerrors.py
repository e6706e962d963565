"""Object-store failures in words a user acts on (issue 29, item 7).

obstore's errors carry their cause deep in a debug dump (``kind: Timeout``, ``BadScheme``,
``ConnectionRefused``, a status code); this module reads it and says: an unknown option (listing
the valid ones), an unreachable endpoint, a timeout (after how long, and which option sets it),
plain http without ``AWS_ALLOW_HTTP``, a missing bucket, denied access.
"""

from __future__ import annotations

import re

#: Options users pass (without the store's prefix, which is accepted too), per scheme.
VALID_OPTIONS = {
    "s3": ("access_key_id", "secret_access_key", "session_token", "region", "endpoint", "bucket",
           "virtual_hosted_style_request", "skip_signature", "checksum_algorithm", "conditional_put",
           "unsigned_payload", "imdsv1_fallback", "metadata_endpoint", "s3_express", "request_payer",
           "default_region", "token", "copy_if_not_exists", "disable_tagging"),
    "gs": ("service_account", "service_account_key", "application_credentials", "bucket"),
    "az": ("account_name", "account_key", "client_id", "client_secret", "tenant_id", "sas_key", "token",
           "use_emulator", "endpoint", "container_name", "use_azure_cli", "skip_signature"),
}
CLIENT_OPTIONS = ("allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url",
                  "user_agent", "http1_only", "http2_only")
_PREFIX = {"s3": "aws_", "gs": "google_", "az": "azure_"}


def explain(text: str, scheme: str = "s3", timeout: str = "30s") -> str | None:
    """The cause named in ``text`` (obstore's error, debug dump included), or None."""
    flat = " ".join(text.split())
    scheme = {"abfs": "az", "abfss": "az"}.get(scheme, scheme)
    found = re.search(r"Configuration key: '([^']+)' is not valid", flat)
    if found:
        key = found.group(1)
        prefix = _PREFIX.get(scheme, "")
        shown = key[len(prefix):] if key.startswith(prefix) else key
        valid = ", ".join(sorted(VALID_OPTIONS.get(scheme, ()) + CLIENT_OPTIONS))
        return f"unknown storage option {shown!r} (valid options: {valid})"
    took = re.search(r" in ([0-9.]+)(µs|ms|s)\b", flat)
    after = f" after {float(took.group(1)):.1f}{took.group(2)}" if took else ""
    if "BadScheme" in flat or "builder error" in flat and "http://" in flat:
        variable = {"az": "AZURE_ALLOW_HTTP", "gs": "GOOGLE_ALLOW_HTTP"}.get(scheme, "AWS_ALLOW_HTTP")
        return (f"the endpoint uses plain http, which is refused unless allowed: set {variable}=true "
                "or pass --storage-option allow_http=true (storage_options={'allow_http': 'true'})")
    if "kind: Timeout" in flat or "TimedOut" in flat or "timed out" in flat.lower():
        return (f"the storage endpoint did not answer: timed out (gave up{after}, retries included; the limit per "
                f"request is the 'timeout' storage option, default {timeout}: set it with --storage-option "
                "timeout=60s or TRIMERGE_STORE_TIMEOUT)")
    if scheme == "gs":
        gcs = _explain_gcs_key(flat)
        if gcs is not None:
            return gcs
    if "api/token" in flat or "credential" in flat.lower() and "error" in flat.lower():
        # No keys: the client asked a credential provider (instance metadata), whatever answered.
        if scheme == "gs":
            return ("no credentials found: set GOOGLE_SERVICE_ACCOUNT (a key file's path) or GOOGLE_SERVICE_ACCOUNT_KEY "
                    "(its JSON), or pass service_account / service_account_key as storage options")
        return ("no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the Azure/GCS "
                "equivalents) or pass them as storage options")
    if "ConnectionRefused" in flat or "Connection refused" in flat:
        return "the storage endpoint cannot be reached: the connection was refused (check the endpoint and port)"
    if "dns error" in flat or "failed to lookup address" in flat:
        return "the storage endpoint cannot be reached: its host name does not resolve (check the endpoint)"
    if "NoSuchBucket" in flat or "bucket does not exist" in flat.lower() or "ContainerNotFound" in flat:
        return "the bucket (or container) does not exist"
    if re.search(r"\b403\b|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|Forbidden", flat):
        return "access denied (403): check the credentials and their permissions"
    if re.search(r"\b401\b|Unauthorized", flat):
        return "not authenticated (401): check the credentials"
    if re.search(r"\b404\b|Not Found", flat):
        return "not found (404): the endpoint has no such bucket or path (check the endpoint and the bucket name)"
    if "kind: Connect" in flat or "error sending request" in flat:
        return "the storage endpoint cannot be reached (check the endpoint, the network and AWS_ENDPOINT)"
    return None


def _explain_gcs_key(flat: str) -> str | None:
    """A service-account key GCS's client could not use. The parser's own words are left out: they
    may quote a value of the key."""
    if "DecodeCredentials" in flat or "Unable to decode service account" in flat:
        return ("the GCS service-account key is not a service account's JSON key: pass the key file's JSON as "
                "service_account_key (GOOGLE_SERVICE_ACCOUNT_KEY) or its path as service_account "
                "(GOOGLE_SERVICE_ACCOUNT)")
    if "ReadPem" in flat or "Error reading pem" in flat:
        return "the GCS service-account key's private_key is not a PEM private key (use the key file as downloaded)"
    return None
