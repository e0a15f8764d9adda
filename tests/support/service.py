"""What the loopback test servers share: free ports, process-group shutdown, log tails, lifecycle.

`tests.support.seaweed` and `tests.support.spark` each start real server
processes on 127.0.0.1 in a private temp directory. Their start-up has the
same hazards (a port taken between `free_ports` and the bind, a process
dying before it is ready, a test run ending without `stop()`), so the
retry, clean-up and ownership rules live once here in `LoopbackService`.
Every server process starts through `start_server`, in a process group that
a watchdog (`tests/support/watchdog.py`) ends if the test process dies first.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from tests.support.watchdog import started

LOOPBACK = "127.0.0.1"
_WATCHDOG = Path(__file__).with_name("watchdog.py")
# This process's watchdog and the process that started it (a forked child starts its own).
_watchdog: tuple[int, subprocess.Popen[bytes]] | None = None
_watchdog_lock = threading.Lock()


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that are free on 127.0.0.1 right now.

    All sockets are held open together so the kernel cannot hand out the
    same port twice; another process may still take one before the server
    binds it, which is why servers here retry start-up with fresh ports.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tell_watchdog(line: str) -> None:
    global _watchdog
    with _watchdog_lock:
        if _watchdog is None or _watchdog[0] != os.getpid() or _watchdog[1].poll() is not None:
            watchdog = subprocess.Popen(
                [sys.executable, "-I", str(_WATCHDOG)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
            _watchdog = (os.getpid(), watchdog)
        pipe: IO[bytes] | None = _watchdog[1].stdin
        assert pipe is not None
        pipe.write(f"{line}\n".encode())
        pipe.flush()


def watch_group(pid: int) -> None:
    """Have the process group of server process `pid` ended if this process ends (even by `kill -9`)
    before `end_group`; the watchdog ends it only while `pid` still runs in it."""
    with contextlib.suppress(ProcessLookupError):
        _tell_watchdog(f"+{os.getpgid(pid)} {pid} {started(pid)}")


def end_group(pgid: int) -> None:
    """SIGKILL what is left of process group `pgid`, one PID at a time, and stop watching it.

    By PID, not `killpg`: once its leader is reaped the group id may be reused.
    """
    for pid in _group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _tell_watchdog(f"-{pgid}")


def start_server(command: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(command, **popen)` in a new session (its PID is its process-group id, and its
    children join that group), which dies with this process: the one way tests start a server."""
    process: subprocess.Popen[bytes] = subprocess.Popen(list(command), start_new_session=True, **popen)
    watch_group(process.pid)
    return process


