"""The soak's pause handshake: the soak asks a table's writers to flush and wait, each answers once flushed.

Each pause carries a token of its own. A writer answers `paused-{writer}`
with the token it flushed for and its PID, and takes back only its own
answer. A bare "the answer exists" is not enough: a process SIGKILLed or
SIGSTOPped while it waited in one pause leaves its answer behind, and the
next pause read it as the writer's while its live replacement still held
unflushed writes (a quiescent read then lacked them: the chaos run of seed
4, 40 minutes, 35 keys).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

PAUSE_FILE = "pause"


def request_pause(control: Path) -> str:
    """Ask the writers to flush and wait; the pause's token (written whole: a writer never reads half)."""
    token = uuid.uuid4().hex
    staged = control / f".{PAUSE_FILE}.{token}"
    staged.write_text(token)
    staged.replace(control / PAUSE_FILE)
    return token


def end_pause(control: Path) -> None:
    (control / PAUSE_FILE).unlink(missing_ok=True)


def pause_token(control: Path) -> str | None:
    """The token of the pause asked for now (None: no pause)."""
    try:
        return (control / PAUSE_FILE).read_text() or None
    except FileNotFoundError:
        return None


def answer(control: Path, writer: int, token: str, last_seq: int) -> None:
    """Writer `writer` (this process) has flushed everything it acknowledged for the pause `token`."""
    staged = control / f".paused-{writer}.{os.getpid()}"
    staged.write_text(f"{token} {os.getpid()} {last_seq}")
    staged.replace(control / f"paused-{writer}")


def take_back(control: Path, writer: int) -> None:
    """Remove this process's answer (a later process's answer for the same writer stays)."""
    path = control / f"paused-{writer}"
    try:
        if path.read_text().split(" ")[1] == str(os.getpid()):
            path.unlink(missing_ok=True)
    except (FileNotFoundError, IndexError):
        pass


def all_paused(control: Path, writers: int, token: str) -> bool:
    """Whether every writer answered this pause (an answer to an earlier one does not count)."""
    for writer in range(writers):
        try:
            answered = (control / f"paused-{writer}").read_text().split(" ")[0]
        except FileNotFoundError:
            return False
        if answered != token:
            return False
    return True
