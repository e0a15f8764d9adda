"""A TCP proxy on 127.0.0.1 that holds one chosen request back until the test releases it.

A race made deterministic: the client has sent the request (a claim's
manifest PUT, say) and waits, while the test lets another client act on the
store directly; the held request then reaches the server as if it had lost
the race by a hair.
"""

from __future__ import annotations

import threading

from tests.support.proxy import ForwardingProxy


class HoldOneRequest(ForwardingProxy):
    """Forwards to `upstream_port`; the first `method` request whose path holds `path_part` waits for `release()`."""

    def __init__(self, upstream_port: int, *, method: str, path_part: str, timeout: float = 60.0) -> None:
        self._prefix = f"{method} "
        self._path_part = path_part
        self._timeout = timeout
        self.arrived = threading.Event()  # the chosen request is being held
        self._released = threading.Event()
        self._armed = threading.Lock()
        super().__init__(upstream_port, "hold-one-request")

    def on_request(self, line: str) -> bool:
        if line.startswith(self._prefix) and self._path_part in line and self._armed.acquire(blocking=False):
            self.arrived.set()
            self._released.wait(self._timeout)
        return False

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self.release()
        super().close()
