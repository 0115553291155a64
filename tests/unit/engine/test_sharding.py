"""The hash ring, the object keys and the Lease records of sharding (no I/O)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trioperator
from hypothesis import given, settings
from hypothesis import strategies as st
from trioperator._engine.sharding import (
    DRAINED_ANNOTATION,
    SHARD_LABEL,
    Ring,
    bucket_key,
    bucket_of,
    buckets_selector,
    decode_drained,
    encode_drained,
    lease_body,
    lease_name,
    parse_member,
    ring_key,
)

PACKAGE_ROOT = str(Path(trioperator.__file__).resolve().parents[1])
KEYS = [f"uid-{index:05d}" for index in range(4000)]
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


def _owners(ring: Ring) -> dict[str, str | None]:
    return {key: ring.owner(key) for key in KEYS}


@settings(max_examples=25, deadline=None)
@given(members=st.sets(names, min_size=1, max_size=6), joiner=names)
def test_a_joining_member_takes_about_a_share_and_nothing_else_moves(
    members: set[str], joiner: str
) -> None:
    if joiner in members:
        return
    before = _owners(Ring(members))
    after = _owners(Ring(members | {joiner}))
    moved = [key for key in KEYS if before[key] != after[key]]
    # Only to the joiner: no key moves between the members that were there.
    assert all(after[key] == joiner for key in moved)
    share = len(KEYS) / (len(members) + 1)
    assert 0.4 * share <= len(moved) <= 1.9 * share


@settings(max_examples=25, deadline=None)
@given(members=st.sets(names, min_size=2, max_size=6), data=st.data())
def test_a_leaving_member_gives_away_only_its_own_keys(
    members: set[str], data: st.DataObject
) -> None:
    leaver = data.draw(st.sampled_from(sorted(members)))
    before = _owners(Ring(members))
    after = _owners(Ring(members - {leaver}))
    for key in KEYS:
        if before[key] != leaver:
            assert after[key] == before[key]
        else:
            assert after[key] != leaver


def test_the_spread_is_even_enough() -> None:
    owners = _owners(Ring(["a", "b", "c"]))
    counts = {member: list(owners.values()).count(member) for member in "abc"}
    assert all(900 <= count <= 1800 for count in counts.values()), counts


def test_an_empty_ring_owns_nothing() -> None:
    assert Ring([]).owner("x") is None
    with pytest.raises(ValueError, match="virtual node"):
        Ring(["a"], vnodes=0)


def test_the_ring_is_the_same_in_another_process() -> None:
    """No salted ``hash()``: another interpreter computes the same owners."""
    code = (
        "from trioperator._engine.sharding import Ring;"
        "r = Ring(['a', 'b', 'c']);"
        "print(','.join(str(r.owner(f'uid-{i}')) for i in range(50)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": PACKAGE_ROOT},
        cwd=PACKAGE_ROOT,
    ).stdout.strip()
    ring = Ring(["a", "b", "c"])
    assert out == ",".join(str(ring.owner(f"uid-{i}")) for i in range(50))


def test_an_owned_object_goes_where_its_controller_goes() -> None:
    parent = {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"}}
    child = {
        "metadata": {
            "name": "c",
            "uid": "uid-c",
            "ownerReferences": [
                {"uid": "uid-other", "controller": False},
                {"uid": "uid-p", "controller": True},
            ],
        }
    }
    loose = {"metadata": {"name": "c", "uid": "uid-c", "ownerReferences": [{"uid": "uid-x"}]}}
    assert ring_key(parent) == "uid-p"
    assert ring_key(child) == "uid-p"
    assert ring_key(loose) == "uid-c"
    assert ring_key({"metadata": {"name": "n", "namespace": "ns"}}) == "ns/n"
    assert ring_key({"metadata": {"name": "n"}}) == "/n"


def test_drained_views_round_trip_and_bad_ones_read_as_none() -> None:
    value = encode_drained(frozenset({"b", "a"}), "t1")
    assert decode_drained(value) == (frozenset({"a", "b"}), "t1")
    for bad in (None, 5, "not json", "[]", '{"members": "a"}', '{"members": [1]}'):
        assert decode_drained(bad) == (None, None)


def test_lease_names_are_valid_and_distinct() -> None:
    name = lease_name("Ring", "User@Host/2024/abc")
    assert name.startswith("ring-user-host-2024-abc-")
    assert all(ch.isalnum() or ch == "-" for ch in name)
    assert name == name.lower()
    assert lease_name("ring", "a/b") != lease_name("ring", "a-b")


def test_a_lease_parses_back_into_its_member() -> None:
    now = datetime.datetime(2024, 1, 2, 3, 4, 5, 678, tzinfo=datetime.UTC)
    body = lease_body(name="m1", namespace="ns", ring="r", holder="pod-1", duration=15, now=now)
    assert body["spec"]["renewTime"] == "2024-01-02T03:04:05.000678Z"
    body["metadata"]["annotations"] = {DRAINED_ANNOTATION: encode_drained(frozenset({"m1"}), "x")}
    body["metadata"]["resourceVersion"] = "7"
    member = parse_member(body, default_duration=30)
    assert member is not None
    assert (member.name, member.holder, member.duration) == ("m1", "pod-1", 15.0)
    assert (member.drained, member.token, member.version) == (frozenset({"m1"}), "x", "7")
    body["spec"]["leaseDurationSeconds"] = "soon"
    member = parse_member(body, default_duration=30)
    assert member is not None
    assert member.duration == 30
    assert parse_member({"metadata": {}}, default_duration=30) is None


def test_buckets_are_a_stable_function_of_the_ring_key() -> None:
    owner = {"metadata": {"uid": "u-owner"}}
    child = {
        "metadata": {
            "uid": "u-child",
            "ownerReferences": [{"uid": "u-owner", "controller": True}],
        }
    }
    assert bucket_of(owner, 128) == bucket_of(child, 128)  # children go with their owner
    spread = Counter(bucket_of({"metadata": {"uid": f"u-{index}"}}, 8) for index in range(800))
    assert set(spread) == {str(bucket) for bucket in range(8)}
    assert all(60 <= count <= 140 for count in spread.values()), spread


def test_bucket_selectors_name_some_all_or_none() -> None:
    assert buckets_selector(["10", "2", "2"], 16) == f"{SHARD_LABEL} in (2,10)"
    assert buckets_selector([str(bucket) for bucket in range(16)], 16) == SHARD_LABEL
    assert buckets_selector([], 16) == f"{SHARD_LABEL}=none"
    assert bucket_key("7") != "7"  # buckets and objects never share ring keys
