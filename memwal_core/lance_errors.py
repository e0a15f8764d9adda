"""The texts of Lance's errors that memwal acts on, and what each one means.

pylance 14 raises OSError, ValueError or RuntimeError for nearly every
failure: only the text tells a stale merge from a fenced writer or an
unreachable store. Each text memwal relies on is named here, once, and
tests/unit/test_lance_errors.py (and, for the lost response, which needs an
object store, tests/integration/test_lance_errors_s3.py) provokes each from real Lance, so
a Lance upgrade that rewords one fails that named test instead of a merge in
production.
"""

from __future__ import annotations

import re
from enum import Enum

from memwal_core.format.naming import TABLE_VERSIONS_DIR

# A marked merge commit at or below a region's recorded progress: another merger got there first.
STALE_MERGE = "Stale SSTable compaction"
# A commit met newer commits it could rebase over, and its conflict retries ran out.
RETRIES_EXHAUSTED = "Too many concurrent writers"
# A commit that cannot be rebased over a newer one (an overwrite, say).
INCOMPATIBLE_TRANSACTION = "Incompatible transaction"
# A commit a newer one preempted, which Lance asks to be built again: "Retryable commit conflict for
# version N: This Rewrite transaction was preempted by concurrent transaction Update at version N".
PREEMPTED = "Retryable commit conflict"
# Another writer claimed the region: "Writer fenced (peer claimed epoch)", "writer was fenced during open".
FENCED = "fenced"
# A claim whose manifest PUT failed, after which the region's newest manifest held the epoch it meant to
# claim, or a later one: "Failed to claim shard S (version V): another writer claimed epoch E (>= our
# target T): <the PUT's error>". Lance's claim writes nothing that names its writer, so another claimer's
# manifest is byte for byte the one this claim would have written: only the PUT's error tells them apart.
_CLAIM_TAKEN = re.compile(r"another writer claimed epoch (\d+) \(>= our target (\d+)\): (.*)", re.DOTALL)
# What a put-if-not-exists that found its object already there says (Lance's and object_store's words).
ALREADY_EXISTS = "already exists"
# A WAL write whose response was lost, found applied on retry: "Writer fenced (persistence failure):
# WAL position N for shard ... was taken after a failed PUT".
LOST_WAL_PUT = "failed PUT"
# A claim whose replay of the region's WAL overflows its MemTable limits: "WAL entry at position N
# continues generation G past what the memtable replaying it can hold" (the WAL was written under
# larger limits, or by a PUT whose response was lost and was retried); it fails every claim with them.
OVERFULL_REPLAY = "past what the memtable replaying it can hold"
# The same on a table with a vector index: its in-memory index, sized by the MemTable row limit,
# cannot take the replayed rows ("HNSW vector store capacity 50 exhausted: ... the store is sized
# below the memtable's row capacity"), reported as an internal error.
OVERFULL_INDEX_REPLAY = "sized below the memtable's row capacity"
# A claim refused because the MemTable and its in-memory index reserve do not fit under the
# unflushed-bytes ceiling ("... would cross the backpressure ceiling ...").
MEMORY_CEILING = "backpressure ceiling"
# Lance's prefix of an InvalidInput error: the writer refused the rows (a stale merge carries it too).
INVALID_INPUT = "Invalid user input"
# A path or version with nothing there ("Dataset at path ... was not found: Not found: ..."), lower-case.
NOT_FOUND = ("not found", "does not exist")
# A request that got no answer in time (object_store's and tokio's words; "body error" is a body that
# trickled past the limit). Lance 14 reports a silent S3 endpoint as "error sending request" instead
# (see the tests), so these are a fallback.
NO_ANSWER = ("timed out", "Timeout", "deadline has elapsed", "body error")
# The writer's own storage failed ("Writer fenced (persistence failure): ... No space left on device"):
# Lance words it as fencing, but no other writer claimed the region.
PERSISTENCE_FAILURE = "persistence failure"
# The store refused the request itself (a read-only table, missing rights).
PERMISSION_DENIED = ("Permission denied", "AccessDenied", "Forbidden")
# A request that never reached the endpoint: refused, unresolvable, or failed in sending.
UNREACHABLE = ("connect", "Connection", "dns", "Error performing", "error sending request")
# A table manifest named in an error, e.g. "Encountered corrupt file .../_versions/{n}.manifest: ...".
_NAMED_MANIFEST = re.compile(rf"{TABLE_VERSIONS_DIR}/([0-9]+\.manifest)")


class OpenFailure(Enum):
    """Why Lance could not open a dataset (or list its versions)."""

    NOT_FOUND = "not found"
    NO_ANSWER = "no answer"
    UNREACHABLE = "unreachable"
    UNREADABLE = "unreadable"


