"""Decoding watch-stream lines, splitting byte chunks into lines, and Status bodies."""

from __future__ import annotations

import json

import pytest
from trioperator._wire.status import decode_status, status_from_dict
from trioperator._wire.watch import (
    LineSplitter,
    LineTooLongError,
    WatchEvent,
    WatchLineError,
    decode_watch_line,
)


def test_valid_event() -> None:
    line = b'{"type": "ADDED", "object": {"metadata": {"name": "x", "resourceVersion": "5"}}}'
    event = decode_watch_line(line)
    assert isinstance(event, WatchEvent)
    assert event.type == "ADDED"
    assert event.object == {"metadata": {"name": "x", "resourceVersion": "5"}}


def test_unknown_fields_are_kept_in_the_object_and_ignored_in_the_envelope() -> None:
    line = b'{"type":"MODIFIED","object":{"spec":{"new":[1,2]},"x":null},"extra":"yes"}'
    event = decode_watch_line(line)
    assert event.object == {"spec": {"new": [1, 2]}, "x": None}


def test_trailing_whitespace_and_cr() -> None:
    event = decode_watch_line(b'{"type":"DELETED","object":{}}\r')
    assert event.type == "DELETED"


def test_error_event_with_status() -> None:
    line = (
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},'
        b'"status":"Failure","message":"too old resource version: 1 (2)",'
        b'"reason":"Expired","code":410}}'
    )
    event = decode_watch_line(line)
    assert event.type == "ERROR"
    status = status_from_dict(event.object)
    assert status is not None
    assert status.code == 410
    assert status.reason == "Expired"


def test_unknown_type_is_decoded_for_the_caller_to_judge() -> None:
    assert decode_watch_line(b'{"type":"SOMETHING","object":{}}').type == "SOMETHING"


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"garbage",
        b"{",
        b'{"type": "ADDED"',
        b"[1, 2, 3]",
        b'"just a string"',
        b'{"type": "ADDED"}',
        b'{"object": {}}',
        b'{"type": 1, "object": {}}',
        b'{"type": "ADDED", "object": [1]}',
        b"\xff\xfe\x00",
        b'{"type":"ADDED","object":{}} trailing',
    ],
)
def test_garbage_raises_a_value_error(line: bytes) -> None:
    with pytest.raises(WatchLineError) as info:
        decode_watch_line(line)
    assert isinstance(info.value, ValueError)
    assert info.value.line == line


def test_garbage_message_is_bounded() -> None:
    line = b"x" * 10_000
    with pytest.raises(WatchLineError) as info:
        decode_watch_line(line)
    assert len(str(info.value)) < 400


def test_huge_line_over_one_mebibyte() -> None:
    big = "a" * (3 * 1024 * 1024)
    doc = {"type": "MODIFIED", "object": {"metadata": {"name": "big"}, "data": {"blob": big}}}
    line = json.dumps(doc).encode()
    assert len(line) > 1024 * 1024
    event = decode_watch_line(line)
    assert event.object["data"]["blob"] == big


# ---------------------------------------------------------------- line splitting


def split(chunks: list[bytes]) -> list[bytes]:
    splitter = LineSplitter()
    lines: list[bytes] = []
    for chunk in chunks:
        splitter.feed(chunk)
        while (line := splitter.pop()) is not None:
            lines.append(line)
    splitter.finish()
    while (line := splitter.pop()) is not None:
        lines.append(line)
    return lines


def test_lines_in_one_chunk() -> None:
    assert split([b"a\nb\nc\n"]) == [b"a", b"b", b"c"]


def test_lines_across_chunks() -> None:
    assert split([b"ab", b"c\nd", b"e", b"\n", b"f\n"]) == [b"abc", b"de", b"f"]


def test_one_byte_chunks() -> None:
    data = b'{"a":1}\n{"b":2}\n'
    assert split([bytes([b]) for b in data]) == [b'{"a":1}', b'{"b":2}']


def test_blank_lines_are_dropped() -> None:
    assert split([b"\n\na\n\n \n", b"\r\nb\n"]) == [b"a", b"b"]


def test_unterminated_last_line_is_flushed_at_the_end() -> None:
    assert split([b"a\nb"]) == [b"a", b"b"]


def test_nothing_pending_until_a_newline_arrives() -> None:
    splitter = LineSplitter()
    splitter.feed(b"partial")
    assert splitter.pop() is None
    assert splitter.pending == len(b"partial")
    splitter.feed(b" line\nnext")
    assert splitter.pop() == b"partial line"
    assert splitter.pop() is None
    assert splitter.pending == len(b"next")


def test_huge_line_in_many_chunks() -> None:
    doc = {"type": "ADDED", "object": {"data": "z" * (2 * 1024 * 1024)}}
    line = json.dumps(doc).encode()
    chunks = [line[i : i + 65536] for i in range(0, len(line), 65536)]
    chunks[-1] += b'\n{"type":"DELETED","object":{}}\n'
    lines = split(chunks)
    assert len(lines) == 2
    assert lines[0] == line
    assert decode_watch_line(lines[0]).object["data"] == "z" * (2 * 1024 * 1024)
    assert decode_watch_line(lines[1]).type == "DELETED"


# ---------------------------------------------------------------- Status


def test_decode_status_partial() -> None:
    status = decode_status(b'{"message": "only a message"}')
    assert status is not None
    assert status.message == "only a message"
    assert status.code is None
    assert status.details is None


def test_decode_status_details() -> None:
    status = decode_status(
        b'{"kind":"Status","code":429,"details":{"retryAfterSeconds":3,'
        b'"causes":[{"reason":"r","message":"m","field":"f"}]},"new":1}'
    )
    assert status is not None
    assert status.details is not None
    assert status.details.retry_after_seconds == 3
    assert status.details.causes[0].field == "f"


@pytest.mark.parametrize("body", [b"", b"nope", b"[]", b'{"code": "x"}'])
def test_decode_status_garbage(body: bytes) -> None:
    assert decode_status(body) is None


def test_an_oversized_line_is_an_error_as_soon_as_it_outgrows_the_limit() -> None:
    splitter = LineSplitter(max_line=100)
    splitter.feed(b'{"type":"ADDED","object":{"big":"' + b"x" * 60)
    assert splitter.pending == 93
    with pytest.raises(LineTooLongError, match="a line exceeds 100 bytes") as info:
        splitter.feed(b"x" * 1000)  # not kept: the error comes before any end of the line
    assert (info.value.limit, info.value.size) == (100, 1093)
    assert splitter.pending == 0  # what it held is dropped
    assert splitter.pop() is None


def test_an_oversized_whole_line_within_one_chunk_is_an_error() -> None:
    splitter = LineSplitter(max_line=100)
    with pytest.raises(LineTooLongError):
        splitter.feed(b"{}\n" + b"x" * 200 + b"\n{}\n")


def test_lines_up_to_the_limit_pass() -> None:
    splitter = LineSplitter(max_line=100)
    splitter.feed(b"a" * 60)
    splitter.feed(b"a" * 40 + b"\n" + b"b" * 100 + b"\n")
    assert splitter.pop() == b"a" * 100
    assert splitter.pop() == b"b" * 100
    assert splitter.pop() is None


def test_a_line_that_is_not_utf8_is_an_undecodable_line() -> None:
    with pytest.raises(WatchLineError, match="Not a watch event"):
        decode_watch_line(b'{"type":"ADDED","object":{"name":"\xff\xfe"}}')
