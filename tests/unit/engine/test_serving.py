"""What an operator serves: namespaces from their events, what CRDs say, the watchers wanted."""

from __future__ import annotations

import re
from typing import Any

import pytest
from trioperator._client.resources import Resource
from trioperator._engine.serving import (
    CRDBook,
    CRDInfo,
    CRDKey,
    crd_info,
    crd_key,
    describe_crd,
    describe_watcher,
    desired_watchers,
    is_namespace_gone,
    served_namespace,
    watcher_order,
)

KEX_V1 = Resource(group="kopf.dev", version="v1", plural="kopfexamples", namespaced=True)
KEX_V2 = Resource(group="kopf.dev", version="v2", plural="kopfexamples", namespaced=True)
NODES = Resource(group="", version="v1", plural="nodes", namespaced=False)
PODS = Resource(group="", version="v1", plural="pods", namespaced=True)


def crd(
    *versions: str | tuple[str, bool], established: bool = True, deleting: bool = False
) -> dict[str, Any]:
    entries = [
        {"name": v, "served": True} if isinstance(v, str) else {"name": v[0], "served": v[1]}
        for v in versions
    ]
    metadata: dict[str, Any] = {"name": "kopfexamples.kopf.dev"}
    if deleting:
        metadata["deletionTimestamp"] = "2020-12-31T23:59:59Z"
    conditions = [{"type": "Established", "status": "True" if established else "False"}]
    return {
        "metadata": metadata,
        "spec": {"group": "kopf.dev", "names": {"plural": "kopfexamples"}, "versions": entries},
        "status": {"conditions": conditions},
    }


def listed(obj: dict[str, Any]) -> tuple[CRDKey, CRDInfo]:
    described = describe_crd(obj)
    assert described is not None
    return described


def event(type: str | None, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": type, "object": obj}


def namespace(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **extra.pop("metadata", {})}, **extra}


# ---------------------------------------------------------------------------- namespaces


@pytest.mark.parametrize(
    ("type", "obj", "gone"),
    [
        (None, namespace("ns1"), False),
        ("ADDED", namespace("ns1"), False),
        ("MODIFIED", namespace("ns1", status={"phase": "Active"}), False),
        ("MODIFIED", namespace("ns1", status={"phase": "Terminating"}), True),
        (
            "MODIFIED",
            namespace("ns1", metadata={"deletionTimestamp": "2020-12-31T23:59:59Z"}),
            True,
        ),
        ("DELETED", namespace("ns1"), True),
    ],
)
def test_a_namespace_is_gone_once_deleted_deleting_or_terminating(
    type: str | None, obj: dict[str, Any], gone: bool
) -> None:
    assert is_namespace_gone(event(type, obj)) is gone


def test_a_namespace_is_served_if_it_exists_and_matches_a_pattern() -> None:
    patterns = ["ns*,!ns-x", re.compile(r"other")]
    assert served_namespace(event(None, namespace("ns1")), patterns) == "ns1"
    assert served_namespace(event("ADDED", namespace("other")), patterns) == "other"
    assert served_namespace(event("ADDED", namespace("ns-x")), patterns) is None
    assert served_namespace(event("ADDED", namespace("nope")), patterns) is None
    assert served_namespace(event("DELETED", namespace("ns1")), patterns) is None
    terminating = namespace("ns1", status={"phase": "Terminating"})
    assert served_namespace(event("MODIFIED", terminating), patterns) is None
    assert served_namespace(event("ADDED", {"metadata": {}}), patterns) is None


# ---------------------------------------------------------------------------- CRDs


def test_a_crd_says_what_it_defines_and_which_versions_it_serves() -> None:
    obj = crd("v1", ("v2", False), "v3")
    assert crd_key(obj) == ("kopf.dev", "kopfexamples")
    assert crd_info(obj) == CRDInfo(served=frozenset({"v1", "v3"}), established=True)
    assert describe_crd(obj) == (crd_key(obj), crd_info(obj))


