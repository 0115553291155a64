"""What the API client for operator code sends and how it reads answers (no I/O)."""

from __future__ import annotations

import pytest
import trioperator as kopf
from trioperator._client.apiclient import calls
from trioperator._client.apiclient.conflicts import field_conflicts, with_field_conflicts
from trioperator._client.apiclient.settings import ClientSettings
from trioperator._client.apiclient.watching import WatchState
from trioperator._client.errors import error_from_response

CMS = kopf.Resource(group="", version="v1", plural="configmaps", kind="ConfigMap")
NODES = kopf.Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
DEPLOYMENTS = kopf.Resource(group="apps", version="v1", plural="deployments", kind="Deployment")


def test_the_namespace_comes_from_the_argument_or_the_body() -> None:
    body = {"metadata": {"name": "x", "namespace": "from-body"}}
    assert (
        calls.create_call(
            CMS, body, namespace=None, subresource=None, field_manager=None, dry_run=False
        ).path
        == "/api/v1/namespaces/from-body/configmaps"
    )
    assert (
        calls.create_call(
            CMS, body, namespace="given", subresource=None, field_manager=None, dry_run=False
        ).path
        == "/api/v1/namespaces/given/configmaps"
    )
    with pytest.raises(ValueError, match="namespaced"):
        calls.get_call(CMS, "x", namespace=None, subresource=None)
    with pytest.raises(ValueError, match="cluster-scoped"):
        calls.get_call(NODES, "n", namespace="ns", subresource=None)
    assert calls.get_call(NODES, "n", namespace=None, subresource=None).path == "/api/v1/nodes/n"


def test_listings_and_watches_carry_selectors_and_pages() -> None:
    listing = calls.list_call(
        DEPLOYMENTS,
        namespace=None,
        label_selector={"app": "web", "tier": "front"},
        field_selector="metadata.name!=x",
        limit=10,
        continue_="token",
    )
    assert listing.path == "/apis/apps/v1/deployments"
    assert listing.params == {
        "labelSelector": "app=web,tier=front",
        "fieldSelector": "metadata.name!=x",
        "limit": "10",
        "continue": "token",
    }
    assert listing.idempotent
    with pytest.raises(ValueError, match="positive"):
        calls.list_call(CMS, namespace="n", label_selector=None, field_selector=None, limit=0,
                        continue_=None)  # fmt: skip
    watch = calls.watch_call(
        CMS, namespace="n", label_selector=None, field_selector=None,
        resource_version="42", timeout_seconds=0.2,
    )  # fmt: skip
    assert watch.params == {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "1",
        "resourceVersion": "42",
    }


def test_apply_is_a_patch_of_the_whole_intent_and_safe_to_repeat() -> None:
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    call = calls.apply_call(
        DEPLOYMENTS, body, field_manager="me", force=True, namespace="n", subresource=None,
        dry_run=True,
    )  # fmt: skip
    assert (call.method, call.path) == ("PATCH", "/apis/apps/v1/namespaces/n/deployments/d")
    assert call.content_type == "application/apply-patch+yaml"
    assert call.params == {"fieldManager": "me", "dryRun": "All", "force": "true"}
    assert call.idempotent


def test_deletions_carry_their_options() -> None:
    call = calls.delete_call(
        CMS, "x", namespace="n", propagation_policy="Orphan", grace_period_seconds=0,
        uid="u", resource_version="7", dry_run=False,
    )  # fmt: skip
    assert call.content == (
        b'{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Orphan",'
        b'"gracePeriodSeconds":0,"preconditions":{"uid":"u","resourceVersion":"7"}}'
    )
    assert not call.idempotent


def test_bodies_that_cannot_be_json_are_refused() -> None:
    with pytest.raises(TypeError, match="JSON"):
        calls.create_call(
            CMS,
            {"metadata": {"namespace": "n"}, "data": object()},
            namespace=None,
            subresource=None,
            field_manager=None,
            dry_run=False,
        )


def test_what_is_retried() -> None:
    read = calls.get_call(CMS, "x", namespace="n", subresource=None)
    write = calls.create_call(CMS, {"metadata": {"namespace": "n"}}, namespace=None,
                              subresource=None, field_manager=None, dry_run=False)  # fmt: skip
    too_many = error_from_response(429, b"", {})
    unavailable = error_from_response(503, b"", {})
    assert calls.retriable(too_many, read)
    assert calls.retriable(too_many, write)
    assert calls.retriable(unavailable, read)
    assert not calls.retriable(unavailable, write)
    assert not calls.retriable(kopf.APIConnectionError("reset"), write)
    assert calls.retriable(kopf.APIConnectionError("reset"), read)
    assert not calls.retriable(kopf.APITimeoutError("slow"), read)
    assert not calls.retriable(error_from_response(404, b"", {}), read)


def test_delays_grow_and_are_bounded() -> None:
    settings = ClientSettings(backoff=0.5, max_backoff=3)
    assert [settings.delay(n, None) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert settings.delay(1, 2.5) == 2.5
    assert settings.delay(1, 3600) == 3  # the server's wish, bounded
    assert settings.delay(1, -1) == 0


def test_field_conflicts_are_parsed_from_the_causes() -> None:
    status = {
        "kind": "Status",
        "code": 409,
        "reason": "Conflict",
        "message": "Apply failed with 2 conflicts",
        "details": {"causes": [
            {"reason": "FieldManagerConflict", "message": 'conflict with "a \\"b\\"" using v1',
             "field": ".data.x"},
            {"reason": "FieldManagerConflict", "message": "something else", "field": ".data.y"},
            {"reason": "FieldValueInvalid", "message": "not a conflict", "field": ".data.z"},
        ]},
    }  # fmt: skip
    conflicts = field_conflicts(status)
    assert [(c.field, c.manager, c.version) for c in conflicts] == [
        (".data.x", 'a "b"', "v1"),
        (".data.y", "", ""),
    ]
    assert field_conflicts(None) == ()
    assert field_conflicts({"details": {"causes": "nonsense"}}) == ()

    plain = error_from_response(409, b'{"kind": "Status", "reason": "AlreadyExists"}', {})
    assert with_field_conflicts(plain) is plain
    assert with_field_conflicts(error_from_response(404, b"", {})).status == 404


def test_watch_lines_become_events_and_move_the_version() -> None:
    state = WatchState("1", bookmarks=False)
    added = state.interpret(b'{"type":"ADDED","object":{"metadata":{"resourceVersion":"5"}}}')
    assert added == ("ADDED", {"metadata": {"resourceVersion": "5"}})
    assert state.resource_version == "5"
    bookmark = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}'
    assert state.interpret(bookmark) is None
    assert state.resource_version == "9"
    with pytest.raises(kopf.APIGoneError):
        state.interpret(b'{"type":"ERROR","object":{"kind":"Status","code":410}}')
    with pytest.raises(kopf.APIProtocolError):
        state.interpret(b"not json")
    shown = WatchState(None, bookmarks=True)
    assert shown.interpret(bookmark) == ("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
