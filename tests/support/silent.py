"""A TCP endpoint on 127.0.0.1 that accepts every connection and never answers.

The worst storage endpoint for a client: connects succeed, so only request
time limits end a call. Held in-process by one thread; `close()` releases
the port and every connection it holds.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Self

from tests.support.service import LOOPBACK


class SilentEndpoint:
    """Accepts connections on 127.0.0.1 and holds them open without a byte in reply."""

    def __init__(self) -> None:
        self._listener = socket.create_server((LOOPBACK, 0), backlog=512)
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent-endpoint", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def storage_options(self, **extra: str) -> list[str]:
        """`-o` arguments that point a command's S3 table at this endpoint."""
        options = {
            "aws_endpoint": self.url,
            "allow_http": "true",
            "aws_access_key_id": "silent",
            "aws_secret_access_key": "silent-secret",
            "aws_region": "us-east-1",
            "aws_virtual_hosted_style_request": "false",
            **extra,
        }
        return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener was closed
            while True:
                connection, _ = self._listener.accept()
                self._held.append(connection)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the thread blocked in accept(); close() alone does not
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in self._held:
            connection.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
