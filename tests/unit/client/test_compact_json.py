"""The records kept in annotations are written as Kopf writes them: ``json.dumps`` compact text.

``dumps_compact`` takes a faster way when it gives the same text; these tests hold it to the
exact text of ``json.dumps(value, separators=(",", ":"))`` for every kind of JSON value, the
cases where the fast way differs (non-ASCII, DEL, floats) included.
"""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trioperator._engine.bodies import Body
from trioperator._engine.diffbase import AnnotationsDiffBaseStorage
from trioperator._engine.patches import Patch
from trioperator._wire.compact_json import dumps_compact


def reference(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=1000, deadline=None)
@given(JSON_VALUES)
def test_any_json_value_is_written_as_json_dumps_writes_it(value: Any) -> None:
    assert dumps_compact(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"name": "é", "emoji": "\U0001f600", "sep": "\u2028"},  # escaped by json, not msgspec
        {"del": "\x7f", "controls": "".join(chr(code) for code in range(32))},
        {"floats": [1e16, 1e-05, 0.0001, 1.5, -0.0, 1.7976931348623157e308, 5e-324]},
        {"image": "nginx:1.25.3", "at": "2026-11-28T03:56:35.123456+00:00", "e": "1e5"},
        {"big": 10**30, "negative": -(10**20), "nested": [[{"a": [None, True, False]}]]},
        {"quotes": 'a"b\\c/d', "empty": {}, "list": []},
    ],
)
def test_the_cases_where_the_fast_way_differs(value: Any) -> None:
    assert dumps_compact(value) == reference(value)


def test_a_diff_base_annotation_holds_the_text_kopf_writes() -> None:
    storage = AnnotationsDiffBaseStorage()
    essence = {"spec": {"replicas": 3, "ratio": 1e-05, "image": "nginx:1.25", "note": "café"}}
    patch = Patch()
    storage.store(body=Body({"metadata": {"name": "x"}}), patch=patch, essence=essence)
    [stored] = patch["metadata"]["annotations"].values()
    assert stored == reference(essence) + "\n"  # Kopf's line, its newline included


def test_floats_of_every_magnitude_are_written_as_json_writes_them() -> None:
    # The fast way trusts msgspec's text of a float unless it has an exponent or starts with
    # 0.0000; this sweep holds that rule to json's text across magnitudes and precisions.
    rng = random.Random(20261128)
    values = [
        round(rng.uniform(-1, 1) * 10.0 ** rng.randint(-22, 22), rng.randint(0, 17))
        for _ in range(20_000)
    ]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(5_000)]
    finite = [value for value in values if math.isfinite(value)]
    mismatched = [value for value in finite if dumps_compact(value) != reference(value)]
    assert mismatched == []
