"""A small fault-injecting TCP proxy on 127.0.0.1, between the soak's clients and SeaweedFS.

Object-store clients retry, reconnect and time out; the suite must show that
none of that loses an acknowledged write. The proxy forwards bytes both ways
and, at configured rates, delays a chunk, resets a connection (RST, mid
request or mid response: a put may have landed although the client saw an
error) or drops a new connection (closed before any byte is forwarded). It
runs an asyncio loop in one daemon thread; `faults` can be switched off so
the services drain on a clean network at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class FaultRates:
    """Probabilities per forwarded chunk (delay, reset) and per new connection (drop)."""

    delay: float = 0.05
    max_delay_seconds: float = 0.3
    reset: float = 0.005
    drop: float = 0.02


class FaultProxy:
    """Forward 127.0.0.1:`port` to `upstream`, injecting faults while `faults` is set."""

    def __init__(self, upstream_port: int, rates: FaultRates, *, seed: int = 0) -> None:
        self.upstream_port = upstream_port
        self.rates = rates
        self.faults = threading.Event()
        self.faults.set()
        self.counts: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="soak-proxy", daemon=True)
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(timeout=10)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, then end the thread."""
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def injected(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind != "connections")

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._handle, LOOPBACK, 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        # Python 3.12 waits for connections here; 3.11 returns at once either way.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    def _roll(self, rate: float) -> bool:
        return self.faults.is_set() and self._random.random() < rate

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.counts["connections"] += 1
        if self._roll(self.rates.drop):
            self.counts["dropped"] += 1
            client_w.close()
            return
        try:
            upstream_r, upstream_w = await asyncio.open_connection(LOOPBACK, self.upstream_port)
        except OSError:
            client_w.close()
            return
        pair = (client_w, upstream_w)
        await asyncio.gather(self._pump(client_r, upstream_w, pair), self._pump(upstream_r, client_w, pair))

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                if self._roll(self.rates.delay):
                    self.counts["delayed"] += 1
                    await asyncio.sleep(self._random.uniform(0, self.rates.max_delay_seconds))
                if self._roll(self.rates.reset):
                    self.counts["reset"] += 1
                    for w in pair:
                        _reset(w)
                    return
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for w in pair:
                with contextlib.suppress(Exception):
                    w.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort with an RST (SO_LINGER 0) instead of a FIN, as a crashed peer or middlebox would."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
