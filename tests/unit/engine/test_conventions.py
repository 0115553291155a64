"""Annotation keys: safe names, V1/V2 cutting and hashing, -ofDRS, Kopf-prefix detection.

The expected keys are Kopf's: an operator moving between Kopf and trioperator must find its
records under exactly these names.
"""

from __future__ import annotations

import base64
import hashlib
import warnings
from typing import Any

import pytest
from trioperator._engine.bodies import Body
from trioperator._engine.conventions import (
    MAX_PREFIX_LENGTH,
    StorageKeyFormingConvention,
    StorageKeyMarkingConvention,
    StorageStanzaCleaner,
    cherrypick_fields,
    copy_json,
    detect_kopf_prefixes,
    ensure_field,
    has_field,
    hash_suffix,
    make_keys,
    make_safe_name,
    make_v1_key,
    make_v2_key,
    mark_key,
    parse_field,
    purge_field,
    remove_field,
    resolve_field,
    set_field_if_changed,
    store_marker,
)
from trioperator._engine.diffbase import AnnotationsDiffBaseStorage
from trioperator._engine.patches import Patch
from trioperator._engine.progress import AnnotationsProgressStorage, SmartProgressStorage

KEY_FORMING_CLASSES: list[type[Any]] = [
    StorageKeyFormingConvention,
    AnnotationsProgressStorage,
    AnnotationsDiffBaseStorage,
]

PREFIX = "my-operator.example.com"  # 23 characters: V1 leaves 63 - 24 = 39 for the name

COMMON_KEYS = [
    # Only the replacements that happen in handler ids: sub-handlers, field handlers, lambdas.
    pytest.param(PREFIX, "a_b.c-d/e", f"{PREFIX}/a_b.c-d.e", id="slash-to-dot"),
    pytest.param(PREFIX, "fn/spec.field", f"{PREFIX}/fn.spec.field", id="field-handler"),
    pytest.param(PREFIX, "create_fn/item1", f"{PREFIX}/create_fn.item1", id="sub-handler"),
    pytest.param(PREFIX, "fn/<lambda>", f"{PREFIX}/fn._lambda_", id="angle-brackets"),
]

V1_KEYS = [
    pytest.param(PREFIX, "x", f"{PREFIX}/x", id="v1-short"),
    pytest.param(PREFIX, "x" * 39, f"{PREFIX}/" + "x" * 39, id="v1-fits-exactly"),
    pytest.param(PREFIX, "x" * 40, f"{PREFIX}/" + "x" * 32 + "-tEokcg", id="v1-x40"),
    pytest.param(PREFIX, "y" * 40, f"{PREFIX}/" + "y" * 32 + "-VZlvhw", id="v1-y40"),
    pytest.param(PREFIX, "z" * 40, f"{PREFIX}/" + "z" * 32 + "-LlPQyA", id="v1-z40"),
    # The digest of this one has both "+" and "/" in plain base64: they become "-" and ".".
    pytest.param(PREFIX, "fn" * 323, f"{PREFIX}/" + "fn" * 16 + "-Az-r.g", id="v1-altchars"),
]

V2_KEYS = [
    pytest.param(PREFIX, "x", f"{PREFIX}/x", id="v2-short"),
    pytest.param(PREFIX, "x" * 63, f"{PREFIX}/" + "x" * 63, id="v2-fits-exactly"),
    pytest.param(PREFIX, "x" * 64, f"{PREFIX}/" + "x" * 56 + "-SItAqA", id="v2-x64"),
    pytest.param(PREFIX, "y" * 64, f"{PREFIX}/" + "y" * 56 + "-0d251g", id="v2-y64"),
    pytest.param(PREFIX, "z" * 64, f"{PREFIX}/" + "z" * 56 + "-E7wvIA", id="v2-z64"),
    pytest.param(PREFIX, "fn" * 323, f"{PREFIX}/" + "fn" * 28 + "-Az-r.g", id="v2-altchars"),
]


def _b64_blake2b(data: bytes) -> str:
    digest = hashlib.blake2b(data, digest_size=4).digest()
    return base64.b64encode(digest, altchars=b"-.").decode("ascii")


# ------------------------------------------------------------------ hashing


