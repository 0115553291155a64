"""Resources: URLs of collections and objects, and building them from discovery documents."""

from __future__ import annotations

import json

import msgspec
import pytest
from trioperator._client.discovery import resources_from_list
from trioperator._client.resources import Resource
from trioperator._wire.discovery import (
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)

KEX = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
PODS = Resource(group="", version="v1", plural="pods", kind="Pod")
NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
CRDS = Resource(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    namespaced=False,
)


@pytest.mark.parametrize(
    ("resource", "kwargs", "url"),
    [
        (KEX, {}, "/apis/kopf.dev/v1/kopfexamples"),
        (KEX, {"namespace": "ns1"}, "/apis/kopf.dev/v1/namespaces/ns1/kopfexamples"),
        (
            KEX,
            {"namespace": "ns1", "name": "kex1"},
            "/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1",
        ),
        (
            KEX,
            {"namespace": "ns1", "name": "kex1", "subresource": "status"},
            "/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1/status",
        ),
        (PODS, {}, "/api/v1/pods"),
        (PODS, {"namespace": "default", "name": "p"}, "/api/v1/namespaces/default/pods/p"),
        (NODES, {"namespace": "ignored", "name": "n1"}, "/api/v1/nodes/n1"),
        (
            CRDS,
            {"name": "x.kopf.dev"},
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.kopf.dev",
        ),
    ],
)
def test_urls(resource: Resource, kwargs: dict[str, str], url: str) -> None:
    assert resource.get_url(**kwargs) == url


def test_subresource_needs_a_name() -> None:
    with pytest.raises(ValueError):
        KEX.get_url(namespace="ns", subresource="status")


def test_names() -> None:
    assert KEX.api_version == "kopf.dev/v1"
    assert PODS.api_version == "v1"
    assert PODS.core
    assert not KEX.core
    assert str(KEX) == "kopfexamples.v1.kopf.dev"
    assert str(PODS) == "pods.v1"


def test_resources_are_hashable_values() -> None:
    again = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
    assert again == KEX
    assert len({KEX, again, PODS}) == 2


# ---------------------------------------------------------------- discovery documents

CORE_VERSIONS = {
    "kind": "APIVersions",
    "versions": ["v1"],
    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}],
}

GROUPS = {
    "kind": "APIGroupList",
    "apiVersion": "v1",
    "groups": [
        {
            "name": "kopf.dev",
            "versions": [
                {"groupVersion": "kopf.dev/v1", "version": "v1"},
                {"groupVersion": "kopf.dev/v1beta1", "version": "v1beta1"},
            ],
            "preferredVersion": {"groupVersion": "kopf.dev/v1", "version": "v1"},
        }
    ],
}

KOPF_V1 = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "kopf.dev/v1",
    "resources": [
        {
            "name": "kopfexamples",
            "singularName": "kopfexample",
            "namespaced": True,
            "kind": "KopfExample",
            "verbs": [
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            ],
            "shortNames": ["kopfexes", "kopfex", "kexes", "kex"],
            "categories": ["all"],
            "storageVersionHash": "abc=",
        },
        {
            "name": "kopfexamples/status",
            "singularName": "",
            "namespaced": True,
            "kind": "KopfExample",
            "verbs": ["get", "patch", "update"],
        },
        {
            "name": "kopfexamples/scale",
            "singularName": "",
            "namespaced": True,
            "kind": "Scale",
            "group": "autoscaling",
            "version": "v1",
            "verbs": ["get", "patch", "update"],
        },
        {
            "name": "kopfpeerings",
            "singularName": "kopfpeering",
            "namespaced": True,
            "kind": "KopfPeering",
            "verbs": ["get", "list", "watch", "patch"],
        },
        {"name": "orphans/status", "namespaced": True, "kind": "Orphan", "verbs": ["get"]},
    ],
}


def test_decode_documents() -> None:
    assert decode_api_versions(json.dumps(CORE_VERSIONS).encode()).versions == ["v1"]
    groups = decode_api_group_list(json.dumps(GROUPS).encode()).groups
    assert groups[0].name == "kopf.dev"
    assert groups[0].preferred_version is not None
    assert groups[0].preferred_version.version == "v1"
    assert [v.group_version for v in groups[0].versions] == ["kopf.dev/v1", "kopf.dev/v1beta1"]


def test_resources_from_list_attaches_subresources() -> None:
    listing = decode_api_resource_list(json.dumps(KOPF_V1).encode())
    resources = resources_from_list(listing, group="kopf.dev", version="v1", preferred=True)
    by_plural = {r.plural: r for r in resources}
    assert set(by_plural) == {"kopfexamples", "kopfpeerings"}
    kex = by_plural["kopfexamples"]
    assert kex == Resource(
        group="kopf.dev",
        version="v1",
        plural="kopfexamples",
        kind="KopfExample",
        singular="kopfexample",
        shortcuts=frozenset({"kopfexes", "kopfex", "kexes", "kex"}),
        categories=frozenset({"all"}),
        subresources=frozenset({"status", "scale"}),
        namespaced=True,
        preferred=True,
        verbs=frozenset(KOPF_V1["resources"][0]["verbs"]),  # type: ignore[index]
    )
    assert by_plural["kopfpeerings"].subresources == frozenset()


def test_missing_singular_name_falls_back_to_the_kind() -> None:
    listing = decode_api_resource_list(
        b'{"groupVersion":"v1","resources":[{"name":"pods","singularName":"","namespaced":true,'
        b'"kind":"Pod","verbs":["list"]},{"name":"nodes","namespaced":false,"kind":"Node"}]}'
    )
    resources = resources_from_list(listing, group="", version="v1", preferred=False)
    assert [(r.plural, r.singular, r.namespaced, r.preferred) for r in resources] == [
        ("pods", "pod", True, False),
        ("nodes", "node", False, False),
    ]


def test_resource_list_without_resources() -> None:
    listing = decode_api_resource_list(b'{"kind":"APIResourceList","groupVersion":"x/v1"}')
    assert resources_from_list(listing, group="x", version="v1", preferred=True) == []


def test_malformed_resource_list() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_api_resource_list(b'{"resources": [{"kind": "NoName"}]}')
