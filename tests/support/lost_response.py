"""A TCP proxy on 127.0.0.1 that loses the response to one chosen request.

The request reaches the server and is applied; its answer never reaches the
client, which times out. That is the fault a retrying object-store client
cannot tell from a request that never arrived. Held in-process by threads;
`close()` releases the port and every connection.

Requests are recognised by their request line at the start of a chunk the
client sends, which holds for HTTP/1.1 clients that write each request's
head in one go (Lance's object store does).
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.service import LOOPBACK, InProcessListener, forward_requests


class LoseOneResponse(InProcessListener):
    """Forwards to `upstream_port`; drops the response to the first `method` request whose path holds `path_part`."""

    def __init__(self, upstream_port: int, *, method: str, path_part: str) -> None:
        self.upstream_port = upstream_port
        self._prefix = f"{method} ".encode()
        self._path_part = path_part.encode()
        self.lost: list[str] = []  # request lines whose responses were dropped
        self._armed = threading.Lock()
        super().__init__("lose-one-response")

    def serve(self, connection: socket.socket) -> None:
        upstream = socket.create_connection((LOOPBACK, self.upstream_port))
        self.hold(connection)
        self.hold(upstream)
        doomed = threading.Event()
        threading.Thread(target=self._requests, args=(connection, upstream, doomed), daemon=True).start()
        threading.Thread(target=self._responses, args=(upstream, connection, doomed), daemon=True).start()

    def _chosen(self, chunk: bytes) -> bool:
        """Whether `chunk` starts the chosen request, which only the first match is."""
        line = chunk.split(b"\r\n", 1)[0]
        if not (chunk.startswith(self._prefix) and self._path_part in line):
            return False
        if not self._armed.acquire(blocking=False):
            return False
        self.lost.append(line.decode(errors="replace"))
        return True

    def _requests(self, client: socket.socket, upstream: socket.socket, doomed: threading.Event) -> None:
        forward_requests(client, upstream, lambda chunk: doomed.set() if self._chosen(chunk) else None)

    def _responses(self, upstream: socket.socket, client: socket.socket, doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if not doomed.is_set():  # the chosen request's answer is swallowed: the client times out
                    client.sendall(chunk)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.close()