def test_hash_of_the_name_part_only_gives_kopfs_example() -> None:
    # Kopf's example 'x'*64 -> 'x'*56 + '-SItAqA': the digest is of the 64 x's alone (UTF-8),
    # not of "prefix/xxx…"; the base64 padding is stripped.
    assert _b64_blake2b(b"x" * 64) == "SItAqA=="
    assert _b64_blake2b(f"{PREFIX}/{'x' * 64}".encode()) != "SItAqA=="
    assert hash_suffix("x" * 64) == "-SItAqA"
    assert make_v2_key(PREFIX, "x" * 64) == f"{PREFIX}/" + "x" * 56 + "-SItAqA"
    assert len(make_v2_key(PREFIX, "x" * 64).split("/", 1)[1]) == 63


@pytest.mark.parametrize("text", ["x", "x" * 64, "fn" * 323, "a/b<c>", "ünïcødé"])
def test_hash_suffix_is_always_a_dash_and_six_safe_characters(text: str) -> None:
    suffix = hash_suffix(text)
    assert len(suffix) == 7
    assert suffix[0] == "-"
    assert suffix[-1].isalnum()
    assert set(suffix[1:]) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-."
    )


def test_v1_hashes_the_safe_name_but_v2_the_original_id() -> None:
    # Kopf's asymmetry: it matters only for long ids with "/" or "<>" (e.g. sub-handlers).
    key = "parent/" + "c" * 60
    assert make_v1_key(PREFIX, key) == f"{PREFIX}/parent." + "c" * 25 + "-yQ.XRA"
    assert make_v2_key(PREFIX, key) == f"{PREFIX}/parent." + "c" * 49 + "-AHWhZA"
    assert hash_suffix(make_safe_name(key)) == "-yQ.XRA"
    assert hash_suffix(key) == "-AHWhZA"


def test_v1_with_an_overlong_prefix_cuts_as_kopf_did() -> None:
    # Python's negative slicing bound: kept for byte-compatibility with existing V1 keys.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert make_v1_key("p" * 60, "abcdefghij") == "p" * 60 + "/abcde-Y2bZUw"


@pytest.mark.parametrize(("prefix", "key", "expected"), COMMON_KEYS + V1_KEYS)
@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_v1_keys(cls: type[Any], prefix: str, key: str, expected: str) -> None:
    storage = cls(v1=True, prefix=prefix)
    assert storage.make_v1_key(key) == expected
    assert len(expected) <= 63


@pytest.mark.parametrize(("prefix", "key", "expected"), COMMON_KEYS + V2_KEYS)
@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_v2_keys(cls: type[Any], prefix: str, key: str, expected: str) -> None:
    storage = cls(v1=True, prefix=prefix)
    assert storage.make_v2_key(key) == expected
    assert len(expected.split("/", 1)[1]) <= 63


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a/b", "a.b"),
        ("a<b>c", "a_b_c"),
        ("lambda:<x.py>:12", "lambda:_x.py_:12"),
        ("keep.these-chars_as.is", "keep.these-chars_as.is"),
    ],
)
def test_safe_names(key: str, expected: str) -> None:
    assert make_safe_name(key) == expected


# ------------------------------------------------------------------ both versions together


@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_both_versions_when_they_differ(cls: type[Any]) -> None:
    storage = cls(v1=True, prefix="kopf.zalando.org")
    v1_key = storage.make_v1_key("." * 64)
    v2_key = storage.make_v2_key("." * 64)
    assert v1_key != v2_key
    assert storage.make_keys("." * 64) == [v2_key, v1_key]


@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_one_key_when_versions_coincide(cls: type[Any]) -> None:
    storage = cls(v1=True, prefix="kopf.zalando.org")
    assert storage.make_v1_key("...") == storage.make_v2_key("...")
    assert storage.make_keys("...") == ["kopf.zalando.org/..."]


@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_only_v2_without_v1(cls: type[Any]) -> None:
    storage = cls(v1=False, prefix="kopf.zalando.org")
    assert storage.make_keys("." * 64) == [storage.make_v2_key("." * 64)]


def test_default_prefix_keys_of_typical_ids() -> None:
    prefix = "kopf.zalando.org"
    assert make_keys(prefix, "create_fn") == ["kopf.zalando.org/create_fn"]
    assert make_keys(prefix, "create_fn/item1") == ["kopf.zalando.org/create_fn.item1"]
    assert make_keys(prefix, "fn/spec.field") == ["kopf.zalando.org/fn.spec.field"]
    assert make_keys(prefix, "touch-dummy") == ["kopf.zalando.org/touch-dummy"]
    assert make_keys(prefix, "last-handled-configuration") == [
        "kopf.zalando.org/last-handled-configuration"
    ]


