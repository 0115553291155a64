"""The API server's answers to the operator's own writes, kept until their echoes come.

Every write of the operator (the status and the marks of a handled object) comes back on the
watch stream as a ``MODIFIED`` event, and the object in that event is the answer to the write,
byte for byte: the API server serializes the same stored object the same way for both. In a
busy operator these echoes are two of every three events, and decoding them again (and
freeing the second copy later) is a few percent of its CPU.

So the answers to such writes are kept here, by their ``resourceVersion``; when a watch line
is the ``MODIFIED`` event of one of them -- checked by comparing the bytes, never assumed from
the version alone -- the watch hands on the already decoded answer instead of decoding the
line. Both are then one and the same dict, which is why only writes whose answers the
framework reads and never changes are kept (the patches of the change handling, see
``_runtime/handling/applying.py``), never the answers given to user code.

A write that changed nothing makes no event: its answer is not kept. Nor is an answer whose echo
has come already -- the API server may send the event before the answer, and the watch may read
it first: the versions of the last :data:`MAX_MISSED` ``MODIFIED`` lines that matched nothing are
kept for that. An answer whose echo never comes for another reason (a relisting that skipped the
version) stays until newer answers push it out: at most :data:`MAX_KEPT` answers are kept, the
oldest go first. A line that matches nothing costs a search for its version and a dict lookup.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["MAX_KEPT", "MAX_MISSED", "RecentWrites"]

MAX_KEPT: Final = 512
"""Answers kept at most: enough for the writes of a burst whose echoes lag a few hundred writes
behind (as they do with 2,000 objects created at once on a local API server); each is its
bytes and its decoded dict, a few KiB, which the echo would bring anyway."""

MAX_MISSED: Final = 256
"""Versions of unmatched ``MODIFIED`` lines remembered, for answers read after their echo."""

# The envelope as the API server writes it, around the object's own bytes.
_PREFIX: Final = b'{"type":"MODIFIED","object":'
_SUFFIX: Final = b"}"
_VERSION: Final = b'"resourceVersion":"'


class RecentWrites:
    """Answers to our own writes by version, to hand on as the objects of their echoes."""

    __slots__ = ("_answers", "_limit", "_missed")

    def __init__(self, limit: int = MAX_KEPT) -> None:
        self._answers: dict[bytes, tuple[bytes, dict[str, Any]]] = {}
        self._missed: dict[bytes, None] = {}  # an ordered set: the oldest first
        self._limit = limit

    def __len__(self) -> int:
        return len(self._answers)

    def remember(self, raw: bytes, obj: dict[str, Any], *, unless: str | None = None) -> None:
        """Keep ``obj``, decoded from the answer's bytes ``raw``, for its echo.

        Not if its version is ``unless`` (the version written on): the write changed nothing,
        so no event is coming.
        """
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(version, str) or not version or version == unless:
            return
        key = version.encode()
        if key in self._missed:
            del self._missed[key]
            return  # its echo has come already
        answers = self._answers
        answers.pop(key, None)  # the same version again: the newest bytes count
        answers[key] = (raw.strip(), obj)
        while len(answers) > self._limit:
            del answers[next(iter(answers))]  # the oldest: insertion order

    def take(self, line: bytes) -> dict[str, Any] | None:
        """The kept answer that ``line`` is the ``MODIFIED`` event of (forgotten now), if any.

        The first ``resourceVersion`` of the line only picks the candidate; the line must be
        the envelope around exactly the answer's bytes, so a wrong pick is only a miss.
        """
        if not line.startswith(_PREFIX) or not line.endswith(_SUFFIX):
            return None
        start = line.find(_VERSION, len(_PREFIX))
        if start < 0:
            return None
        start += len(_VERSION)
        end = line.find(b'"', start)
        if end < 0:
            return None
        key = line[start:end]
        kept = self._answers.pop(key, None)
        if kept is None:
            missed = self._missed
            missed[key] = None
            if len(missed) > MAX_MISSED:
                del missed[next(iter(missed))]
            return None
        # The echo of that version has come: kept or not, the answer is of no use any more.
        raw, obj = kept
        if len(line) - len(_PREFIX) - len(_SUFFIX) != len(raw):
            return None  # e.g. watched in another version of the resource than written in
        if line[len(_PREFIX) : -len(_SUFFIX)] != raw:
            return None
        return obj
