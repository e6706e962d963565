"""Browser sessions of the web view: a signed cookie naming a session the server keeps, and the
session's CSRF token.

A browser signs in once with a token of ``--token-file``; the server keeps the session (the grant,
a CSRF token, an expiry) and sends a cookie holding only the session's random id, signed with a key
made at start (``itsdangerous``): a forged or altered cookie fails its signature, an old one its
age, and signing out deletes the session, so a form replayed with the old cookie finds nothing.
Sessions live in the server's memory: a restart signs everyone out.

Every visitor gets a session before signing in (``signed_in`` False), so the sign-in form, like
every form, carries a CSRF token; signing in replaces that session with a new one (a session id
known before sign-in is never the signed-in one). Without ``--token-file`` the anonymous session is
all there is, and it may do everything (the server then listens on loopback only).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner

from trimerge.serve.tokens import Grant

__all__ = ["ANONYMOUS_SECONDS", "COOKIE", "MAX_SESSIONS", "SESSION_SECONDS", "Session", "Sessions"]

COOKIE = "trimerge_ui"
SESSION_SECONDS = 8 * 3600  # a signed-in session: one working day
ANONYMOUS_SECONDS = 3600
MAX_SESSIONS = 10_000  # the oldest go first beyond this (a client that never keeps cookies cannot fill memory)


@dataclass
class Session:
    """One browser's session."""

    sid: str
    csrf: str
    expires: float
    grant: Grant | None = None
    signed_in: bool = False
    notices: list[str] = field(default_factory=list)  # shown once, on the next page (after a redirect)

    @property
    def seconds(self) -> int:
        return max(0, int(self.expires - time.time()))


class Sessions:
    """The sessions of one server run."""

    def __init__(self, secret: bytes | None = None, *, seconds: int = SESSION_SECONDS,
                 anonymous_seconds: int = ANONYMOUS_SECONDS):
        self._signer = TimestampSigner(secret or secrets.token_bytes(32), salt="trimerge-ui-session")
        self.seconds, self.anonymous_seconds = seconds, anonymous_seconds
        self._by_sid: dict[str, Session] = {}
        self._lock = threading.Lock()

    def start(self, grant: Grant | None = None, *, signed_in: bool = False) -> tuple[Session, str]:
        """A new session and the cookie value that names it."""
        seconds = self.seconds if signed_in else self.anonymous_seconds
        session = Session(secrets.token_urlsafe(24), secrets.token_urlsafe(24), time.time() + seconds, grant, signed_in)
        with self._lock:
            self._prune()
            self._by_sid[session.sid] = session
        return session, self._signer.sign(session.sid).decode("ascii")

    def find(self, cookie: str | None) -> tuple[Session | None, str | None]:
        """The live session a cookie names, or None with why not (None when there was no cookie)."""
        if not cookie:
            return None, None
        try:
            sid = self._signer.unsign(cookie.encode("utf-8", "replace"), max_age=self.seconds).decode("ascii")
        except SignatureExpired:
            return None, "your session has expired: sign in again"
        except (BadSignature, UnicodeDecodeError):
            return None, "the session cookie is not one this server signed (forged, or from an earlier run): sign in again"
        with self._lock:
            session = self._by_sid.get(sid)
            if session is not None and session.expires < time.time():
                del self._by_sid[sid]
                return None, "your session has expired: sign in again"
        if session is None:
            return None, "that session has ended (signed out, or the server restarted): sign in again"
        return session, None

    def end(self, session: Session) -> None:
        with self._lock:
            self._by_sid.pop(session.sid, None)

    @staticmethod
    def csrf_ok(session: Session, token: str | None) -> bool:
        """Whether a form's CSRF token is the session's (compared in constant time)."""
        return bool(token) and hmac.compare_digest(session.csrf.encode(), str(token).encode("utf-8", "replace"))

    def _prune(self) -> None:
        now = time.time()
        for sid in [s for s, v in self._by_sid.items() if v.expires < now]:
            del self._by_sid[sid]
        while len(self._by_sid) >= MAX_SESSIONS:
            # anonymous ones first, then the oldest: dicts keep insertion order
            victim = next((s for s, v in self._by_sid.items() if not v.signed_in), next(iter(self._by_sid)))
            del self._by_sid[victim]
