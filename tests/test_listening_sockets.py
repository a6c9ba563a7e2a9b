"""The web workers' listening sockets: one port, connections spread over the workers."""

from __future__ import annotations

import errno
import socket
import sys
from contextlib import ExitStack

import pytest

from clock_server.runtime.sockets import listening_sockets

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_REUSEPORT spreads on Linux")


def accept_all(listener: socket.socket) -> list[socket.socket]:
    listener.setblocking(False)
    accepted = []
    while True:
        try:
            accepted.append(listener.accept()[0])
        except BlockingIOError:
            return accepted


def test_each_worker_gets_its_own_socket_on_one_port() -> None:
    listeners = listening_sockets("127.0.0.1", 0, 3)
    try:
        assert len({id(listener) for listener in listeners}) == 3
        assert len({listener.getsockname() for listener in listeners}) == 1
    finally:
        for listener in listeners:
            listener.close()


def test_connections_are_spread_over_every_socket() -> None:
    listeners = listening_sockets("127.0.0.1", 0, 3)
    port = listeners[0].getsockname()[1]
    with ExitStack() as stack:
        for listener in listeners:
            stack.callback(listener.close)
        for _ in range(60):
            stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        counts = []
        for listener in listeners:
            accepted = accept_all(listener)
            counts.append(len(accepted))
            for connection in accepted:
                stack.callback(connection.close)
    # by the kernel's hash of each connection's addresses: about 20 each, never 0 in practice
    assert sum(counts) == 60 and min(counts) > 0, counts


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_another_server_holds_is_refused(reuse_port: bool) -> None:
    taken = socket.create_server(("127.0.0.1", 0), reuse_port=reuse_port)
    with taken, pytest.raises(OSError) as refused:
        listening_sockets("127.0.0.1", taken.getsockname()[1], 2)
    assert refused.value.errno == errno.EADDRINUSE


def test_a_second_server_on_the_same_port_is_refused() -> None:
    listeners = listening_sockets("127.0.0.1", 0, 2)
    try:
        with pytest.raises(OSError) as refused:
            listening_sockets("127.0.0.1", listeners[0].getsockname()[1], 2)
        assert refused.value.errno == errno.EADDRINUSE
    finally:
        for listener in listeners:
            listener.close()
