"""Listening sockets for the web processes."""

from __future__ import annotations

import socket
import sys


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets listening on one port, one per web worker.

    A single shared socket would let whichever worker wakes first accept a whole wave of
    keep-alive connections (seen: 64 of 64 on one of three workers). On Linux each worker gets
    its own socket with SO_REUSEPORT and the kernel spreads connections by their addresses;
    elsewhere they share one.
    """
    if not (sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")):
        shared = socket.create_server((host, port), backlog=2048)
        return [shared] * count
    # Bound first without SO_REUSEPORT, so that a port another server holds (this one started
    # twice, say) is refused here as "address in use" instead of quietly shared with it.
    with socket.create_server((host, port)) as probe:
        port = probe.getsockname()[1]  # port 0 means one free port, the same for all
    return [socket.create_server((host, port), backlog=2048, reuse_port=True) for _ in range(count)]
