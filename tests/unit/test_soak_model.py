"""The soak's model of acknowledged writes, on hand-written logs (bench/soak_model.py)."""

from __future__ import annotations

from pathlib import Path

from bench.soak_model import parse_log


def states(tmp_path: Path, lines: list[str]) -> dict[int, tuple[str | None, set[str | None]]]:
    log = tmp_path / "writer-1.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    parsed = parse_log(log, 1, {}, [10, 11])
    return {k: (s.acked, s.maybe) for k, s in parsed.states.items()}


def test_a_process_started_earlier_that_logs_later_keeps_its_own_operations(tmp_path: Path) -> None:
    """Process 4 was stopped before its first operation and logs after process 5 began (seed 1101):
    its operations neither replace process 5's nor end before they began."""
    got = states(
        tmp_path,
        [
            "A 5000000 P 10",
            "K 5000000",
            "A 5000001 D 10",
            "K 5000001",
            "A 4000000 P 11",
            "A 5000002 P 11",
            "K 5000002",
        ],
    )
    assert got[10] == (None, set()), "process 5's delete is the last word on key 10"
    # Process 4's put never returned and overlapped process 5's: either may have landed last.
    assert got[11] == ("w1s5000002", {"w1s4000000"})