# ------------------------------------------------------------------ ReplicaSets of Deployments


DRS_CASES = [
    pytest.param("ReplicaSet", [{"kind": "Deployment"}], "kopf.dev/xyz-ofDRS", id="DRS"),
    pytest.param(
        "ReplicaSet",
        [{"kind": "Other"}, {"kind": "Deployment", "name": "d"}],
        "kopf.dev/xyz-ofDRS",
        id="DRS-among-others",
    ),
    pytest.param("ReplicaSet", [{"kind": "OtherOwner"}], "kopf.dev/xyz", id="not-deployment"),
    pytest.param("ReplicaSet", [], "kopf.dev/xyz", id="no-owners"),
    pytest.param("OtherKind", [{"kind": "Deployment"}], "kopf.dev/xyz", id="not-replicaset"),
]


@pytest.mark.parametrize(("kind", "owners", "expected"), DRS_CASES)
@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_keys_of_replicasets_owned_by_deployments(
    cls: type[Any], kind: str, owners: list[dict[str, str]], expected: str
) -> None:
    storage = cls(v1=True, prefix="kopf.dev")
    body = Body({"kind": kind, "metadata": {"ownerReferences": owners}})
    assert storage.make_keys("xyz", body=body) == [expected]


def test_drs_mark_is_applied_before_cutting_and_hashing() -> None:
    body = {"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}}
    assert mark_key("a" * 60, body=body) == "a" * 60 + "-ofDRS"
    assert make_keys("kopf.dev", "a" * 60, body=body) == [
        "kopf.dev/" + "a" * 56 + "-SGMMug",
        "kopf.dev/" + "a" * 47 + "-SGMMug",
    ]
    assert hash_suffix("a" * 60 + "-ofDRS") == "-SGMMug"


@pytest.mark.parametrize(
    "body",
    [None, {}, {"kind": "ReplicaSet"}, {"kind": "ReplicaSet", "metadata": None}],
)
def test_drs_mark_tolerates_sparse_bodies(body: dict[str, Any] | None) -> None:
    assert mark_key("xyz", body=body) == "xyz"


# ------------------------------------------------------------------ prefixes


@pytest.mark.parametrize("cls", [*KEY_FORMING_CLASSES, SmartProgressStorage])
def test_warning_on_long_prefix(cls: type[Any]) -> None:
    assert MAX_PREFIX_LENGTH == 189
    with pytest.warns(UserWarning, match=r"The annotations prefix is too long"):
        cls(v1=True, prefix="x" * (253 - 63))


@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
def test_no_warning_on_the_longest_fitting_prefix(cls: type[Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls(v1=True, prefix="x" * 189)


@pytest.mark.parametrize("cls", KEY_FORMING_CLASSES)
@pytest.mark.parametrize("prefix", ["", None])
def test_unprefixed_storages_are_refused(cls: type[Any], prefix: str | None) -> None:
    with pytest.raises(ValueError, match="must be prefixed"):
        cls(v1=True, prefix=prefix)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        pytest.param([], set(), id="none"),
        pytest.param(["kopf.zalando.org/fn"], {"kopf.zalando.org"}, id="default"),
        pytest.param(["my-op.kopf.zalando.org/x"], {"my-op.kopf.zalando.org"}, id="subdomain"),
        pytest.param(["evilkopf.zalando.org/x"], set(), id="not-a-subdomain"),
        pytest.param(["kopf.zalando.org.evil/x"], set(), id="suffixed"),
        pytest.param(["my-op.example.com/kopf-managed"], {"my-op.example.com"}, id="marker"),
        pytest.param(
            ["my-op.example.com/kopf-managed", "my-op.example.com/fn"],
            {"my-op.example.com"},
            id="marker-and-records",
        ),
        pytest.param(["my-op.example.com/fn"], set(), id="unmarked"),
        pytest.param(["kopf-managed", "kopf.zalando.org"], set(), id="unprefixed"),
        pytest.param(["example.com/kopf-managed/x"], set(), id="marker-only-as-the-whole-name"),
        pytest.param(
            ["a.com/kopf-managed", "kopf.zalando.org/x", "other.com/y"],
            {"a.com", "kopf.zalando.org"},
            id="mixed",
        ),
    ],
)
def test_kopf_prefixes_detection(keys: list[str], expected: set[str]) -> None:
    assert detect_kopf_prefixes(keys) == expected
    assert StorageKeyMarkingConvention().detect_marked_prefixes(keys) == expected


@pytest.mark.parametrize(
    ("prefix", "body", "patch", "expected"),
    [
        pytest.param("my-op.example.com", {}, {}, {"my-op.example.com/kopf-managed": "yes"}),
        pytest.param("kopf.zalando.org", {}, {}, None, id="kopf-prefix"),
        pytest.param("kopf.example.com", {}, {}, None, id="kopf-dot-anything"),
        pytest.param(
            "my-op.example.com",
            {"metadata": {"annotations": {"my-op.example.com/kopf-managed": "yes"}}},
            {},
            None,
            id="in-body",
        ),
        pytest.param(
            "my-op.example.com",
            {},
            {"metadata": {"annotations": {"my-op.example.com/kopf-managed": "yes"}}},
            {"my-op.example.com/kopf-managed": "yes"},
            id="in-patch",
        ),
    ],
)
def test_marker_storing(
    prefix: str, body: dict[str, Any], patch: dict[str, Any], expected: dict[str, str] | None
) -> None:
    store_marker(prefix=prefix, body=body, patch=patch)
    assert patch.get("metadata", {}).get("annotations") == expected


# ------------------------------------------------------------------ field helpers


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (None, ()),
        ("status", ("status",)),
        ("status.kopf.progress", ("status", "kopf", "progress")),
        (("status", "a.b"), ("status", "a.b")),
        (["status", "x"], ("status", "x")),
    ],
)
def test_parse_field(field: Any, expected: tuple[str, ...]) -> None:
    assert parse_field(field) == expected


