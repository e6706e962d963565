"""Running the server: the listening socket, the loopback rule, uvicorn, a clean stop on SIGTERM."""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
from typing import Callable

from trimerge.serve.config import ServeConfig

__all__ = ["ServeError", "bind", "is_loopback", "serve"]


class ServeError(Exception):
    """The server cannot start as asked (a non-loopback host without tokens, a port in use, ...)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int, *, authenticated: bool) -> socket.socket:
    """The listening socket. Without tokens anyone who reaches the port may read and write every
    branch, so only loopback is allowed then."""
    if not authenticated and not is_loopback(host):
        raise ServeError(f"--host {host}: without --token-file trimerge serve listens on loopback only "
                         f"(127.0.0.1, ::1); give a --token-file to serve other hosts")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ServeError(f"--host {host}: cannot resolve it ({exc})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(config: ServeConfig, host: str, port: int, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT (uvicorn's handlers: in-flight requests finish, then return)."""
    import uvicorn

    from trimerge.serve.app import build_app

    sock = bind(host, port, authenticated=config.grants is not None)
    app = build_app(config)  # opens the repository: a bad -C or --ref fails before anything listens
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=10))
    # uvicorn stops on SIGTERM, then raises the signal again for the handler that was there before
    # it started: that one ends the process quietly, so a requested stop exits 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if ready is not None:
        ready(url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        signal.signal(signal.SIGTERM, previous)
    print("trimerge serve: stopped", file=sys.stderr, flush=True)