class WriteFailure(Enum):
    """Why Lance's native MemWAL writer failed a claim, a put or a delete."""

    LOST_RESPONSE = "lost response"
    # A claim's own manifest PUT got no answer, and the store holds the epoch it claimed: most likely its
    # own (see `write_failure`).
    CLAIM_UNANSWERED = "claim unanswered"
    FENCED = "fenced"
    INVALID_INPUT = "invalid input"
    STORAGE = "storage"


def _has(exc: BaseException, text: str) -> bool:
    return text in str(exc)


def is_stale_merge(exc: BaseException) -> bool:
    """A marked merge commit Lance refused: a region's recorded progress is already at or past its marker."""
    return _has(exc, STALE_MERGE)


def is_retries_exhausted(exc: BaseException) -> bool:
    """A commit that kept meeting concurrent commits until its conflict retries ran out."""
    return _has(exc, RETRIES_EXHAUSTED)


def is_commit_conflict(exc: BaseException) -> bool:
    """A commit another commit got in ahead of: retried out, or impossible to rebase."""
    return is_retries_exhausted(exc) or _has(exc, INCOMPATIBLE_TRANSACTION)


def is_preempted(exc: BaseException) -> bool:
    """A commit that a newer commit made stale: built again on the latest version, it may succeed."""
    return _has(exc, PREEMPTED)


def is_overfull_replay(exc: BaseException) -> bool:
    """A writer's claim refused because the region's WAL holds more than its MemTable limits replay."""
    return _has(exc, OVERFULL_REPLAY) or _has(exc, OVERFULL_INDEX_REPLAY)


def is_memory_ceiling_refusal(exc: BaseException) -> bool:
    """A writer's claim refused because its MemTable memory limits leave no room for its index reserve."""
    return _has(exc, MEMORY_CEILING)


def open_failure(exc: BaseException) -> OpenFailure:
    """What stopped Lance opening a dataset.

    Not-found comes first: Lance's S3 errors all begin "Error performing ...
    request", whatever went wrong, so the unreachable words match them too.
    """
    text = str(exc)
    if any(word in text.lower() for word in NOT_FOUND):
        return OpenFailure.NOT_FOUND
    if any(word in text for word in NO_ANSWER):
        return OpenFailure.NO_ANSWER
    if any(word in text for word in UNREACHABLE):
        return OpenFailure.UNREACHABLE
    return OpenFailure.UNREADABLE


def claim_taken(exc: BaseException) -> tuple[int, int, bool] | None:
    """A claim Lance gave up because the region's newest manifest held its target epoch (or a later one).

    (the epoch found, the epoch targeted, whether the store refused the claim's PUT as already there),
    or None for any other error.
    """
    found = _CLAIM_TAKEN.search(str(exc))
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2)), ALREADY_EXISTS in found.group(3)


def write_failure(exc: BaseException) -> WriteFailure:
    """What failed a native writer's call: the first kind, in this order, whose text the error carries.

    A claim that found its target epoch taken is fenced, unless its own PUT
    got no answer and the epoch found is exactly its target: that PUT most
    likely landed (else a claimer that read the same manifest in the same
    instant wrote it, while this PUT was lost on its way). A PUT the store
    refused as already there is a lost race, although an object store that
    retries a PUT whose answer it lost is refused the same way, and then the
    claim was this writer's own: the stored manifests cannot tell.

    A lost response comes before fencing: Lance words it "Writer fenced
    (persistence failure): ... taken after a failed PUT", but no other writer
    claimed the region, and the next call may re-open it. Any other
    persistence failure (a full disk) is the writer's storage failing, not
    fencing either.
    """
    taken = claim_taken(exc)
    if taken is not None:
        found, target, refused = taken
        return WriteFailure.CLAIM_UNANSWERED if found == target and not refused else WriteFailure.FENCED
    text = str(exc)
    if LOST_WAL_PUT in text:
        return WriteFailure.LOST_RESPONSE
    if PERSISTENCE_FAILURE in text:
        return WriteFailure.STORAGE
    if FENCED in text.lower():
        return WriteFailure.FENCED
    if INVALID_INPUT in text:
        return WriteFailure.INVALID_INPUT
    return WriteFailure.STORAGE


def named_manifest(exc: BaseException) -> str | None:
    """The table manifest (relative to the table) a Lance error names, if it names one."""
    named = _NAMED_MANIFEST.search(str(exc))
    return f"{TABLE_VERSIONS_DIR}/{named.group(1)}" if named else None


def permission_denied(exc: BaseException) -> str | None:
    """The store's refusal a Lance error carries (often at the end of a longer line), if any."""
    text = str(exc)
    for word in PERMISSION_DENIED:
        at = text.find(word)
        if at >= 0:
            return text[at : at + 200].splitlines()[0]
    return None
