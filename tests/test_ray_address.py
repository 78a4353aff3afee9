"""A --ray-address whose port takes connections but is not a Ray head (a web server, a
database, a port that says nothing) is refused in one line at once, not after Ray's own
join has waited tens of seconds; a server that answers as gRPC does passes."""

import socket
import threading

import pytest

pytest.importorskip("ray")

from autotune_cli.errors import UserError  # noqa: E402
from autotune_cli.scaleout import ray as ray_scaleout  # noqa: E402


def serve(reply: bytes | None):
    """A local TCP server that reads the client's first bytes and sends `reply` (None:
    nothing, the connection held open); its address as host:port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def run():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(64)
            if reply is None:
                held.append(conn)
            else:
                conn.sendall(reply)
                conn.close()

    threading.Thread(target=run, daemon=True).start()
    return server, f"127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b"", None],
                         ids=["http1", "closes", "silent"])
def test_a_port_that_is_not_a_ray_head_is_one_line(reply, monkeypatch):
    monkeypatch.setattr(ray_scaleout, "CONNECT_TIMEOUT_S", 0.5)
    server, address = serve(reply)
    try:
        with pytest.raises(UserError) as caught:
            ray_scaleout.check_address(address)
        assert f"--ray-address '{address}': {address} answers, but not as a Ray head" in str(caught.value)
        with pytest.raises(UserError):
            ray_scaleout.check_address(f"ray://{address}")
    finally:
        server.close()


def test_a_server_that_answers_as_grpc_passes():
    settings = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an empty SETTINGS frame, as a gRPC server opens
    server, address = serve(settings)
    try:
        ray_scaleout.check_address(address)
        ray_scaleout.check_address(f"ray://{address}")
    finally:
        server.close()


def test_under_rays_tls_the_port_is_left_to_ray(monkeypatch):
    """With RAY_USE_TLS the head wants a TLS handshake before any gRPC: an HTTP/2 opening
    proves nothing there, so a port that takes connections passes to Ray's own join."""
    monkeypatch.setenv("RAY_USE_TLS", "1")
    server, address = serve(b"")
    try:
        ray_scaleout.check_address(address)
    finally:
        server.close()
