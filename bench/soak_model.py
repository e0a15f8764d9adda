"""The soak suite's model of acknowledged writes, rebuilt from the writers' logs.

Each writer process owns a disjoint set of keys (one region's, or those that
route to the regions it owns) and writes one operation at a time, so the
order of its log is the order of each of its regions' WALs for the keys it
writes there: the last acknowledged operation on a key decides the key's
final state. An operation that was attempted but never acknowledged (it failed, or
the writer was killed during it) may or may not have landed; it is allowed
until a later acknowledged operation on the same key overrides it. A key
whose row matches neither the last acknowledged state nor such a pending
attempt has lost an acknowledged write.

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


def parse_log(
    path: Path, writer: int, base: Mapping[int, str], keys: Iterable[int] | None = None
) -> WriterLog:
    """Replay one writer's log over the base rows of its key range."""
    log = WriterLog(writer)
    log.states = {k: KeyState(base.get(k)) for k in (keys if keys is not None else base)}
    attempts: dict[int, tuple[str, list[int]]] = {}
    text = path.read_text() if path.exists() else ""
    # A line without its newline was torn by a kill before the operation was tried.
    lines = text.split("\n")[:-1]
    for line in lines:
        parts = line.split(" ")
        if parts[0] == "A" and len(parts) == 4:
            # An open attempt followed by a new one was cut short by a kill.
            for seq, (kind, ks) in attempts.items():
                _unsure(log, seq, kind, ks)
            attempts.clear()
            seq = int(parts[1])
            attempts[seq] = (parts[2], [int(k) for k in parts[3].split(",") if k])
            log.next_seq = max(log.next_seq, seq + 1)
        elif parts[0] == "K" and len(parts) == 2 and int(parts[1]) in attempts:
            seq = int(parts[1])
            kind, ks = attempts.pop(seq)
            value = value_of(writer, seq) if kind == "P" else None
            for k in ks:
                state = log.states.setdefault(k, KeyState(None))
                state.acked = value
                state.maybe.clear()
            log.acked_ops += 1
            log.acked_rows += len(ks)
        elif parts[0] == "F" and len(parts) >= 2 and int(parts[1]) in attempts:
            log.failed_ops += 1
            _unsure(log, int(parts[1]), *attempts.pop(int(parts[1])))
    for seq, (kind, ks) in attempts.items():
        _unsure(log, seq, kind, ks)
    return log


def _unsure(log: WriterLog, seq: int, kind: str, keys: list[int]) -> None:
    value = value_of(log.writer, seq) if kind == "P" else None
    for k in keys:
        log.states.setdefault(k, KeyState(None)).maybe.add(value)


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
