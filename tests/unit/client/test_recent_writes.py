"""Answers to our own writes, handed on as the objects of their watch echoes."""

from __future__ import annotations

import json
from typing import Any

from trioperator._client.recent_writes import MAX_MISSED, RecentWrites
from trioperator._wire.watch import decode_watch_line


def answer(name: str, rv: str, **status: Any) -> tuple[bytes, dict[str, Any]]:
    """An answer as the API server writes it (compact JSON), and its decoded object."""
    obj = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name, "namespace": "ns1", "resourceVersion": rv},
        "status": status,
    }
    return json.dumps(obj, separators=(",", ":")).encode(), obj


def echo(raw: bytes, type: str = "MODIFIED") -> bytes:
    return b'{"type":"' + type.encode() + b'","object":' + raw + b"}"


def test_the_echo_of_a_remembered_answer_is_that_answer_once() -> None:
    writes = RecentWrites()
    raw, obj = answer("a", "101", done=True)
    writes.remember(raw + b"\n", obj)  # the answer's trailing newline is not the object's
    line = echo(raw)
    taken = writes.take(line)
    assert taken is obj
    assert taken == decode_watch_line(line).object
    assert writes.take(line) is None  # a second time (e.g. after a reconnection): decoded
    assert not writes


def test_other_lines_are_not_matched_and_the_answer_waits() -> None:
    writes = RecentWrites()
    raw, obj = answer("a", "101", done=True)
    writes.remember(raw, obj)
    other, _ = answer("b", "102")
    assert writes.take(echo(other)) is None  # someone else's change
    assert writes.take(echo(raw, "DELETED")) is None  # not an echo of a write
    assert writes.take(b'{"type": "MODIFIED", "object": ' + raw + b"}") is None  # another format
    assert writes.take(echo(raw)) is obj


def test_the_same_version_with_other_bytes_is_decoded_and_the_answer_dropped() -> None:
    writes = RecentWrites()
    raw, obj = answer("a", "101", done=True)
    writes.remember(raw, obj)
    converted = raw.replace(b"kopf.dev/v1", b"kopf.dev/v2")  # watched in another version
    assert writes.take(echo(converted)) is None
    assert not writes
    assert writes.take(echo(raw)) is None

    writes.remember(raw, obj)
    assert writes.take(echo(raw)[:-1]) is None  # cut short: left to the decoder to refuse
    assert not writes


def test_a_write_that_changed_nothing_is_not_kept() -> None:
    writes = RecentWrites()
    raw, obj = answer("a", "100")
    writes.remember(raw, obj, unless="100")  # the version written on: no event comes
    assert not writes
    writes.remember(raw, obj, unless="99")
    assert len(writes) == 1


def test_an_answer_read_after_its_echo_is_not_kept() -> None:
    writes = RecentWrites()
    raw, obj = answer("a", "101", done=True)
    assert writes.take(echo(raw)) is None  # the event came first
    writes.remember(raw, obj)
    assert not writes


def test_only_the_newest_answers_and_missed_versions_are_kept() -> None:
    writes = RecentWrites(limit=3)
    answers = [answer(f"o{index}", str(200 + index)) for index in range(5)]
    for raw, obj in answers:
        writes.remember(raw, obj)
    assert len(writes) == 3
    assert writes.take(echo(answers[0][0])) is None  # pushed out by newer ones
    assert writes.take(echo(answers[1][0])) is None
    assert [writes.take(echo(raw)) is obj for raw, obj in answers[2:]] == [True, True, True]

    # Versions of lines that matched nothing: as many as MAX_MISSED, the oldest go first.
    early = answer("early", "300")
    writes.take(echo(early[0]))
    for index in range(MAX_MISSED):
        writes.take(echo(answer("x", str(1000 + index))[0]))
    writes.remember(*early)  # its miss is forgotten: kept (and never matched, but bounded)
    assert len(writes) == 1
