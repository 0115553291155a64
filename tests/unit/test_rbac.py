"""``trioperator rbac``: the least-privilege rules computed from the handlers (no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from trioperator._client.resources import Resource
from trioperator._engine.builtin_resources import BUILTIN_RESOURCES, resources_from_crd
from trioperator._engine.handlers import (
    ChangingHandler,
    IndexingHandler,
    WatchingHandler,
    WebhookHandler,
    WebhookType,
)
from trioperator._engine.rbac import RBACError, required_permissions
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.selectors import EVERYTHING, Selector
from trioperator._engine.settings import OperatorSettings
from trioperator.cli import CLIControls, main

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
CRD_FILE = EXAMPLES / "crd.yaml"
KNOWN = BUILTIN_RESOURCES | set(resources_from_crd(yaml.safe_load(CRD_FILE.read_text())))

Grants = set[tuple[str, str, str, tuple[str, ...]]]
"""(kind/namespace of the role, API group, resource, verbs)"""

FRAMEWORK_CLUSTERWIDE: Grants = {
    ("ClusterRole", "", "events", ("create", "patch")),
    ("ClusterRole", "apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch")),
    ("ClusterRole", "kopf.dev", "clusterkopfpeerings", ("list", "watch", "patch")),
}
KOPFEXAMPLES_CHANGED: Grants = {
    ("ClusterRole", "kopf.dev", "kopfexamples", ("list", "watch", "patch")),
    ("ClusterRole", "kopf.dev", "kopfexamples/status", ("patch",)),
}


def _rbac(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[Any], str]:
    code = main(["rbac", *argv], controls=CLIControls(handle_signals=False))
    captured = capsys.readouterr()
    docs = [doc for doc in yaml.safe_load_all(captured.out) if doc] if code == 0 else []
    return code, docs, captured.err


def _grants(docs: list[dict[str, Any]]) -> Grants:
    grants: Grants = set()
    for doc in docs:
        where = doc["kind"]
        if doc["kind"] == "Role":
            where += "/" + doc["metadata"]["namespace"]
        for rule in doc.get("rules", []):
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.add((where, group, resource, tuple(rule["verbs"])))
    return grants


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("01-minimal", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        ("04-events", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        ("05-handlers", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        ("09-testing", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        ("13-hooks", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        ("14-daemons", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        ("15-timers", FRAMEWORK_CLUSTERWIDE | KOPFEXAMPLES_CHANGED),
        (
            "16-indexing",
            FRAMEWORK_CLUSTERWIDE
            | KOPFEXAMPLES_CHANGED
            | {("ClusterRole", "", "configmaps", ("list", "watch"))},
        ),
        (
            # Admission only: the objects are never watched; the configurations are managed.
            "17-admission",
            {
                (
                    "ClusterRole",
                    "apiextensions.k8s.io",
                    "customresourcedefinitions",
                    ("list", "watch"),
                ),
                ("ClusterRole", "kopf.dev", "clusterkopfpeerings", ("list", "watch", "patch")),
                (
                    "ClusterRole",
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations",
                    ("create", "patch"),
                ),
                (
                    "ClusterRole",
                    "admissionregistration.k8s.io",
                    "validatingwebhookconfigurations",
                    ("create", "patch"),
                ),
            },
        ),
    ],
)
def test_the_examples_get_exactly_the_rules_they_need_clusterwide(
    example: str, expected: Grants, capsys: pytest.CaptureFixture[str]
) -> None:
    code, docs, err = _rbac(
        [str(EXAMPLES / example / "example.py"), "--crd", str(CRD_FILE)], capsys
    )
    assert code == 0, err
    assert _grants(docs) == expected
    kinds = [doc["kind"] for doc in docs]
    assert kinds == ["ClusterRole", "ClusterRoleBinding"]
    binding = docs[1]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "trioperator",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trioperator", "namespace": "default"}
    ]


def test_namespaced_operators_get_a_role_per_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(EXAMPLES / "01-minimal" / "example.py"), "--crd", str(CRD_FILE)]
    argv += ["-n", "ns1", "-n", "ns2", "--service-account", "op", "--name", "my-op"]
    code, docs, err = _rbac(argv, capsys)
    assert code == 0, err
    local = {
        ("", "events", ("create", "patch")),
        ("kopf.dev", "kopfpeerings", ("list", "watch", "patch")),
        ("kopf.dev", "kopfexamples", ("list", "watch", "patch")),
        ("kopf.dev", "kopfexamples/status", ("patch",)),
    }
    assert _grants(docs) == {
        ("ClusterRole", "apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch")),
        ("ClusterRole", "", "namespaces", ("list", "watch")),
        *{("Role/ns1", *grant) for grant in local},
        *{("Role/ns2", *grant) for grant in local},
    }
    assert {doc["metadata"]["name"] for doc in docs} == {"my-op"}
    for doc in docs:
        if doc["kind"].endswith("Binding"):
            # The service account lives in the first namespace unless told otherwise.
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "op", "namespace": "ns1"}]
            assert doc["roleRef"]["kind"] == doc["kind"].removesuffix("Binding")


def test_standalone_operators_get_no_peering_rules(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(EXAMPLES / "01-minimal" / "example.py"), "--crd", str(CRD_FILE), "--standalone"]
    code, docs, _ = _rbac(argv, capsys)
    assert code == 0
    assert not any("peerings" in grant[2] for grant in _grants(docs))


def test_sharded_operators_get_lease_rules_in_the_rings_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [str(EXAMPLES / "01-minimal" / "example.py"), "--crd", str(CRD_FILE)]
    code, docs, _ = _rbac(argv, capsys)
    assert code == 0
    assert not any(grant[2] == "leases" for grant in _grants(docs))

    code, docs, _ = _rbac([*argv, "--shards", "auto", "--service-account-namespace", "ops"], capsys)
    assert code == 0
    verbs = ("get", "list", "watch", "create", "patch", "delete")
    assert ("Role/ops", "coordination.k8s.io", "leases", verbs) in _grants(docs)
    assert [grant for grant in _grants(docs) if grant[2] == "leases"] == [
        ("Role/ops", "coordination.k8s.io", "leases", verbs)
    ]
    code, docs, _ = _rbac([*argv, "--shards", "auto", "--shard-namespace", "rings"], capsys)
    assert ("Role/rings", "coordination.k8s.io", "leases", verbs) in _grants(docs)


def _webhook_ca_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["metadata"]["name"].endswith("-webhook-ca")]


def test_the_webhook_ca_secret_is_readable_by_name_and_creatable_in_its_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [str(EXAMPLES / "17-admission" / "example.py"), "--crd", str(CRD_FILE)]
    code, docs, _ = _rbac(argv, capsys)
    assert code == 0
    assert not any(grant[2] == "secrets" for grant in _grants(docs))

    argv += ["--webhook-ca-secret", "hooks-ca", "--service-account-namespace", "ops"]
    code, docs, _ = _rbac(argv, capsys)
    assert code == 0
    role, binding = _webhook_ca_roles(docs)
    assert (role["kind"], role["metadata"]) == (
        "Role",
        {"name": "trioperator-webhook-ca", "namespace": "ops"},
    )
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["hooks-ca"],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    assert binding["roleRef"]["name"] == "trioperator-webhook-ca"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trioperator", "namespace": "ops"}
    ]
    # Only there: nothing on secrets anywhere else.
    assert {g for g in _grants(docs) if g[2] == "secrets"} == {
        ("Role/ops", "", "secrets", ("get",)),
        ("Role/ops", "", "secrets", ("create",)),
    }

    code, docs, _ = _rbac([*argv, "--webhook-ca-namespace", "certs"], capsys)
    assert code == 0
    assert {doc["metadata"]["namespace"] for doc in _webhook_ca_roles(docs)} == {"certs"}


def test_without_admission_handlers_no_webhook_ca_rules(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(EXAMPLES / "01-minimal" / "example.py"), "--crd", str(CRD_FILE)]
    code, docs, _ = _rbac([*argv, "--webhook-ca-secret", "hooks-ca"], capsys)
    assert code == 0
    assert _webhook_ca_roles(docs) == []


def test_the_webhook_ca_manifest_is_what_the_generator_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # manifests/webhook-ca-rbac.yaml grants what WebhookServiceServer(name="trioperator-webhooks")
    # needs by default; it must not drift from the generator either.
    argv = [str(EXAMPLES / "17-admission" / "example.py"), "--crd", str(CRD_FILE), "-A"]
    argv += ["--service-account", "trioperator", "--service-account-namespace", "trioperator"]
    argv += ["--webhook-ca-secret", "trioperator-webhooks-ca"]
    code, docs, _ = _rbac(argv, capsys)
    assert code == 0
    manifest = ROOT / "manifests" / "webhook-ca-rbac.yaml"
    committed = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc]
    assert committed == _webhook_ca_roles(docs)


def test_unmanaged_webhooks_get_no_configuration_rules(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(EXAMPLES / "17-admission" / "example.py"), "--crd", str(CRD_FILE)]
    code, docs, _ = _rbac([*argv, "--no-managed-webhooks"], capsys)
    assert code == 0
    assert not any(grant[1] == "admissionregistration.k8s.io" for grant in _grants(docs))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Without the CRD, the group of "kopfexamples" is unknown: said so, with the remedy.
        ([str(EXAMPLES / "01-minimal" / "example.py")], "--crd FILE"),
        (["-n", "app-*", str(EXAMPLES / "01-minimal" / "example.py")], "not a namespace name"),
        (["-n", "a", "-A", str(EXAMPLES / "01-minimal" / "example.py")], "Either --namespace"),
        (
            ["--crd", "/nonexistent.yaml", str(EXAMPLES / "01-minimal" / "example.py")],
            "Cannot read",
        ),
        (
            ["--crd", str(ROOT / "pyproject.toml"), str(EXAMPLES / "01-minimal" / "example.py")],
            "YAML",
        ),
        (["--crd", str(ROOT / "manifests" / "peering-objects.yaml"), "x.py"], "no CustomResource"),
        # Its handlers go to its own registry, not the default one: nothing to compute from.
        ([str(EXAMPLES / "12-embedded" / "example.py")], "No handlers"),
    ],
)
def test_what_cannot_be_computed_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _rbac(argv, capsys)
    assert code == 2
    assert message in err


# ------------------------------------------------------------------------------ the engine


def _registry(*handlers: object) -> OperatorRegistry:
    registry = OperatorRegistry()
    for handler in handlers:
        registry.append(handler)  # type: ignore[arg-type]
    return registry


def _handler(kind: type[Any], selector: Selector) -> Any:
    kwargs: dict[str, Any] = {"fn": lambda **_: None, "id": "fn", "selector": selector}
    if kind is ChangingHandler:
        kwargs["reason"] = None
    if kind is WebhookHandler:
        kwargs["reason"] = WebhookType.VALIDATING
    return kind(**kwargs)


def test_event_and_index_handlers_only_read() -> None:
    registry = _registry(
        _handler(WatchingHandler, Selector("pods")),
        _handler(IndexingHandler, Selector("apps", "deployments")),
    )
    settings = OperatorSettings()
    settings.peering.standalone = True
    permissions = required_permissions(registry, settings, BUILTIN_RESOURCES)
    grants = {(r.group, r.resources[0], r.verbs) for r in permissions.cluster}
    assert ("", "pods", ("list", "watch")) in grants
    assert ("apps", "deployments", ("list", "watch")) in grants
    assert not any(verbs != ("list", "watch") for group, res, verbs in grants if res != "events")


def test_no_status_rule_without_a_status_subresource() -> None:
    registry = _registry(_handler(ChangingHandler, Selector("configmaps")))
    permissions = required_permissions(registry, OperatorSettings(), BUILTIN_RESOURCES)
    resources = {rule.resources[0] for rule in permissions.cluster}
    assert "configmaps" in resources
    assert "configmaps/status" not in resources


def test_cluster_scoped_objects_of_a_namespaced_operator() -> None:
    # Served cluster-wide even by a namespaced operator; their events go to "default".
    registry = _registry(_handler(ChangingHandler, Selector("nodes")))
    permissions = required_permissions(
        registry, OperatorSettings(), BUILTIN_RESOURCES, namespaces=["ns1"]
    )
    cluster = {(r.group, r.resources[0], r.verbs) for r in permissions.cluster}
    assert ("", "nodes", ("list", "watch", "patch")) in cluster
    assert ("", "nodes/status", ("patch",)) in cluster
    assert [(r.resources, r.verbs) for r in permissions.default_namespace] == [
        (("events",), ("create", "patch"))
    ]


def test_scanning_disabled_needs_no_observation() -> None:
    registry = _registry(_handler(ChangingHandler, Selector("pods")))
    settings = OperatorSettings()
    settings.scanning.disabled = True
    permissions = required_permissions(registry, settings, BUILTIN_RESOURCES, namespaces=["a"])
    everything = {r.resources[0] for r in permissions.cluster + permissions.namespaced}
    assert "namespaces" not in everything
    assert "customresourcedefinitions" not in everything


@pytest.mark.parametrize(
    "selector",
    [Selector(EVERYTHING), Selector(lambda resource: True), Selector(category="all")],
)
def test_selectors_without_names_cannot_be_made_least_privilege(selector: Selector) -> None:
    registry = _registry(_handler(WatchingHandler, selector))
    with pytest.raises(RBACError, match="cannot be known in advance"):
        required_permissions(registry, OperatorSettings(), BUILTIN_RESOURCES)


def test_ambiguous_selectors_are_refused() -> None:
    other = Resource(group="example.com", version="v1", plural="widgets", kind="Widget")
    mine = Resource(group="example.org", version="v1", plural="widgets", kind="Widget")
    registry = _registry(_handler(WebhookHandler, Selector("widgets")))
    with pytest.raises(RBACError, match="Ambiguous"):
        required_permissions(registry, OperatorSettings(), {other, mine})


def test_the_rbac_manifest_is_what_the_generator_prints(capsys: pytest.CaptureFixture[str]) -> None:
    # manifests/rbac.yaml must not drift from the code that decides what is requested.
    argv = [str(EXAMPLES / "01-minimal" / "example.py"), "--crd", str(CRD_FILE), "-A"]
    argv += ["--service-account", "trioperator", "--service-account-namespace", "trioperator"]
    code, docs, _ = _rbac(argv, capsys)
    assert code == 0
    committed = [doc for doc in yaml.safe_load_all((ROOT / "manifests" / "rbac.yaml").read_text())]
    assert [doc for doc in committed if doc] == docs


def test_crds_of_both_apiextensions_versions_are_understood() -> None:
    v1beta1 = {
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "version": "v1alpha1",
            "scope": "Cluster",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "subresources": {"status": {}},
        },
    }
    (widget,) = resources_from_crd(v1beta1)
    assert (widget.group, widget.version, widget.plural) == ("example.com", "v1alpha1", "widgets")
    assert (widget.namespaced, widget.subresources, widget.preferred) == (False, {"status"}, True)
    assert Selector("wd").select([widget]) == {widget}

    (kopfexample,) = resources_from_crd(yaml.safe_load(CRD_FILE.read_text()))
    assert (kopfexample.group, kopfexample.plural) == ("kopf.dev", "kopfexamples")
    assert (kopfexample.namespaced, kopfexample.subresources) == (True, {"status"})


@pytest.mark.parametrize(
    ("crd", "message"),
    [
        ({"kind": "ConfigMap"}, "not a CustomResourceDefinition"),
        ({"kind": "CustomResourceDefinition", "metadata": {"name": "x"}}, "has no spec"),
        ({"kind": "CustomResourceDefinition", "spec": {"group": "g"}}, "lacks spec.group"),
        (
            {
                "kind": "CustomResourceDefinition",
                "spec": {"group": "g", "names": {"plural": "xs", "kind": "X"}, "versions": []},
            },
            "serves no versions",
        ),
    ],
)
def test_unusable_crds_are_refused_with_what_is_wrong(crd: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resources_from_crd(crd)


def test_the_container_environment_does_not_confuse_rbac(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image sets TRIOPERATOR_LOG_FORMAT for `run`; `rbac` has no such option.
    monkeypatch.setenv("TRIOPERATOR_LOG_FORMAT", "json")
    argv = [str(EXAMPLES / "01-minimal" / "example.py"), "--crd", str(CRD_FILE)]
    code, docs, err = _rbac(argv, capsys)
    assert code == 0, err
    assert [doc["kind"] for doc in docs] == ["ClusterRole", "ClusterRoleBinding"]


def test_discovery_without_a_cluster_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    code, _, err = _rbac([str(EXAMPLES / "01-minimal" / "example.py"), "--discover"], capsys)
    assert code == 2
    assert "--discover: cannot read the cluster's resources" in err
