"""The HTTP server of `memwal metrics --listen`: aiohttp's, with its connections bounded in number and idle time.

prometheus-client's own server (a ThreadingHTTPServer) holds a thread per
connection and never times one out: 1,014 idle connections used up the
1,024 file descriptors systemd allows by default, and no scrape was
accepted any more. aiohttp comes with every memwal install (s3fs's S3
client is built on it) and serves every connection on one event loop. It
closes a connection that sends no request within `IDLE_TIMEOUT`, the first
one too, and `BoundedServer` closes the oldest connection once more than
`MAX_CONNECTIONS` are open, so idle clients cannot use up the descriptors
the table reads need, and a new scrape is always let in.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Mapping

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

# Prometheus keeps one connection per server scraping; a few more for people with curl.
MAX_CONNECTIONS = 64
# Seconds a connection may wait before (or between) its requests.
IDLE_TIMEOUT = 10.0
# Seconds a stopping server lets the scrapes in progress finish.
SHUTDOWN_SECONDS = 2.0

# Answers a scrape from its headers: the body and its content type. Runs on a thread of its own.
Answer = Callable[[Mapping[str, str]], tuple[bytes, str]]


class BoundedServer(web.Server):
    """aiohttp's low-level server that closes its oldest connections past `MAX_CONNECTIONS`."""

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        for oldest in self.connections[:-MAX_CONNECTIONS]:
            oldest.force_close()


def serve(host: str, port: int, answer: Answer, on_listening: Callable[[], None]) -> None:
    """Serve `answer` at `/metrics` on host:port until SIGTERM or SIGINT; OSError if it cannot listen."""
    asyncio.run(_serve(host, port, answer, on_listening))


async def _serve(host: str, port: int, answer: Answer, on_listening: Callable[[], None]) -> None:
    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path != "/metrics":
            return web.Response(status=404, text="memwal metrics serves /metrics\n")
        body, content_type = await asyncio.to_thread(answer, request.headers)
        response = web.Response(body=body, headers={"Content-Type": content_type})
        response.enable_compression()  # when the scrape accepts gzip, as Prometheus does
        return response

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # No access log: a line per scrape would drown the one line per outage in the unit's log.
    server = BoundedServer(handle, keepalive_timeout=IDLE_TIMEOUT, access_log=None)
    runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        on_listening()
        await stop.wait()
    finally:
        await runner.cleanup()
