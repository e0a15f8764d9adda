"""TCP proxies on 127.0.0.1 in front of a test server: forward both ways, see each HTTP request.

Requests are recognised by their request line at the start of a chunk the
client sends, which holds for HTTP/1.1 clients that write each request's
head in one go (Lance's object store and memwal's own S3 client do).
Connections are held by threads in the test process; `close()` releases the
port and every connection.
"""

from __future__ import annotations

import contextlib
import math
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Collection
from urllib.parse import urlsplit

from tests.support.service import LOOPBACK, InProcessListener

_METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")
# The endpoint options of the test servers (SeaweedFS's S3, Azurite's Blob service).
_ENDPOINT_KEYS = ("aws_endpoint", "azure_storage_endpoint")


def retarget(options: dict[str, str], url: str) -> dict[str, str]:
    """`options` (a SeaweedServer's or AzuriteServer's) with the endpoint at `url`, a proxy's (its path,
    Azurite's account, kept)."""
    return {k: url + urlsplit(v).path if k in _ENDPOINT_KEYS else v for k, v in options.items()}


def request_line(chunk: bytes) -> str | None:
    """The request line `chunk` starts with, if it starts an HTTP request."""
    if not chunk.startswith(_METHODS):
        return None
    return chunk.split(b"\r\n", 1)[0].decode(errors="replace")


def user_agent(head: bytes) -> str:
    """The User-Agent a request's head names ("" without one)."""
    found = re.search(rb"(?im)^user-agent:\s*([^\r\n]*)", head)
    return found.group(1).decode(errors="replace") if found else ""


class ForwardingProxy(InProcessListener):
    """Forwards every connection to `upstream_port`; subclasses act on requests and responses."""

    def __init__(self, upstream_port: int, name: str) -> None:
        self.upstream_port = upstream_port
        super().__init__(name)

    def serve(self, connection: socket.socket) -> None:
        upstream = socket.create_connection((LOOPBACK, self.upstream_port))
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.hold(connection)
        self.hold(upstream)
        doomed: list[object] = []  # what on_request chose for this connection's answers
        threading.Thread(target=self._requests, args=(connection, upstream, doomed), daemon=True).start()
        threading.Thread(target=self._responses, args=(upstream, connection, doomed), daemon=True).start()

    def storage_options(self, options: dict[str, str]) -> dict[str, str]:
        """`options` (a SeaweedServer's or AzuriteServer's) with the endpoint pointing at this proxy."""
        return retarget(options, self.url)

    def on_request(self, line: str) -> object:
        """Called before a request is forwarded; anything truthy dooms the answers on this connection."""
        return False

    def on_request_head(self, line: str, head: bytes) -> object:
        """`on_request`, for a proxy that also reads the request's headers (`head`: the chunk it starts)."""
        return self.on_request(line)

    def answer_here(self, line: str) -> bytes | None:
        """A response the proxy gives in the server's place (None: forward the request); the request
        then never reaches the server, and its body is read and dropped."""
        return None

    def answer_doomed(self, choice: object, client: socket.socket) -> bool:
        """The server answered a doomed request (so applied it); False stops forwarding on the connection.

        By default the answer is swallowed and the client times out.
        """
        return True

    def _requests(self, client: socket.socket, upstream: socket.socket, doomed: list[object]) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                line = request_line(chunk)
                answer = self.answer_here(line) if line is not None else None
                if answer is not None:
                    _drop_body(client, chunk)
                    client.sendall(answer)
                    continue
                choice = self.on_request_head(line, chunk) if line is not None else None
                if choice:
                    doomed.append(choice)
                upstream.sendall(chunk)
            upstream.shutdown(socket.SHUT_WR)

    def _responses(self, upstream: socket.socket, client: socket.socket, doomed: list[object]) -> None:
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if not doomed:
                    client.sendall(chunk)
                elif not self.answer_doomed(doomed[0], client):
                    break
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.close()


def _drop_body(client: socket.socket, head: bytes) -> None:
    """Read the rest of the request `head` starts (by its Content-Length), so the connection stays usable."""
    headers, _, body = head.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", headers)
    left = (int(length.group(1)) if length else 0) - len(body)
    while left > 0 and (chunk := client.recv(min(left, 65536))):
        left -= len(chunk)


class LatencyProxy(ForwardingProxy):
    """Holds every request `delay` seconds before forwarding it, like a cloud store's first-byte latency.

    Counts requests by method (`counts`, `total()`) and keeps their request lines
    (`lines`; `reset()` starts over), so a test or benchmark sees every request a
    whole process made, Lance's included, and which object each one named.
    """

    def __init__(self, upstream_port: int, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.counts: Counter[str] = Counter()
        self.lines: list[str] = []
        self._lock = threading.Lock()
        super().__init__(upstream_port, "latency-proxy")

    def on_request(self, line: str) -> bool:
        with self._lock:
            self.counts[line.split(" ", 1)[0]] += 1
            self.lines.append(line)
        if self.delay > 0:
            time.sleep(self.delay)
        return False

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def naming(self, parts: Collection[str]) -> int:
        """Requests whose request line names any of `parts` (e.g. region ids)."""
        with self._lock:
            return sum(1 for line in self.lines if any(part in line for part in parts))

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.lines.clear()


_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class ThrottlingProxy(ForwardingProxy):
    """Answers `503 SlowDown` for `throttled` seconds out of every `period`, as S3 does under a burst.

    Only requests whose request line `matching` finds are throttled (all, by default), and the cycle
    starts with the first of them (so every run meets a throttled stretch at once). A throttled
    request never reaches the server, and its answer's `Retry-After` says when the stretch ends (whole
    seconds, rounded up). `throttled` keeps the request lines answered so; `forwarded` counts the rest.
    """

    def __init__(
        self, upstream_port: int, *, period: float = 6.0, throttled: float = 2.0, matching: str = ""
    ) -> None:
        self.period = period
        self.throttled_for = throttled
        self.matching = re.compile(matching)
        self.throttled: list[str] = []
        self.forwarded = 0
        self._started: float | None = None
        self._lock = threading.Lock()
        super().__init__(upstream_port, "throttling-proxy")

    def answer_here(self, line: str) -> bytes | None:
        if not self.matching.search(line):
            with self._lock:
                self.forwarded += 1
            return None
        with self._lock:
            now = time.monotonic()
            if self._started is None:
                self._started = now
            left = self.throttled_for - (now - self._started) % self.period
            if left <= 0:
                self.forwarded += 1
                return None
            self.throttled.append(line)
        body = b"" if line.startswith("HEAD ") else _SLOW_DOWN
        head = (
            f"HTTP/1.1 503 Slow Down\r\nRetry-After: {math.ceil(left)}\r\n"
            f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def restart(self) -> None:
        """Start a new cycle (throttled first) with the next request, and forget what was counted."""
        with self._lock:
            self._started = None
            self.throttled.clear()
            self.forwarded = 0
