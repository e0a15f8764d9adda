"""The soak's pause handshake (bench/soak_pause.py) and what a quiescent check waits for (bench/soak.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.soak import SHORT, Child, Soak
from bench.soak_pause import all_paused, answer, end_pause, pause_token, request_pause, take_back


def test_an_answer_left_from_an_earlier_pause_does_not_count(tmp_path: Path) -> None:
    """A writer process stopped or killed while it waited in one pause leaves its answer; the next pause
    must wait for the live process's own (the 40-minute chaos run read while it still wrote)."""
    first = request_pause(tmp_path)
    answer(tmp_path, 0, first, last_seq=7)
    answer(tmp_path, 1, first, last_seq=9)
    assert all_paused(tmp_path, 2, first)
    end_pause(tmp_path)
    assert pause_token(tmp_path) is None

    second = request_pause(tmp_path)
    assert second != first and pause_token(tmp_path) == second
    assert not all_paused(tmp_path, 2, second)  # both answers are the first pause's
    answer(tmp_path, 0, second, last_seq=12)
    assert not all_paused(tmp_path, 2, second)
    answer(tmp_path, 1, second, last_seq=15)
    assert all_paused(tmp_path, 2, second)


def test_a_process_takes_back_only_its_own_answer(tmp_path: Path) -> None:
    """A stale process woken after its replacement answered must not remove the replacement's answer."""
    token = request_pause(tmp_path)
    (tmp_path / "paused-0").write_text(f"{token} 999999999 3")  # the replacement's (another PID)
    take_back(tmp_path, 0)
    assert all_paused(tmp_path, 1, token)
    answer(tmp_path, 0, token, last_seq=4)
    take_back(tmp_path, 0)
    assert not (tmp_path / "paused-0").exists()


def test_a_quiescent_check_waits_for_a_woken_stale_writer_before_it_pauses(tmp_path: Path) -> None:
    """A stale process woken just before a check writes (and fences the live writer) until it exits; a
    pause asked for meanwhile let the check read without its acknowledged puts (seed 11)."""
    stale = Child("t", "writer-0", [], {}, tmp_path)
    began = time.monotonic()
    stale.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    stale.retired = True
    target: Any = SimpleNamespace(control=tmp_path, children=[stale], writers=list)
    asked: list[float] = []

    def live_writer() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            token = pause_token(tmp_path)
            if token is not None:
                asked.append(time.monotonic())
                answer(tmp_path, 0, token, last_seq=1)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=live_writer)
    thread.start()
    soak = Soak(replace(SHORT, writers=1), tmp_path)
    assert soak._pause_writers(target, timeout=20)
    thread.join()
    assert stale.process.poll() == 0
    # The pause was asked for only once the stale process had gone: it ran for 1.5 s.
    assert asked and asked[0] - began >= 1.4
