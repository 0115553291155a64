"""``operator.py`` on the fake API (which answers server-side apply with field managers), on
trio's mock clock: what the fake ends up holding is what a cluster would hold.

There is no Deployment controller here: the tests write the Deployment's status as it would
(``deployment_controller_reports``). The same scenarios run against a real kube-apiserver with
kube-controller-manager in tests/e2e/test_controller_example.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import trio.testing
import trioperator as kopf
import yaml
from trioperator import conditions
from trioperator.testing import FakeAPI, OperatorRunner, load_registry

pytest_plugins = ["trioperator.testing.pytest_plugin"]

HERE = Path(__file__).resolve().parent
OPERATOR = HERE / "operator.py"
CRD = HERE / "crd.yaml"
WEBAPP: dict[str, Any] = yaml.safe_load((HERE / "webapp.yaml").read_text())
NS = "default"
MANAGER = "webapp-operator"


def webapp(**spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(WEBAPP)
    body["spec"].update(spec)
    return body


def condition(obj: dict[str, Any], type: str) -> dict[str, Any]:
    found = conditions.find_condition(obj, type)
    assert found is not None, f"no {type} condition in {obj.get('status')!r}"
    return found


def has_condition(type: str, status: str, reason: str | None = None) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        found = conditions.find_condition(obj, type)
        return (
            found is not None
            and found["status"] == status
            and (reason is None or found["reason"] == reason)
        )

    check.__name__ = f"{type}={status}" + (f" ({reason})" if reason else "")
    return check


def managers_of(obj: dict[str, Any], *path: str) -> set[str]:
    """The field managers that own the field at ``path`` (``"spec", "replicas"``)."""
    owners = set()
    for entry in obj["metadata"].get("managedFields", []):
        fields = entry.get("fieldsV1") or {}
        for key in path:
            fields = fields.get(f"f:{key}")
            if fields is None:
                break
        else:
            owners.add(entry["manager"])
    return owners


def deployment_controller_reports(api: FakeAPI, name: str = "web") -> None:
    """Write the status kube-controller-manager writes once it made the ReplicaSet (no pods
    run: none available)."""
    deployment = api.get_object("deployments", name, NS)
    replicas = deployment["spec"]["replicas"]
    api.patch_object(
        "deployments",
        name,
        {
            "status": {
                "observedGeneration": deployment["metadata"]["generation"],
                "replicas": replicas,
                "updatedReplicas": replicas,
                "unavailableReplicas": replicas,
                "conditions": [
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                     "message": "Deployment does not have minimum availability."},
                    {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                     "message": f'ReplicaSet "{name}-5d4f" is progressing.'},
                ],
            }
        },
        NS,
    )  # fmt: skip


async def test_children_applied_and_ready_once_the_deployment_is_rolled_out(
    autojump_clock: trio.testing.MockClock, operator_runner: OperatorRunner
) -> None:
    async with operator_runner(registry=load_registry(OPERATOR), crds=[CRD]) as operator:
        api: FakeAPI = operator.api
        owner = api.create_object("webapps", webapp(), NS)
        configmap = await operator.wait_for_object("configmaps", "web-settings", NS)
        deployment = await operator.wait_for_object("deployments", "web", NS)
        pending = await operator.wait_for_object(
            "webapps", "web", NS, has_condition("Ready", "False", "RolloutPending")
        )

        assert configmap["data"] == {"greeting": "hello", "log_level": "info"}
        assert deployment["spec"]["replicas"] == 2
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "nginx:1.25"
        assert container["envFrom"] == [{"configMapRef": {"name": "web-settings"}}]
        for child in (configmap, deployment):
            [reference] = child["metadata"]["ownerReferences"]
            assert (reference["kind"], reference["uid"]) == ("WebApp", owner["metadata"]["uid"])
            assert reference["controller"] is True
            assert {e["manager"] for e in child["metadata"]["managedFields"]} == {MANAGER}
            assert [e["operation"] for e in child["metadata"]["managedFields"]] == ["Apply"]
        assert condition(pending, "ChildrenSynced")["status"] == "True"
        assert condition(pending, "Available")["status"] == "Unknown"

        deployment_controller_reports(api)
        ready = await operator.wait_for_object("webapps", "web", NS, has_condition("Ready", "True"))
        generation = ready["metadata"]["generation"]
        assert condition(ready, "Ready") == {
            "type": "Ready",
            "status": "True",
            "reason": "RolledOut",
            "message": "0/2 replicas available",
            "observedGeneration": generation,
            "lastTransitionTime": condition(ready, "Ready")["lastTransitionTime"],
        }
        assert condition(ready, "Available")["status"] == "False"
        assert condition(ready, "Available")["reason"] == "MinimumReplicasUnavailable"
        assert ready["status"]["observedGeneration"] == generation

        # A spec change: the children follow, Ready waits for the controller again.
        api.patch_object("webapps", "web", {"spec": {"replicas": 3, "settings": {"x": "y"}}}, NS)
        await operator.wait_for_object(
            "deployments", "web", NS, lambda d: d["spec"]["replicas"] == 3
        )
        changed = await operator.wait_for_object("configmaps", "web-settings", NS)
        assert changed["data"] == {"greeting": "hello", "log_level": "info", "x": "y"}
        pending = await operator.wait_for_object(
            "webapps", "web", NS, has_condition("Ready", "False", "RolloutPending")
        )
        assert condition(pending, "Ready")["observedGeneration"] == generation + 1
        rolled = api.get_object("deployments", "web", NS)["spec"]["template"]
        assert (
            rolled["metadata"]["annotations"]
            != deployment["spec"]["template"]["metadata"]["annotations"]
        )  # new settings, new config hash: the pods roll
        deployment_controller_reports(api)
        await operator.wait_for_object("webapps", "web", NS, has_condition("Ready", "True"))
    assert operator.exception is None


@pytest.mark.parametrize(
    ("resource", "name"), [("configmaps", "web-settings"), ("deployments", "web")]
)
async def test_a_deleted_child_is_made_again(
    autojump_clock: trio.testing.MockClock,
    operator_runner: OperatorRunner,
    resource: str,
    name: str,
) -> None:
    async with operator_runner(registry=load_registry(OPERATOR), crds=[CRD]) as operator:
        api: FakeAPI = operator.api
        api.create_object("webapps", webapp(), NS)
        first = await operator.wait_for_object(resource, name, NS)
        await operator.wait_for_object(
            "webapps", "web", NS, has_condition("ChildrenSynced", "True")
        )

        api.delete_object(resource, name, NS)
        again = await operator.wait_for_object(
            resource, name, NS, lambda obj: obj["metadata"]["uid"] != first["metadata"]["uid"]
        )
        assert again["metadata"]["ownerReferences"] == first["metadata"]["ownerReferences"]
        assert again.get("data") == first.get("data")
        assert again.get("spec") == first.get("spec")
    assert operator.exception is None


async def _take_replicas(api: FakeAPI) -> None:
    """Another field manager (a user's ``kubectl apply --server-side --force-conflicts``)
    takes ``spec.replicas`` of the Deployment."""
    intent = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 5},
    }
    taken = api.apply_object("deployments", intent, manager="kubectl", force=True)
    assert taken["spec"]["replicas"] == 5
    assert managers_of(taken, "spec", "replicas") == {"kubectl"}


async def test_a_field_taken_by_another_manager_is_taken_back_when_forcing(
    autojump_clock: trio.testing.MockClock, operator_runner: OperatorRunner
) -> None:
    async with operator_runner(registry=load_registry(OPERATOR), crds=[CRD]) as operator:
        api: FakeAPI = operator.api
        api.create_object("webapps", webapp(conflictPolicy="Force"), NS)
        await operator.wait_for_object(
            "webapps", "web", NS, has_condition("ChildrenSynced", "True")
        )

        await _take_replicas(api)
        back = await operator.wait_for_object(
            "deployments", "web", NS, lambda d: d["spec"]["replicas"] == 2
        )
        assert managers_of(back, "spec", "replicas") == {MANAGER}
        await operator.wait_for_object(
            "webapps", "web", NS, has_condition("ChildrenSynced", "True")
        )
    assert operator.exception is None
    operator.logs.assert_in_order(
        r"Deployment web: taking back \.spec\.replicas \(managed by kubectl\)"
    )


@pytest.mark.parametrize("configured", ["spec", "env"])
async def test_a_field_taken_by_another_manager_is_reported_when_so_configured(
    autojump_clock: trio.testing.MockClock,
    operator_runner: OperatorRunner,
    monkeypatch: pytest.MonkeyPatch,
    configured: str,
) -> None:
    if configured == "env":
        monkeypatch.setenv("WEBAPP_CONFLICT_POLICY", "Report")
        body = webapp()
    else:
        monkeypatch.setenv("WEBAPP_CONFLICT_POLICY", "Force")  # the spec field wins
        body = webapp(conflictPolicy="Report")
    async with operator_runner(registry=load_registry(OPERATOR), crds=[CRD]) as operator:
        api: FakeAPI = operator.api
        api.create_object("webapps", body, NS)
        await operator.wait_for_object(
            "webapps", "web", NS, has_condition("ChildrenSynced", "True")
        )
        deployment_controller_reports(api)
        await operator.wait_for_object("webapps", "web", NS, has_condition("Ready", "True"))

        await _take_replicas(api)
        reported = await operator.wait_for_object(
            "webapps", "web", NS, has_condition("ChildrenSynced", "False", "FieldConflict")
        )
        assert condition(reported, "ChildrenSynced")["message"] == (
            "Deployment web: .spec.replicas (managed by kubectl)"
        )
        assert condition(reported, "Ready")["status"] == "False"
        assert condition(reported, "Ready")["reason"] == "FieldConflict"
        await trio.sleep(60)
        left = api.get_object("deployments", "web", NS)
        assert left["spec"]["replicas"] == 5  # the other manager's value stays
        assert managers_of(left, "spec", "replicas") == {"kubectl"}

        # The user gives the field back (applies without it): the operator's apply succeeds.
        intent = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
        api.apply_object("deployments", intent, manager="kubectl", namespace=NS)
        await operator.wait_for_object(
            "webapps", "web", NS, has_condition("ChildrenSynced", "True")
        )
        synced = await operator.wait_for_object(
            "deployments", "web", NS, lambda d: d["spec"]["replicas"] == 2
        )
        assert managers_of(synced, "spec", "replicas") == {MANAGER}
    assert operator.exception is None


async def test_a_bad_default_policy_stops_the_operator_at_startup(
    autojump_clock: trio.testing.MockClock,
    operator_runner: OperatorRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEBAPP_CONFLICT_POLICY", "Sometimes")
    runner = operator_runner(registry=load_registry(OPERATOR), crds=[CRD], reraise=False)
    async with runner as operator:
        assert operator.finished
        assert not operator.ready
    assert isinstance(operator.exception, kopf.ActivityError)
    assert "WEBAPP_CONFLICT_POLICY must be one of" in operator.logs.text
