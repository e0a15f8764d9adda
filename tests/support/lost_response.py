"""A TCP proxy on 127.0.0.1 that loses the response to one chosen request.

The request reaches the server and is applied; its answer never reaches the
client, which times out. That is the fault a retrying object-store client
cannot tell from a request that never arrived.
"""

from __future__ import annotations

import threading

from tests.support.proxy import ForwardingProxy


class LoseOneResponse(ForwardingProxy):
    """Forwards to `upstream_port`; drops the response to the first `method` request whose path holds `path_part`."""

    def __init__(self, upstream_port: int, *, method: str, path_part: str) -> None:
        self._prefix = f"{method} "
        self._path_part = path_part
        self.lost: list[str] = []  # request lines whose responses were dropped
        self._armed = threading.Lock()
        super().__init__(upstream_port, "lose-one-response")

    def on_request(self, line: str) -> bool:
        """Whether `line` is the chosen request, which only the first match is."""
        if not (line.startswith(self._prefix) and self._path_part in line):
            return False
        if not self._armed.acquire(blocking=False):
            return False
        self.lost.append(line)
        return True
