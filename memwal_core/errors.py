"""The one error hierarchy of memwal.

Every failure the library raises is a `MemwalError`. Subclasses of
`BadInputError` mean the caller pointed at the wrong thing (exit status 2 in
the CLI); everything else means the operation failed (exit status 1).
Messages are one line and name the object at fault; they never contain
credentials.
"""

from __future__ import annotations

import difflib
import re
import threading
from collections.abc import Collection, Iterable

# user:password@ in any URL, and credential-like query parameters or key=value pairs.
# (A secret may hold `/`: `KEY:SE/CRET@` is user info too.)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?:[^/@\s]+|[^/@\s:]+:[^@\s]+)@")
_SECRET_PARAMS = re.compile(
    r"(?P<name>(?:X-Amz-(?:Signature|Credential|Security-Token)|sig|signature|token|password|secret"
    r"|aws_secret_access_key|aws_session_token|secret_access_key|session_token)[\"']?\s*[=:]\s*[\"']?)"
    r"[^&\s,;\"'}]+",
    re.IGNORECASE,
)


# Lance appends the Rust source location of its build (its own or the standard library's) to its errors.
_BUILD_PATH = re.compile(r",? \S*/rustc?/\S+\.rs:\d+:\d+")


class _Withheld:
    """The values `withhold` was given, longest first (one that holds another goes whole)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self.values: tuple[str, ...] = ()

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            new = set(values) - self._known
            if new:
                self._known |= new
                self.values = tuple(sorted(self._known, key=len, reverse=True))


_WITHHELD = _Withheld()


def withhold(values: Iterable[str]) -> None:
    """Replace each of `values` by `***` in every message `redact` cleans from now on, in this process.

    The storage options a user gives register theirs (`StorageOptions`): Lance
    and the object store quote a value they cannot use in words of their own
    (`"..." is not a valid checksum algorithm`, `failed to parse "..."`), so a
    secret given under the wrong key would show in no form a pattern could know.
    """
    _WITHHELD.add(value for value in values if value)


def redact(text: str) -> str:
    """`text` with every withheld value, every URL's userinfo and every credential-like value replaced by `***`.

    Applied to every message memwal prints, including Lance's own error texts,
    which echo endpoints and request URLs verbatim (and end with a build path,
    which goes too).
    """
    for value in _WITHHELD.values:  # a substring search each: far faster than one pattern of them all
        if value in text:
            text = text.replace(value, "***")
    text = _BUILD_PATH.sub("", text)
    return _SECRET_PARAMS.sub(r"\g<name>***", _USERINFO.sub(r"\g<scheme>***@", text))


def shown(value: object) -> str:
    """A value a user gave, as a refusal of it shows it: numbers in full, anything else by its type.

    Text given where a number, a flag or a duration belongs may be a credential
    put in the wrong place (a secret after the wrong key), so it is never quoted.
    """
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return type(value).__name__


# Text that reads as a number, with a unit perhaps (`90`, `-1`, `0.5`, `30m`): no credential looks like it.
_NUMBER_LIKE = re.compile(r"[-+]?\d+(?:\.\d+)?\s*[A-Za-z]{0,3}")


def quoted(text: str) -> str:
    """Text a user gave where a number or a duration belongs, as a refusal of it shows it: quoted when it
    reads as one (it says what was typed), else `***` (it may be a credential typed in the wrong place)."""
    return repr(text) if _NUMBER_LIKE.fullmatch(text.strip()) else "***"


# A name's first word ends at a space, `:` or `=`: `aws_secret_access_key SECRET` is a key, then a secret.
_FIRST_WORD = re.compile(r"\s*(?P<word>[^\s:=]*)(?P<rest>.*)", re.DOTALL)


def named(text: str, names: Collection[str]) -> str:
    """Text a user gave where a name belongs (a storage option's key, a flag), as a refusal of it shows it.

    Only its first word, and only when that word is one of `names` or close to one
    (a typo), is quoted; the rest, or all of it, is `***`: `-o "aws_secret_access_key
    SECRET"` (a space for the `=`) puts a secret where the key belongs, and a secret
    typed on its own is no name at all.
    """
    match = _FIRST_WORD.match(text)
    word, rest = (match["word"], match["rest"].strip()) if match else ("", text)
    if not word or not difflib.get_close_matches(word.lower(), names, n=1):
        return "***"
    return repr(f"{word} ***" if rest else word)


# How much of another component's error text (Lance's, Arrow's, Spark's) a memwal message quotes.
EXCERPT_CHARS = 300


def first_line(error: str | BaseException) -> str:
    """The first line of an error text, redacted before it is cut to `EXCERPT_CHARS` characters.

    The one way memwal quotes a foreign error: Lance's texts run to several
    lines and end with build paths. An exception without a message gives its
    type name.
    """
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    return redact((text.splitlines() or [""])[0])[:EXCERPT_CHARS]


class MemwalError(Exception):
    """Base of every error memwal raises on purpose; its message never carries a credential."""

    exit_code = 1

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class BadInputError(MemwalError):
    """The input is wrong: retrying the same call cannot succeed."""

    exit_code = 2


class NotFoundError(BadInputError):
    """A table, region, generation or object does not exist."""


class NotLanceTableError(BadInputError):
    """The path exists but holds no Lance table."""


class MemWalNotEnabledError(BadInputError):
    """The table is a Lance table without the MemWAL index."""


class CorruptMetadataError(BadInputError):
    """A manifest or index record cannot be decoded or breaks an invariant."""


class SchemaError(BadInputError):
    """Rows do not fit the table schema (missing, null or mistyped columns)."""


class NewerRulesError(BadInputError):
    """The table is kept under maintenance rules newer than this memwal knows: it must not maintain it."""


class ClockSkewError(MemwalError):
    """This host's clock disagrees with the store's: ages it judged (GC's, a lease's) would be wrong."""


class StorageError(MemwalError):
    """The object store failed (unreachable, refused, or out of retries)."""


class UncertainWriteError(StorageError):
    """A write's response was lost: it may or may not have been applied (retrying an upsert is safe)."""


class ConflictError(MemwalError):
    """Another writer changed the same object first; re-read and re-plan."""


class LeaseBusyError(ConflictError):
    """Another live holder has the lease."""


class LeaseLostError(ConflictError):
    """Our lease expired and someone else took it; stop before changing anything."""


class StaleMergeError(ConflictError):
    """Another merger already merged this region past our target generation."""


class DeleteConflictError(ConflictError):
    """A fenced delete met a concurrent commit; check progress again before retrying."""


class AlreadyExistsError(ConflictError):
    """A put-if-not-exists found the object already there."""


class FencedError(ConflictError):
    """A newer writer claimed the region; this writer must stop."""


class EngineJobError(MemwalError):
    """A task an engine ran (on local threads or a Spark executor) failed with an error not memwal's own.

    The message names the job and quotes the task's error in one line.
    """


class CatchupError(MemwalError):
    """An index did not catch up with merge progress although Lance reported its update done."""