def stop_process_group(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM the process group led by `process`, then SIGKILL it if it outlives `timeout`.

    The servers are started by `start_server`, so their PID is also their
    process-group id and the group holds every child they spawn (Spark
    executors, Python workers), which must not outlive the test run.
    """
    pgid = process.pid
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
    if process.poll() is None:
        # The leader is not yet reaped, so the group id cannot belong to anyone else.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        process.wait(timeout=timeout)
    end_group(pgid)  # children that outlived a graceful leader


def processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process (Linux /proc; empty elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command name: state, ppid, pgrp, ...
            fields = entry.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2:
            found.append((int(entry.parent.name), int(fields[1]), int(fields[2])))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children before their own children."""
    children: dict[int, list[int]] = {}
    for child, parent, _group in processes():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        found += frontier
    return found


def crash(pid: int, *, grace: float = 10.0) -> list[int]:
    """kill -9 of `pid`, then what systemd does when a unit's main process dies: SIGTERM to the rest of
    the unit (here every process below `pid`, found before the kill orphans them), SIGKILL to those
    alive `grace` seconds later. The PIDs signalled, `pid` first."""
    rest = descendants(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    end_unit(rest, grace=grace)
    return [pid, *rest]


def end_unit(rest: Sequence[int], *, grace: float = 10.0) -> None:
    """What systemd does to the rest of a unit whose main process died: SIGTERM to `rest`, SIGKILL to
    those alive `grace` seconds later."""
    for member in rest:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(member) for member in rest):
        time.sleep(0.1)
    for member in rest:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _group_members(pgid: int) -> list[int]:
    """PIDs whose process group is `pgid`."""
    return [pid for pid, _parent, group in processes() if group == pgid]


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a server log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def forward_requests(client: socket.socket, upstream: socket.socket, seen: Callable[[bytes], None]) -> None:
    """A proxy's request direction: every chunk the client sends goes upstream, after `seen(chunk)`."""
    with contextlib.suppress(OSError):
        while chunk := client.recv(65536):
            seen(chunk)
            upstream.sendall(chunk)
        upstream.shutdown(socket.SHUT_WR)


class InProcessListener:
    """A TCP listener on 127.0.0.1 whose connections one thread accepts and `serve` handles.

    For fake endpoints that live in the test process (no server binary):
    `close()` releases the port and every connection `hold` was given.
    """

    def __init__(self, name: str) -> None:
        self._held: list[socket.socket] = []
        self._listener = socket.create_server((LOOPBACK, 0), backlog=512)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=name, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def hold(self, connection: socket.socket) -> None:
        """Keep `connection` until `close()`."""
        self._held.append(connection)

    def serve(self, connection: socket.socket) -> None:
        """Handle a new connection without blocking the accept loop; this one holds it, silent."""
        self.hold(connection)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener was closed
            while True:
                connection, _ = self._listener.accept()
                self.serve(connection)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the thread blocked in accept(); close() alone does not
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in self._held:
            with contextlib.suppress(OSError):
                connection.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class EarlyExit(Exception):
    """A server process exited before it became ready (often a port taken since `free_ports`).

    Raised by `LoopbackService._attempt`; `start()` then retries on fresh ports.
    """


class LoopbackService:
    """Lifecycle of server processes on loopback, owned by the process that created them.

    Subclasses launch and probe their processes through the hooks below;
    this class retries start-up when a process exits early, cleans up when
    start-up fails, stops the processes at interpreter exit if nobody else
    did, and removes the private temp directory `root` on `stop()`.
    """

    # Start-up tries before giving up; each try runs on fresh ports.
    start_attempts = 3

    def __init__(
        self,
        *,
        prefix: str,
        start_timeout: float,
        base_dir: str | os.PathLike[str] | None,
    ) -> None:
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir))
        self.startup_seconds: float | None = None
        # A forked child inherits this object but must not stop what it did not start.
        self._owner_pid = os.getpid()

    def start(self) -> Self:
        """Launch the processes and block until they are ready; a no-op while they run.

        Retries with fresh ports when a process exits during start-up, which
        covers the small race in `free_ports`. Any failure stops whatever
        was started before it propagates.
        """
        if self._running():
            return self
        began = time.monotonic()
        try:
            self.root.mkdir(parents=True, exist_ok=True)  # again, after a stop()
            self._prepare()
            for attempt in range(1, self.start_attempts + 1):
                try:
                    self._attempt(attempt)
                    break
                except EarlyExit as exc:
                    # Read the logs before `_discard_attempt` stops the survivors and adds to them.
                    failure = self._startup_failure(exc) if attempt == self.start_attempts else None
                    self._discard_attempt()
                    if failure is not None:
                        raise RuntimeError(failure) from None
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        atexit.register(self.stop)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the processes by process group (SIGTERM, then SIGKILL) and delete the temp dir.

        A no-op in a forked child: only the process that started the service owns it.
        """
        if os.getpid() != self._owner_pid:
            return
        atexit.unregister(self.stop)
        self._release(timeout)
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def pid(self) -> int | None:
        """The main process's PID while it runs (the one a systemd unit would name)."""
        raise NotImplementedError

    @property
    def live_pid(self) -> int | None:
        """The main process's PID, None once it died (a crash, a kill by hand)."""
        return self.pid if self._running() else None

    def crash(self) -> None:
        """kill -9 of the main process, as its unit sees a crash (`crash` above); its files and ports stay
        for `restart`."""
        pid = self.pid
        if pid is not None:
            crash(pid)
        deadline = time.monotonic() + 30
        while self._running() and time.monotonic() < deadline:  # polling reaps it
            time.sleep(0.05)

    def restart(self) -> None:
        """Start the service again where it ran (same ports and data) after a `crash`, as its unit's
        Restart= would, and block until it is ready."""
        self._relaunch()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- hooks for subclasses ----------------------------------------------------------------

    def _running(self) -> bool:
        """Whether the service is up, so `start()` has nothing to do."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """One-time set-up in `root` before the first attempt (configuration files)."""

    def _attempt(self, attempt: int) -> None:
        """Launch the processes on fresh ports and wait until they are ready.

        Raises `EarlyExit` if a process exits first, `TimeoutError` (naming
        the logs) if they are not ready within `start_timeout`.
        """
        raise NotImplementedError

    def _relaunch(self) -> None:
        """Launch the processes again on the ports and data of the last attempt, and wait until ready."""
        raise NotImplementedError

    def _discard_attempt(self) -> None:
        """Clean up after an attempt that ended in `EarlyExit`, before the next one."""

    def _startup_failure(self, exc: EarlyExit) -> str:
        """The message, naming the logs, when the last attempt ended in `exc`."""
        raise NotImplementedError

    def _release(self, timeout: float) -> None:
        """Stop every process (each within `timeout`) and close the logs; `root` is removed after."""
        raise NotImplementedError