def test_parse_field_refuses_other_types() -> None:
    with pytest.raises(ValueError, match="field must be"):
        parse_field(123)  # type: ignore[arg-type]


def test_resolve_field() -> None:
    src = {"a": {"b": {"c": 1}, "s": "str", "n": None}}
    assert resolve_field(src, "a.b.c") == 1
    assert resolve_field(src, "a.n") is None
    assert resolve_field(src, "a.x", "default") == "default"
    assert resolve_field(src, "a.s.x", "default") == "default"
    assert resolve_field(None, "a", "default") == "default"
    with pytest.raises(KeyError):
        resolve_field(src, "a.x")
    with pytest.raises(TypeError):
        resolve_field(src, "a.s.x")
    assert has_field(src, "a.n")
    assert not has_field(src, "a.x")


def test_ensure_field_creates_parents_and_replaces_non_dicts() -> None:
    dst: dict[str, Any] = {"a": {"keep": 1}, "s": "str"}
    ensure_field(dst, "a.b.c", 1)
    ensure_field(dst, "s.x", 2)
    assert dst == {"a": {"keep": 1, "b": {"c": 1}}, "s": {"x": 2}}
    with pytest.raises(ValueError, match="root"):
        ensure_field(dst, None, 1)


@pytest.mark.parametrize(
    ("src", "field", "expected"),
    [
        ({"a": {"b": {"c": 1}}}, "a.b.c", {}),
        ({"a": {"b": {"c": 1}, "d": 2}}, "a.b.c", {"a": {"d": 2}}),
        ({"a": {"b": {"c": 1, "e": 3}}}, "a.b.c", {"a": {"b": {"e": 3}}}),
        ({"a": {}}, "a.b.c", {}),  # as in Kopf: a parent found empty goes too
        ({}, "a.b.c", {}),
        ({"a": 1}, "a", {}),
    ],
)
def test_remove_field_with_empty_parents(
    src: dict[str, Any], field: str, expected: dict[str, Any]
) -> None:
    remove_field(src, field)
    assert src == expected


def test_remove_field_through_a_non_dict_fails() -> None:
    with pytest.raises(TypeError):
        remove_field({"a": "str"}, "a.b")
    with pytest.raises(ValueError, match="root"):
        remove_field({}, None)


def test_copy_json_is_equal_and_shares_nothing_mutable() -> None:
    src: dict[str, Any] = {"a": {"b": [1, {"c": "d"}], "e": None}, "f": 1.5, "g": True}
    dst = copy_json(src)
    assert dst == src
    dst["a"]["b"][1]["c"] = "changed"
    dst["a"]["b"].append(2)
    dst["a"]["new"] = 1
    assert src == {"a": {"b": [1, {"c": "d"}], "e": None}, "f": 1.5, "g": True}


