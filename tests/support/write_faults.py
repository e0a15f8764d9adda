"""A TCP proxy on 127.0.0.1 that answers chosen requests with a 500 (a reset, or never) after the server applied them.

The request reaches the server and is applied (the object is stored), but
the client sees `500 Internal Server Error` and retries: the lost response a
retrying object-store client cannot tell from a request that never landed.
For a put-if-not-exists (a WAL entry, a region manifest version, a dataset
manifest) the retry then meets the object it wrote itself.

Every request line is recorded, so a test can also say which requests a
sequence of calls made.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from dataclasses import dataclass, field

from tests.support.proxy import ForwardingProxy, user_agent

_FAILED = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass
class Fault:
    """Fail matching requests: `method` ("" for any) and a regex over the path (and one over the User-Agent);
    which matches (1-based), or every `every`-th."""

    method: str
    path: str
    nth: frozenset[int] = frozenset({1})
    every: int = 0
    # "500": the client reads a server error; "reset": its connection is reset (RST) with no answer;
    # "silent": no answer ever comes on the connection (a store that accepts and never answers).
    answer: str = "500"
    agent: str = ""
    seen: int = 0
    failed: list[str] = field(default_factory=list)

    def chooses(self, method: str, path: str, agent: str = "") -> bool:
        if (
            self.method not in ("", method)
            or not re.search(self.path, path)
            or not re.search(self.agent, agent)
        ):
            return False
        self.seen += 1
        return self.seen in self.nth or (self.every > 0 and self.seen % self.every == 0)


class ResponseFaults(ForwardingProxy):
    """Forwards to `upstream_port`; a request a fault chooses is applied, then answered as the fault says."""

    def __init__(self, upstream_port: int, faults: list[Fault] | None = None) -> None:
        self.faults = list(faults or [])
        self.requests: list[str] = []  # every request line, in arrival order
        self._lock = threading.Lock()
        super().__init__(upstream_port, "response-faults")

    @property
    def failed(self) -> list[str]:
        """Request lines answered with a fault, fault by fault."""
        return [line for fault in self.faults for line in fault.failed]

    def on_request_head(self, line: str, head: bytes) -> Fault | None:
        method, _, rest = line.partition(" ")
        path = rest.rsplit(" ", 1)[0]
        with self._lock:
            self.requests.append(line)
            for fault in self.faults:
                if fault.chooses(method, path, user_agent(head)):
                    fault.failed.append(line)
                    return fault
        return None

    def answer_doomed(self, choice: object, client: socket.socket) -> bool:
        assert isinstance(choice, Fault)
        if choice.answer == "silent":
            return True
        if choice.answer == "reset":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            client.sendall(_FAILED)
        return False
