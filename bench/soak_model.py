"""The soak suite's model of acknowledged writes, rebuilt from the writers' logs.

Each writer owns a disjoint set of keys (one region's, or those that route
to the regions it owns). Its processes log each operation when it begins and
when it returns; one process does one operation at a time, and a new process
(a restart after a kill, or the replacement of a stalled one) numbers its
operations from its own multiple of `SEQ_STRIDE`, given at its start, so no
two processes share a number even when one logs after a later-started one
(a process stopped before its claim and woken after its replacement wrote).
Operations that overlap in time (a stalled process's write in flight while
its replacement writes) may take effect in either order; others in the order
they ran. So a key may end as the value of any operation that no acknowledged
operation on the key began after: of an acknowledged one, or of one that
failed or never returned (it may or may not have landed; one cut short by a
kill ends where another process of the writer next began in the log). With no acknowledged operation, the key
may also keep its base row. A key whose row is none of these has lost an
acknowledged write (or shows one that was never made).

Log lines (one per event, written with one `write` call and flushed):
`A seq P|D k1,k2,...` before an operation, `K seq` once it returned,
`F seq ERROR` when it raised. A put of sequence number `s` by writer `w`
writes the value `value_of(w, s)` to every key of the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BASE_VALUE = "base"
# Each process of a writer numbers its operations from its own multiple of this.
SEQ_STRIDE = 1_000_000


def base_rows(keys: Sequence[int]) -> dict[int, str]:
    """The rows a writer's keys start with in the base table: the first half of them."""
    return {k: BASE_VALUE for k in keys[: len(keys) // 2]}


def value_of(writer: int, seq: int) -> str:
    """The value a put writes: unique per operation, so a row names the write that produced it."""
    return f"w{writer}s{seq}"


@dataclass
class KeyState:
    """A key's last acknowledged value (None: absent) and the unacknowledged values that may follow it."""

    acked: str | None
    maybe: set[str | None] = field(default_factory=set)

    def allows(self, actual: str | None) -> bool:
        return actual == self.acked or actual in self.maybe


@dataclass
class WriterLog:
    """What one writer's log says: acknowledged and attempted operations, and the next sequence number."""

    writer: int
    acked_ops: int = 0
    acked_rows: int = 0
    failed_ops: int = 0
    next_seq: int = 1
    states: dict[int, KeyState] = field(default_factory=dict)


@dataclass
class _Op:
    """One logged operation: where it began and ended in the log (None: never returned), and how."""

    seq: int
    kind: str
    keys: list[int]
    start: int
    end: float | None = None
    outcome: str | None = None

    @property
    def process(self) -> int:
        return self.seq // SEQ_STRIDE


def parse_log(
    path: Path, writer: int, base: Mapping[int, str], keys: Iterable[int] | None = None
) -> WriterLog:
    """Replay one writer's log over the base rows of its key range."""
    log = WriterLog(writer)
    ops: dict[int, _Op] = {}
    text = path.read_text() if path.exists() else ""
    # A line without its newline was torn by a kill before the operation was tried.
    for index, line in enumerate(text.split("\n")[:-1]):
        parts = line.split(" ")
        if parts[0] == "A" and len(parts) == 4:
            seq = int(parts[1])
            ops[seq] = _Op(seq, parts[2], [int(k) for k in parts[3].split(",") if k], index)
            log.next_seq = max(log.next_seq, seq + 1)
        elif parts[0] in ("K", "F") and len(parts) >= 2 and int(parts[1]) in ops:
            op = ops[int(parts[1])]
            if op.outcome is None:
                op.end, op.outcome = index, parts[0]
    for op in ops.values():
        if op.end is None:  # cut short by a kill (it ends where another process next began), or still running
            later = [o.start for o in ops.values() if o.process != op.process and o.start > op.start]
            op.end = min(later, default=float("inf"))
    by_key: dict[int, list[_Op]] = {k: [] for k in (keys if keys is not None else base)}
    for op in ops.values():
        for k in op.keys:
            by_key.setdefault(k, []).append(op)
        if op.outcome == "K":
            log.acked_ops += 1
            log.acked_rows += len(op.keys)
        elif op.outcome == "F":
            log.failed_ops += 1
    for k, touching in by_key.items():
        acked = [o for o in touching if o.outcome == "K"]
        # The value an acknowledged write must have left (reported as expected), and the others allowed.
        last = max(acked, key=lambda o: o.end or 0, default=None)
        expected = base.get(k) if last is None else _value(writer, last)
        allowed = {_value(writer, o) for o in touching if not any(a.start > (o.end or 0) for a in acked)}
        log.states[k] = KeyState(expected, allowed - {expected})
    return log


def _value(writer: int, op: _Op) -> str | None:
    return value_of(writer, op.seq) if op.kind == "P" else None


@dataclass(frozen=True)
class Mismatch:
    """One key whose row breaks the model: the evidence of a lost (or invented) write."""

    key: int
    writer: int | None
    expected: str | None
    allowed: tuple[str | None, ...]
    actual: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "writer": self.writer,
            "expected": self.expected,
            "also_allowed": list(self.allowed),
            "actual": self.actual,
        }


def compare(logs: Iterable[WriterLog], actual: Mapping[int, str]) -> list[Mismatch]:
    """Keys whose actual value the acknowledged writes do not allow; keys no writer owns count too."""
    mismatches = []
    owned: set[int] = set()
    for log in logs:
        for key, state in log.states.items():
            owned.add(key)
            value = actual.get(key)
            if not state.allows(value):
                allowed = tuple(sorted(state.maybe, key=lambda v: v or ""))
                mismatches.append(Mismatch(key, log.writer, state.acked, allowed, value))
    mismatches += [Mismatch(k, None, None, (), v) for k, v in actual.items() if k not in owned]
    return sorted(mismatches, key=lambda m: m.key)
