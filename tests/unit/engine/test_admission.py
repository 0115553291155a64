"""Admission decisions: handler selection, kwargs, JSON-patches, error mapping, managed webhooks."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trioperator as kopf
from trioperator._client.resources import Resource
from trioperator._engine.admission import (
    CaseInsensitiveHeaders,
    WebhookCause,
    build_webhooks,
    find_resource,
    judge,
    labels_selector,
    mutation_patch,
    resolve_webhook_id,
    select_handlers,
    url_with_handler_id,
    webhook_name,
)
from trioperator._engine.bodies import Body
from trioperator._engine.diffs import diff
from trioperator._engine.handlers import WebhookHandler
from trioperator._engine.patches import Patch, apply_json_patch
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.webhooks import WebhookRejected

EXAMPLES = Resource(
    group="kopf.dev",
    version="v1",
    plural="kopfexamples",
    kind="KopfExample",
    singular="kopfexample",
)
PODS = Resource(group="", version="v1", plural="pods", kind="Pod", singular="pod")

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {
        "name": "ex1",
        "namespace": "ns1",
        "uid": "uid-1",
        "labels": {"app": "demo"},
        "annotations": {"example.com/note": "x"},
    },
    "spec": {"field": "value", "items": [1, 2]},
}


def fn(**_: Any) -> None:
    pass


def cause(
    body: dict[str, Any] | None = None,
    *,
    operation: str = "CREATE",
    subresource: str | None = None,
    old: dict[str, Any] | None = None,
) -> WebhookCause:
    raw = body if body is not None else OBJ
    new = None if operation == "DELETE" else Body(raw)
    old_body = Body(old) if old is not None else (Body(raw) if operation == "DELETE" else None)
    return WebhookCause(
        logger=logging.getLogger("test"),
        memo=kopf.Memo(),
        indices={},
        resource=EXAMPLES,
        patch=Patch(),
        body=Body(raw),
        operation=operation,
        subresource=subresource,
        dryrun=True,
        userinfo={"username": "admin"},
        headers={"host": "x"},
        sslpeer={},
        warnings=[],
        old=old_body,
        new=new,
        diff=diff(old_body, new),
    )


def ids(handlers: list[WebhookHandler]) -> list[str]:
    return [handler.id for handler in handlers]


# ----------------------------------------------------------------------------------- reviews


def test_the_resource_is_found_by_group_version_plural() -> None:
    assert find_resource([PODS, EXAMPLES], group="kopf.dev", version="v1", plural="kopfexamples")
    assert find_resource([PODS, EXAMPLES], group="", version="v1", plural="pods") == PODS


@pytest.mark.parametrize(
    ("group", "version", "plural", "shown"),
    [
        ("kopf.dev", "v2", "kopfexamples", "kopfexamples.v2.kopf.dev"),
        ("", "v1", "services", "services.v1"),
    ],
)
def test_an_unserved_resource_is_a_404(group: str, version: str, plural: str, shown: str) -> None:
    with pytest.raises(WebhookRejected) as info:
        find_resource([PODS, EXAMPLES], group=group, version=version, plural=plural)
    assert info.value.status == 404
    assert shown in info.value.message


def test_webhook_ids_from_url_paths() -> None:
    registry = OperatorRegistry()
    kopf.on.validate("kopfexamples", id="check/spec.field", registry=registry)(fn)
    assert resolve_webhook_id(registry, None) is None
    assert resolve_webhook_id(registry, "") is None
    assert resolve_webhook_id(registry, "check/spec.field") == "check/spec.field"
    assert resolve_webhook_id(registry, "check%2Fspec.field") == "check/spec.field"
    with pytest.raises(WebhookRejected, match="Unknown webhook 'nope'") as info:
        resolve_webhook_id(registry, "nope")
    assert info.value.status == 404


def test_the_kwargs_kopf_gives() -> None:
    kwargs = cause(operation="UPDATE", old={**OBJ, "spec": {"field": "old"}}).kwargs
    assert set(kwargs) >= {
        "body", "spec", "meta", "status", "name", "namespace", "labels", "annotations", "uid",
        "resource", "logger", "memo", "old", "new", "diff", "patch", "operation", "subresource",
        "dryrun", "userinfo", "headers", "sslpeer", "warnings",
    }  # fmt: skip
    assert kwargs["name"] == "ex1"
    assert kwargs["namespace"] == "ns1"
    assert kwargs["uid"] == "uid-1"
    assert kwargs["labels"] == {"app": "demo"}
    assert kwargs["spec"]["field"] == "value"
    assert kwargs["old"]["spec"] == {"field": "old"}
    assert ("change", ("spec", "field"), "old", "value") in kwargs["diff"]
    assert kwargs["dryrun"] is True
    assert kwargs["operation"] == "UPDATE"
    assert kwargs["warnings"] == []
    assert kwargs["resource"] == EXAMPLES
    assert "reason" not in kwargs
    assert "webhook" not in kwargs


def registry_of_all() -> OperatorRegistry:
    registry = OperatorRegistry()
    kopf.on.validate("kopfexamples", id="v-all", registry=registry)(fn)
    kopf.on.validate("kopfexamples", id="v-create", operations=["CREATE"], registry=registry)(fn)
    kopf.on.validate("kopfexamples", id="v-status", subresource="status", registry=registry)(fn)
    kopf.on.validate("kopfexamples", id="v-any-sub", subresource="*", registry=registry)(fn)
    kopf.on.validate("kopfexamples", id="v-labelled", labels={"app": "other"}, registry=registry)(
        fn
    )
    kopf.on.validate("kopfexamples", id="v-when", when=lambda spec, **_: "x" in spec,
                     registry=registry)(fn)  # fmt: skip
    kopf.on.mutate("kopfexamples", id="m-all", registry=registry)(fn)
    kopf.on.mutate("kopfexamples", id="m-delete", operations=["DELETE"], registry=registry)(fn)
    kopf.on.mutate("kopfexamples", id="m-cd", operations=["CREATE", "DELETE"], registry=registry)(
        fn
    )
    kopf.on.validate("pods", id="v-pods", registry=registry)(fn)
    return registry


@pytest.mark.parametrize(
    ("operation", "subresource", "expected"),
    [
        ("CREATE", None, ["v-all", "v-create", "v-any-sub", "m-all", "m-cd"]),
        ("UPDATE", None, ["v-all", "v-any-sub", "m-all"]),
        ("UPDATE", "status", ["v-status", "v-any-sub"]),
        ("UPDATE", "scale", ["v-any-sub"]),
        # Mutating handlers are not called for deletions, unless declared for DELETE alone.
        ("DELETE", None, ["v-all", "v-any-sub", "m-delete"]),
    ],
)
def test_handlers_selected_by_operation_subresource_and_filters(
    operation: str, subresource: str | None, expected: list[str]
) -> None:
    registry = registry_of_all()
    review = cause(operation=operation, subresource=subresource)
    selected = select_handlers(registry, resource=EXAMPLES, cause=review, webhook=None)
    assert ids(selected) == expected


def test_a_webhook_id_narrows_to_its_handler() -> None:
    registry = registry_of_all()
    review = cause()
    assert ids(select_handlers(registry, resource=EXAMPLES, cause=review, webhook="m-all")) == [
        "m-all"
    ]
    # Addressed, but its own criteria do not match: nothing runs (the review is allowed).
    assert select_handlers(registry, resource=EXAMPLES, cause=review, webhook="v-status") == []


def test_the_deprecated_operation_option_still_selects() -> None:
    registry = OperatorRegistry()
    with pytest.warns(DeprecationWarning, match="operation= is deprecated"):
        kopf.on.validate("kopfexamples", id="old", operation="UPDATE", registry=registry)(fn)
    for operation, expected in [("UPDATE", ["old"]), ("CREATE", [])]:
        review = cause(operation=operation)
        assert ids(select_handlers(registry, resource=EXAMPLES, cause=review, webhook=None)) == (
            expected
        )


# ------------------------------------------------------------------------------- JSON-patches


def patched(body: dict[str, Any], patch: Patch) -> Any:
    return apply_json_patch(body, mutation_patch(body, patch))


def test_an_empty_patch_gives_no_ops() -> None:
    assert mutation_patch(OBJ, Patch()) == []


def test_merge_patch_becomes_json_patch_ops() -> None:
    patch = Patch()
    patch.spec["numbers"] = [1, 2, 3]
    patch.spec["field"] = "new"
    patch.metadata.labels["app"] = None  # removal
    patch.metadata.annotations["example.com/added"] = "y"  # a "/" in a key is escaped
    patch.status["phase"] = "Pending"  # a new stanza
    ops = mutation_patch(OBJ, patch)
    assert {"op": "add", "path": "/spec/numbers", "value": [1, 2, 3]} in ops
    assert {"op": "replace", "path": "/spec/field", "value": "new"} in ops
    assert {"op": "remove", "path": "/metadata/labels/app"} in ops
    assert {"op": "add", "path": "/metadata/annotations/example.com~1added", "value": "y"} in ops
    assert {"op": "add", "path": "/status", "value": {"phase": "Pending"}} in ops
    assert all(op["op"] != "test" for op in ops)
    result = patched(OBJ, patch)
    assert result["spec"] == {"field": "new", "items": [1, 2], "numbers": [1, 2, 3]}
    assert result["metadata"]["labels"] == {}
    assert OBJ["metadata"]["labels"] == {"app": "demo"}  # the original is untouched


def test_no_op_changes_give_no_ops() -> None:
    patch = Patch({"spec": {"field": "value", "absent": None}})
    assert mutation_patch(OBJ, patch) == []


def test_lists_are_replaced_as_in_merge_patches_and_fns_apply_last() -> None:
    patch = Patch({"spec": {"items": [3]}})
    patch.fns.append(lambda body: body["spec"]["items"].append(4))
    assert patched(OBJ, patch)["spec"]["items"] == [3, 4]


# ---------------------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("errors", "expected"),
    [
        ([], (True, None, None)),
        ([None, None], (True, None, None)),
        ([kopf.AdmissionError("bad", code=499)], (False, "bad", 499)),
        ([kopf.AdmissionError("bad")], (False, "bad", 500)),
        ([kopf.AdmissionError("bad", code=None)], (False, "bad", 500)),
        ([kopf.PermanentError("perm")], (False, "perm", 500)),
        ([kopf.TemporaryError("temp", delay=1)], (False, "temp", 500)),
        ([ValueError("arbitrary")], (False, "arbitrary", 500)),
        ([ValueError()], (False, "ValueError()", 500)),
        # Most specific first: admission > permanent > temporary > arbitrary; first of equals.
        (
            [ValueError("v"), kopf.TemporaryError("t"), kopf.PermanentError("p")],
            (False, "p", 500),
        ),
        ([ValueError("v"), kopf.TemporaryError("t")], (False, "t", 500)),
        (
            [kopf.PermanentError("p"), kopf.AdmissionError("a1", 403), kopf.AdmissionError("a2")],
            (False, "a1", 403),
        ),
    ],
)
def test_errors_map_to_the_response_status(
    errors: list[BaseException | None], expected: tuple[bool, str | None, int | None]
) -> None:
    assert judge(errors) == expected


def test_admission_error_is_a_permanent_error() -> None:
    error = kopf.AdmissionError("msg", code=400)
    assert isinstance(error, kopf.PermanentError)
    assert (str(error), error.code) == ("msg", 400)
    assert kopf.AdmissionError().code == 500


# ----------------------------------------------------------------------- managed configurations


@pytest.mark.parametrize(
    ("handler_id", "expected"),
    [
        ("validate1", "validate1.auto.kopf.dev"),
        ("check_numbers", "check-numbers.auto.kopf.dev"),
        ("fn/spec.field", "fn.spec.field.auto.kopf.dev"),
        ("CheckNumbers", "checknumbers.auto.kopf.dev"),  # names must be lower-case
        ("_private", "private.auto.kopf.dev"),  # segments start alphanumerically
        ("a b", "a20b.auto.kopf.dev"),  # other characters: their UTF-8 hex
        ("über", "c3bcber.auto.kopf.dev"),
    ],
)
def test_webhook_names(handler_id: str, expected: str) -> None:
    assert webhook_name(handler_id, "auto.kopf.dev") == expected


def test_webhook_names_without_a_suffix() -> None:
    assert webhook_name("fn/x", "") == "fn.x"


def test_long_ids_are_shortened_uniquely_within_the_limits() -> None:
    long1 = "x" * 300
    long2 = "x" * 299 + "y"
    names = [webhook_name(long1, "auto.kopf.dev"), webhook_name(long2, "auto.kopf.dev")]
    assert names[0] != names[1]
    for name in names:
        assert len(name) <= 253
        assert name.endswith(".auto.kopf.dev")
        assert all(1 <= len(segment) <= 63 for segment in name.split("."))
    many = ".".join(["seg"] * 100)
    assert len(webhook_name(many, "auto.kopf.dev")) <= 253


def test_handler_ids_are_appended_to_client_configs() -> None:
    url = url_with_handler_id({"url": "https://h:1/hooks/", "caBundle": "Q0E="}, "fn/spec.x")
    assert url == {"url": "https://h:1/hooks/fn/spec.x", "caBundle": "Q0E="}
    assert url_with_handler_id({"url": "https://h"}, "id!")["url"] == "https://h/id%21"
    service_config: Any = {"service": {"namespace": "ns", "name": "svc", "port": 443}}
    service = url_with_handler_id(service_config, "fn")
    assert service == {"service": {"namespace": "ns", "name": "svc", "port": 443, "path": "/fn"}}
    assert "path" not in service_config["service"]  # the server's own config is not changed


def test_label_filters_become_object_selectors() -> None:
    assert labels_selector(None) is None
    assert labels_selector({"x": lambda value, **_: True}) is None  # callables: checked later
    assert labels_selector({"a": "1", "b": kopf.PRESENT, "c": kopf.ABSENT}) == {
        "matchExpressions": [
            {"key": "a", "operator": "In", "values": ["1"]},
            {"key": "b", "operator": "Exists"},
            {"key": "c", "operator": "DoesNotExist"},
        ]
    }


def test_webhooks_of_managed_configurations() -> None:
    registry = OperatorRegistry()
    kopf.on.validate("kopfexamples", id="plain", registry=registry)(fn)
    kopf.on.validate(
        "kopfexamples",
        id="tuned",
        operations=["UPDATE", "CREATE"],
        subresource="status",
        persistent=True,
        side_effects=True,
        ignore_failures=True,
        labels={"app": "demo"},
        registry=registry,
    )(fn)
    kopf.on.validate("kopfexamples", id="everything", subresource="*", registry=registry)(fn)
    kopf.on.validate("unserved", id="unserved", registry=registry)(fn)
    handlers = registry.get_handlers(WebhookHandler)
    config: Any = {"url": "https://127.0.0.1:9443", "caBundle": "Q0E="}
    webhooks = build_webhooks(
        handlers, resources={EXAMPLES, PODS}, name_suffix="auto.kopf.dev", client_config=config
    )
    assert webhooks[0] == {
        "name": "plain.auto.kopf.dev",
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "rules": [
            {
                "apiGroups": ["kopf.dev"],
                "apiVersions": ["v1"],
                "resources": ["kopfexamples"],
                "operations": ["*"],
                "scope": "*",
            }
        ],
        "clientConfig": {"url": "https://127.0.0.1:9443/plain", "caBundle": "Q0E="},
        "timeoutSeconds": 30,
        "admissionReviewVersions": ["v1", "v1beta1"],
    }
    tuned = webhooks[1]
    assert tuned["sideEffects"] == "NoneOnDryRun"
    assert tuned["failurePolicy"] == "Ignore"
    assert tuned["rules"][0]["resources"] == ["kopfexamples/status"]
    assert tuned["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert tuned["objectSelector"] == {
        "matchExpressions": [{"key": "app", "operator": "In", "values": ["demo"]}]
    }
    assert webhooks[2]["rules"][0]["resources"] == ["kopfexamples", "kopfexamples/*"]
    assert [w["name"] for w in webhooks] == [
        "plain.auto.kopf.dev",
        "tuned.auto.kopf.dev",
        "everything.auto.kopf.dev",
    ]  # a handler of an unserved resource gets no webhook

    persistent = build_webhooks(
        handlers,
        resources={EXAMPLES},
        name_suffix="auto.kopf.dev",
        client_config=config,
        persistent_only=True,
    )
    assert [w["name"] for w in persistent] == ["tuned.auto.kopf.dev"]


def test_beyond_kopf_namespace_selector_and_timeout() -> None:
    registry = OperatorRegistry()
    kopf.on.mutate("kopfexamples", id="m", registry=registry)(fn)
    selector = {"matchLabels": {"admission": "on"}}
    [webhook] = build_webhooks(
        registry.get_handlers(WebhookHandler),
        resources={EXAMPLES},
        name_suffix="x.kopf.dev",
        client_config={"service": {"namespace": "ops", "name": "operator"}},
        namespace_selector=selector,
        timeout_seconds=5,
    )
    assert webhook["namespaceSelector"] == selector
    assert webhook["timeoutSeconds"] == 5
    assert webhook["clientConfig"] == {"service": {"namespace": "ops", "name": "operator",
                                                   "path": "/m"}}  # fmt: skip


def test_case_colliding_ids_get_distinct_names() -> None:
    registry = OperatorRegistry()
    kopf.on.validate("kopfexamples", id="Check", registry=registry)(fn)
    kopf.on.validate("kopfexamples", id="check", registry=registry)(fn)
    webhooks = build_webhooks(
        registry.get_handlers(WebhookHandler),
        resources={EXAMPLES},
        name_suffix="x.kopf.dev",
        client_config={"url": "https://h"},
    )
    names = [w["name"] for w in webhooks]
    assert len(set(names)) == 2


def test_timeout_seconds_setting_is_checked() -> None:
    settings = kopf.OperatorSettings()
    assert settings.admission.timeout_seconds == 30
    settings.admission.timeout_seconds = 10
    for bad in [0, 31, 2.5, True]:
        with pytest.raises(ValueError, match="timeout_seconds"):
            settings.admission.timeout_seconds = bad  # type: ignore[assignment]


def test_headers_match_in_any_case() -> None:
    headers = CaseInsensitiveHeaders({"user-agent": "kube-apiserver", "Content-Type": "json"})
    assert headers["User-Agent"] == headers["user-agent"] == "kube-apiserver"
    assert headers.get("CONTENT-TYPE") == "json"
    assert "USER-AGENT" in headers
    assert 1 not in headers  # type: ignore[comparison-overlap]
    assert headers.get("missing") is None
    assert dict(headers) == {"user-agent": "kube-apiserver", "Content-Type": "json"}
    assert len(CaseInsensitiveHeaders(None)) == 0
