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


def _resolve(host: str, port: int) -> list[tuple]:
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise ServeError(f"--host {host}: cannot resolve it ({exc})") from None
    if not infos:
        raise ServeError(f"--host {host}: resolves to no address")
    return infos


def _addresses(infos: list[tuple]) -> list[str]:
    return sorted({str(info[4][0]) for info in infos})


def _all_loopback(infos: list[tuple]) -> bool:
    return all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in _addresses(infos))


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (a name is never trusted
    as such: ``localhost`` may resolve anywhere)."""
    try:
        return _all_loopback(_resolve(host, 0))
    except ServeError:
        return False


def bind(host: str, port: int, *, authenticated: bool) -> socket.socket:
    """The listening socket. Without tokens anyone who reaches the port may read and write every
    branch, so only loopback is allowed then: every address the host resolves to must be one, and
    the socket binds the address checked (the name is not resolved again)."""
    infos = _resolve(host, port)
    if not authenticated and not _all_loopback(infos):
        raise ServeError(f"--host {host}: without --token-file trimerge serve listens on loopback only "
                         f"(127.0.0.1, ::1), and {host} resolves to {', '.join(_addresses(infos))}; give a "
                         f"--token-file to serve other hosts")
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
    # it started: that one ends the process quietly, so a requested stop exits 0. A SIGTERM that
    # comes after "listening" but before uvicorn has its own handlers stops it as well.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server, "should_exit", True))
    if ready is not None:
        ready(url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        signal.signal(signal.SIGTERM, previous)
    print("trimerge serve: stopped", file=sys.stderr, flush=True)
