"""A TCP proxy on 127.0.0.1 in front of a real S3 server that answers slowly or trickles.

The sick storage no idle timeout notices: `delay` holds every response back
that many seconds before its first byte (an overloaded endpoint), and
`byte_interval` sends each response's body one byte at a time, that many
seconds apart, after its headers (a link that trickles). Requests pass
through untouched, so the server applies them as usual. Held in-process by
threads; `close()` releases the port and every connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from tests.support.cli import option_flags
from tests.support.service import LOOPBACK, InProcessListener, forward_requests

_HEAD_END = b"\r\n\r\n"


class SlowProxy(InProcessListener):
    """Forwards to `upstream_port`, each response delayed by `delay` s and its body trickled at `byte_interval`."""

    def __init__(self, upstream_port: int, *, delay: float = 0.0, byte_interval: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.byte_interval = byte_interval
        super().__init__("slow-proxy")

    def serve(self, connection: socket.socket) -> None:
        upstream = socket.create_connection((LOOPBACK, self.upstream_port))
        self.hold(connection)
        self.hold(upstream)
        asked = threading.Event()  # a request went up whose response has not started yet
        threading.Thread(target=self._requests, args=(connection, upstream, asked), daemon=True).start()
        threading.Thread(target=self._responses, args=(upstream, connection, asked), daemon=True).start()

    def storage_options(self, access_key: str, secret_key: str, **extra: str) -> list[str]:
        """`-o` arguments that point a command's S3 table at the server through this proxy."""
        options = {
            "aws_endpoint": self.url,
            "allow_http": "true",
            "aws_access_key_id": access_key,
            "aws_secret_access_key": secret_key,
            "aws_region": "us-east-1",
            "aws_virtual_hosted_style_request": "false",
            **extra,
        }
        return option_flags(options)

    def _requests(self, client: socket.socket, upstream: socket.socket, asked: threading.Event) -> None:
        forward_requests(client, upstream, lambda _chunk: asked.set())

    def _responses(self, upstream: socket.socket, client: socket.socket, asked: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if asked.is_set():  # the first bytes of a response: its head, then its body
                    asked.clear()
                    time.sleep(self.delay)
                    head, sep, body = chunk.partition(_HEAD_END)
                    client.sendall(head + sep)
                    chunk = body
                self._send(client, chunk)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.close()

    def _send(self, client: socket.socket, data: bytes) -> None:
        if not self.byte_interval:
            client.sendall(data)
            return
        for index in range(len(data)):
            client.sendall(data[index : index + 1])
            time.sleep(self.byte_interval)
