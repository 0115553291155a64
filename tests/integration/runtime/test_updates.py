"""Update handling: essential changes run update and field handlers; the rest is a no-op."""

from __future__ import annotations

import json
from typing import Any

import trio
import trioperator as kopf

DIFFBASE = "kopf.zalando.org/last-handled-configuration"


def handled(running: Any, spec: dict[str, Any]) -> bool:
    annotations = running.obj()["metadata"].get("annotations", {})
    return DIFFBASE in annotations and json.loads(annotations[DIFFBASE])["spec"] == spec


async def test_update_and_field_handlers_get_old_new_diff(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    updates: list[dict[str, Any]] = []
    fields: list[dict[str, Any]] = []

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        pass

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(old: Any, new: Any, diff: Any, **_: Any) -> None:
        updates.append({"old": old, "new": new, "diff": list(diff)})

    @kopf.on.field("kopfexamples", field="spec.field", id="field_fn", registry=registry)
    async def field_fn(old: Any, new: Any, diff: Any, **_: Any) -> None:
        fields.append({"old": old, "new": new, "diff": list(diff)})

    running = await run_operator()
    running.create()
    await running.wait_for(
        lambda: handled(running, {"field": "value", "items": ["item1", "item2"]})
    )
    # As in Kopf, a field handler is for any cause (creation too) where its field changes.
    assert updates == []
    assert fields == [{"old": None, "new": "value", "diff": [("add", (), None, "value")]}]
    fields.clear()

    # A change of another field: the update handler runs, the field handler does not.
    running.patch({"spec": {"items": ["item1"]}})
    await running.wait_for(lambda: handled(running, {"field": "value", "items": ["item1"]}))
    assert updates == [
        {
            "old": {
                "spec": {"field": "value", "items": ["item1", "item2"]},
                "metadata": {"labels": {"a": "b"}},
            },
            "new": {
                "spec": {"field": "value", "items": ["item1"]},
                "metadata": {"labels": {"a": "b"}},
            },
            "diff": [("change", ("spec", "items"), ["item1", "item2"], ["item1"])],
        }
    ]
    assert fields == []

    # A change of the field: both run; the field handler sees only its field.
    updates.clear()
    running.patch({"spec": {"field": "changed"}})
    await running.wait_for(lambda: handled(running, {"field": "changed", "items": ["item1"]}))
    assert [u["diff"] for u in updates] == [[("change", ("spec", "field"), "value", "changed")]]
    assert fields == [
        {"old": "value", "new": "changed", "diff": [("change", (), "value", "changed")]}
    ]

    # Removing the field is a change of the field too.
    fields.clear()
    running.patch({"spec": {"field": None}})
    await running.wait_for(lambda: handled(running, {"items": ["item1"]}))
    assert fields == [{"old": "changed", "new": None, "diff": [("remove", (), "changed", None)]}]
    logs.assert_in_order(
        "Updating is in progress:",
        "Updating diff:",
        "Updating is processed: 2 succeeded; 0 failed.",
    )


async def test_labels_are_essential_but_status_and_own_annotations_are_not(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry, logs: Any
) -> None:
    updates: list[Any] = []

    @kopf.on.update("kopfexamples", id="update_fn", registry=registry)
    async def update_fn(diff: Any, **_: Any) -> None:
        updates.append(list(diff))

    running = await run_operator()
    running.create()
    await running.wait_for(
        lambda: handled(running, {"field": "value", "items": ["item1", "item2"]})
    )
    writes = len(running.writes())

    # Status-only changes, our own annotations, other Kopf-managed annotations: no-ops.
    running.patch({"status": {"phase": "Running"}})
    running.patch({"metadata": {"annotations": {"kopf.zalando.org/touch-dummy": "x"}}})
    running.patch({"metadata": {"annotations": {"other.kopf.zalando.org/something": "y"}}})
    running.patch(
        {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
    )
    await trio.sleep(30)
    assert updates == []
    assert len(running.writes()) == writes  # nothing was patched in reaction
    assert (
        logs.count("Something has changed, but we are not interested (the essence is the same).")
        >= 1
    )

    # Labels and foreign annotations are essential.
    running.patch({"metadata": {"labels": {"a": "c"}}})
    await running.wait_for(lambda: len(updates) == 1)
    assert updates == [[("change", ("metadata", "labels", "a"), "b", "c")]]
    running.patch({"metadata": {"annotations": {"example.com/note": "hi"}}})
    await running.wait_for(lambda: len(updates) == 2)
    assert updates[1] == [("add", ("metadata", "annotations"), None, {"example.com/note": "hi"})]


async def test_field_handler_with_old_new_filters(
    autojump_clock: Any, run_operator: Any, registry: kopf.OperatorRegistry
) -> None:
    calls: list[tuple[Any, Any]] = []

    @kopf.on.field("kopfexamples", field="spec.field", new="go", id="field_fn", registry=registry)
    async def field_fn(old: Any, new: Any, **_: Any) -> None:
        calls.append((old, new))

    running = await run_operator()
    running.create()
    await running.wait_for(
        lambda: handled(running, {"field": "value", "items": ["item1", "item2"]})
    )
    running.patch({"spec": {"field": "stay"}})
    await running.wait_for(lambda: handled(running, {"field": "stay", "items": ["item1", "item2"]}))
    running.patch({"spec": {"field": "go"}})
    await running.wait_for(lambda: handled(running, {"field": "go", "items": ["item1", "item2"]}))
    assert calls == [("stay", "go")]