def test_copy_json_deep_copies_what_is_not_json_as_deepcopy_would() -> None:
    class Box:
        def __init__(self, items: list[int]) -> None:
            self.items = items

    box = Box([1])
    src: dict[str, Any] = {"t": ([1], "x"), "box": box}
    dst = copy_json(src)
    assert dst["t"] == ([1], "x")
    assert dst["t"][0] is not src["t"][0]
    assert isinstance(dst["box"], Box)
    assert dst["box"] is not box
    assert dst["box"].items == [1]
    assert dst["box"].items is not box.items


def test_make_keys_gives_a_fresh_list_every_time() -> None:
    keys = make_keys("kopf.zalando.org", "create_fn")
    keys.append("garbage")
    assert make_keys("kopf.zalando.org", "create_fn") == ["kopf.zalando.org/create_fn"]


def test_cherrypick_copies_deeply_and_skips_absent() -> None:
    src: dict[str, Any] = {"a": {"b": {"c": [1]}}, "s": "str"}
    dst: dict[str, Any] = {}
    cherrypick_fields(src, dst, ["a.b", "x.y", "s.z"])
    assert dst == {"a": {"b": {"c": [1]}}}
    assert dst["a"]["b"] is not src["a"]["b"]
    cherrypick_fields(src, dst, None)
    assert dst == {"a": {"b": {"c": [1]}}}


@pytest.mark.parametrize(
    ("body", "patch", "changed", "expected_patch"),
    [
        pytest.param({}, {}, True, {"a": {"b": "v"}}, id="absent"),
        pytest.param({"a": {"b": "old"}}, {}, True, {"a": {"b": "v"}}, id="different"),
        pytest.param({"a": {"b": "v"}}, {}, False, {}, id="same"),
        pytest.param({"a": {"b": "v"}}, {"a": {"b": None}}, True, {"a": {"b": "v"}}, id="undo"),
    ],
)
def test_set_field_if_changed(
    body: dict[str, Any], patch: dict[str, Any], changed: bool, expected_patch: dict[str, Any]
) -> None:
    assert set_field_if_changed(body=body, patch=patch, field="a.b", value="v") is changed
    assert patch == expected_patch


@pytest.mark.parametrize(
    ("body", "patch", "expected_patch"),
    [
        pytest.param({"a": {"b": "v"}}, {}, {"a": {"b": None}}, id="in-body"),
        pytest.param({}, {"a": {"b": "v"}}, {}, id="only-in-patch"),
        pytest.param({}, {"a": {"b": "v", "c": 1}}, {"a": {"c": 1}}, id="only-in-patch-others"),
        pytest.param({}, {}, {}, id="nowhere"),
    ],
)
def test_purge_field(
    body: dict[str, Any], patch: dict[str, Any], expected_patch: dict[str, Any]
) -> None:
    purge_field(body=body, patch=patch, field="a.b")
    assert patch == expected_patch


# ------------------------------------------------------------------ stanza cleaning


@pytest.mark.parametrize(
    ("essence", "expected"),
    [
        ({"metadata": {"annotations": {}, "labels": {}}, "status": {}}, {}),
        (
            {"metadata": {"annotations": {}, "labels": {"l": "v"}}},
            {"metadata": {"labels": {"l": "v"}}},
        ),
        ({"metadata": {}}, {}),
        ({"spec": {}}, {"spec": {}}),  # user content, even when empty
        ({"status": {"x": 1}}, {"status": {"x": 1}}),
    ],
)
def test_remove_empty_stanzas(essence: dict[str, Any], expected: dict[str, Any]) -> None:
    StorageStanzaCleaner.remove_empty_stanzas(essence)
    assert essence == expected


def test_remove_annotations() -> None:
    essence: dict[str, Any] = {"metadata": {"annotations": {"a": "1", "b": "2", "c": "3"}}}
    StorageStanzaCleaner.remove_annotations(essence, {"a", "c", "zzz"})
    assert essence == {"metadata": {"annotations": {"b": "2"}}}
    StorageStanzaCleaner.remove_annotations({}, {"a"})  # nothing to do, no failure


def test_patch_objects_are_accepted_by_the_helpers() -> None:
    patch = Patch()
    ensure_field(patch, "metadata.annotations.x", "y")
    assert patch.metadata.annotations["x"] == "y"
    remove_field(patch, "metadata.annotations.x")
    assert not patch
