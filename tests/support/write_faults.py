"""A TCP proxy on 127.0.0.1 that answers chosen requests with a 500 after the server applied them.

The request reaches the server and is applied (the object is stored), but
the client sees `500 Internal Server Error` and retries: the lost response a
retrying object-store client cannot tell from a request that never landed.
For a put-if-not-exists (a WAL entry, a region manifest version, a dataset
manifest) the retry then meets the object it wrote itself.

Requests are recognised by their request line at the start of a chunk the
client sends, which holds for HTTP/1.1 clients that write each request's
head in one go (Lance's object store does). Every request line is recorded,
so a test can also say which requests a sequence of calls made.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
from dataclasses import dataclass, field

from tests.support.service import LOOPBACK, InProcessListener

_FAILED = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass
class Fault:
    """Fail matching requests: `method` and a regex over the path; which matches (1-based), or every `every`-th."""

    method: str
    path: str
    nth: frozenset[int] = frozenset({1})
    every: int = 0
    # "500": the client reads a server error; "reset": its connection is reset (RST) with no answer.
    answer: str = "500"
    seen: int = 0
    failed: list[str] = field(default_factory=list)

    def chooses(self, method: str, path: str) -> bool:
        if method != self.method or not re.search(self.path, path):
            return False
        self.seen += 1
        return self.seen in self.nth or (self.every > 0 and self.seen % self.every == 0)


class ResponseFaults(InProcessListener):
    """Forwards to `upstream_port`; a request a fault chooses is applied, then answered with a 500."""

    def __init__(self, upstream_port: int, faults: list[Fault] | None = None) -> None:
        self.upstream_port = upstream_port
        self.faults = list(faults or [])
        self.requests: list[str] = []  # every request line, in arrival order
        self._lock = threading.Lock()
        super().__init__("response-faults")

    @property
    def failed(self) -> list[str]:
        """Request lines answered with a 500, fault by fault."""
        return [line for fault in self.faults for line in fault.failed]

    def serve(self, connection: socket.socket) -> None:
        upstream = socket.create_connection((LOOPBACK, self.upstream_port))
        self.hold(connection)
        self.hold(upstream)
        doomed: list[Fault] = []
        threading.Thread(target=self._requests, args=(connection, upstream, doomed), daemon=True).start()
        threading.Thread(target=self._responses, args=(upstream, connection, doomed), daemon=True).start()

    def _chosen(self, chunk: bytes) -> Fault | None:
        head = chunk.split(b"\r\n", 1)[0].decode(errors="replace")
        parts = head.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return None  # a body chunk, not a request's head
        with self._lock:
            self.requests.append(head)
            for fault in self.faults:
                if fault.chooses(parts[0], parts[1]):
                    fault.failed.append(head)
                    return fault
        return None

    def _requests(self, client: socket.socket, upstream: socket.socket, doomed: list[Fault]) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                fault = self._chosen(chunk)
                if fault is not None:
                    doomed.append(fault)
                upstream.sendall(chunk)
            upstream.shutdown(socket.SHUT_WR)

    def _responses(self, upstream: socket.socket, client: socket.socket, doomed: list[Fault]) -> None:
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if doomed:
                    # The server has answered the chosen request, so it applied it; the client never hears so.
                    if doomed[0].answer == "reset":
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    else:
                        client.sendall(_FAILED)
                    break
                client.sendall(chunk)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.close()