def test_a_crd_being_deleted_or_not_accepted_is_not_established() -> None:
    assert not crd_info(crd("v1", established=False)).established
    assert not crd_info(crd("v1", deleting=True)).established
    assert not crd_info({"spec": {"versions": [{"name": "v1"}]}}).established


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"spec": {"group": "kopf.dev"}},
        {"spec": {"names": {"plural": "kopfexamples"}}},
        {"spec": {"group": "", "names": {"plural": "kopfexamples"}}},
        {"spec": {"group": 1, "names": {"plural": "kopfexamples"}}},
    ],
)
def test_a_crd_without_a_group_or_plural_is_unusable(obj: dict[str, Any]) -> None:
    assert crd_key(obj) is None
    assert describe_crd(obj) is None
    book = CRDBook()
    assert not book.change(event("ADDED", obj))  # nothing to remember


def test_the_crds_deny_versions_they_do_not_serve_and_nothing_else() -> None:
    book = CRDBook()
    assert not book.denies(KEX_V1)  # no CRD seen: the discovery decides
    book.relist([listed(crd("v2"))])
    assert book.denies(KEX_V1)
    assert not book.denies(KEX_V2)
    assert not book.denies(PODS)  # not defined by any CRD


def test_a_deleted_crd_denies_its_resources_until_it_is_seen_again() -> None:
    book = CRDBook()
    book.relist([listed(crd("v1"))])
    assert book.change(event("DELETED", crd("v1")))
    assert book.denies(KEX_V1)
    book.relist([])  # a listing without it: still deleted (not only unknown)
    assert book.denies(KEX_V1)
    assert book.change(event("ADDED", crd("v1")))
    assert not book.denies(KEX_V1)
    book.change(event("DELETED", crd("v1")))
    book.relist([listed(crd("v1"))])  # seen again in a listing
    assert not book.denies(KEX_V1)


def test_the_discovery_agrees_once_it_shows_what_the_crds_say() -> None:
    book = CRDBook()
    assert book.agrees([PODS])
    book.change(event("ADDED", crd("v1", "v2")))
    assert not book.agrees([PODS, KEX_V1])  # v2 is established but not discovered yet
    assert book.agrees([PODS, KEX_V1, KEX_V2])
    book.change(event("MODIFIED", crd("v1", ("v2", False))))
    assert not book.agrees([PODS, KEX_V1, KEX_V2])  # v2 is still discovered: not served
    assert book.agrees([PODS, KEX_V1])
    book.change(event("DELETED", crd("v1")))
    assert not book.agrees([PODS, KEX_V1])
    assert book.agrees([PODS])


def test_a_crd_not_established_yet_is_not_expected_in_the_discovery() -> None:
    book = CRDBook()
    book.change(event("ADDED", crd("v1", established=False)))
    assert book.agrees([PODS])


# ---------------------------------------------------------------------------- watchers


def test_namespaced_resources_are_watched_in_every_namespace_cluster_scoped_once() -> None:
    keys = desired_watchers(
        [PODS, NODES], namespaces=["ns1", "ns2"], clusterwide=False, crds=CRDBook()
    )
    assert keys == {(PODS, "ns1"), (PODS, "ns2"), (NODES, None)}


def test_clusterwide_every_resource_is_watched_once() -> None:
    keys = desired_watchers([PODS, NODES], namespaces=[], clusterwide=True, crds=CRDBook())
    assert keys == {(PODS, None), (NODES, None)}


def test_gone_resources_and_those_the_crds_deny_are_not_watched() -> None:
    book = CRDBook()
    book.relist([listed(crd("v2"))])
    keys = desired_watchers(
        [PODS, NODES, KEX_V1, KEX_V2],
        namespaces=["ns1"],
        clusterwide=False,
        crds=book,
        gone=[NODES],
    )
    assert keys == {(PODS, "ns1"), (KEX_V2, "ns1")}


def test_watchers_are_described_and_ordered_readably() -> None:
    assert describe_watcher((PODS, None)) == "pods.v1 cluster-wide"
    assert describe_watcher((PODS, "ns1")) == "pods.v1 in 'ns1'"
    keys = [(PODS, "b"), (NODES, None), (PODS, None), (PODS, "a")]
    assert sorted(keys, key=watcher_order) == [
        (NODES, None),
        (PODS, None),
        (PODS, "a"),
        (PODS, "b"),
    ]
