"""A credential as a user pastes one, and the check that no part of it was printed."""

from __future__ import annotations

# The shape of an AWS secret access key: 40 characters, `/` and `+` among them.
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
PIECE = 8


def shown(text: str, secret: str = SECRET) -> list[str]:
    """The pieces of `secret` that `text` shows: any 8 characters of it count (pydantic, for one, cuts a
    long value down to its ends, and a message may quote part of a mistyped option)."""
    return sorted(
        {secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1) if secret[i : i + PIECE] in text}
    )
