"""``import trioperator as kopf`` must expose Kopf's public names."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest
import trioperator as kopf

KOPF_NAMES = [
    # Decorators and sub-handlers.
    "on", "daemon", "timer", "index", "subhandler", "register",
    # Bodies and patches.
    "Body", "Spec", "Meta", "Status", "Labels", "Annotations", "RawBody", "RawEvent", "Patch",
    # Errors.
    "PermanentError", "TemporaryError", "HandlerTimeoutError", "HandlerRetriesError",
    "ErrorsMode", "ActivityError", "AdmissionError",
    # Causes, settings, resources, filters, ids.
    "Reason", "OperatorSettings", "Resource", "EVERYTHING", "PRESENT", "ABSENT",
    "all_", "any_", "none_", "not_", "HandlerId", "FieldSpec", "FieldPath",
    # Registries.
    "OperatorRegistry", "get_default_registry", "set_default_registry",
    "__version__",
    # Diffs, memos, storages, lifecycles.
    "Diff", "DiffItem", "DiffOperation", "Memo", "ProgressRecord", "ProgressStorage",
    "AnnotationsProgressStorage", "StatusProgressStorage", "MultiProgressStorage",
    "SmartProgressStorage", "DiffBaseStorage", "AnnotationsDiffBaseStorage",
    "StatusDiffBaseStorage", "MultiDiffBaseStorage", "BodyEssence",
    "get_default_lifecycle", "set_default_lifecycle",
    # Running, credentials, events, daemons, indices.
    "execute", "run", "operator", "ConnectionInfo", "LoginError",
    "login_with_kubeconfig", "login_with_service_account",
    "event", "info", "warn", "exception",
    "DaemonStopped", "DaemonStoppingReason", "Index", "Store",
    # Admission.
    "AdmissionError", "WebhookClientConfig", "WebhookClientConfigService", "Operation",
    "UserInfo", "Headers", "SSLPeer", "WebhookFn", "WebhookServerProtocol",
]  # fmt: skip

ON_NAMES = [
    "startup", "cleanup", "login", "probe", "validate", "mutate", "resume", "create", "update",
    "delete", "field", "index", "event", "daemon", "timer", "subhandler", "register",
]  # fmt: skip


@pytest.mark.parametrize("name", KOPF_NAMES)
def test_kopf_names_are_exposed(name: str) -> None:
    assert hasattr(kopf, name)


@pytest.mark.parametrize("name", ON_NAMES)
def test_kopf_on_names_are_exposed(name: str) -> None:
    assert callable(getattr(kopf.on, name))


def test_all_is_sorted_and_complete() -> None:
    assert kopf.__all__ == sorted(kopf.__all__)
    assert len(set(kopf.__all__)) == len(kopf.__all__)
    for name in kopf.__all__:
        assert hasattr(kopf, name), name
    public = {
        name
        for name, value in vars(kopf).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(kopf.__all__)
    assert set(KOPF_NAMES) <= set(kopf.__all__)


OWN_ON_NAMES = ["reconcile"]
"""trioperator's own decorators beyond Kopf's (docs/reconcile.md)."""


def test_on_all_is_sorted_and_complete() -> None:
    assert kopf.on.__all__ == sorted(kopf.on.__all__)
    assert set(kopf.on.__all__) == set(ON_NAMES) | set(OWN_ON_NAMES)


def test_version_is_a_string() -> None:
    assert isinstance(kopf.__version__, str)
    assert kopf.__version__


def test_errors_are_kopfs_hierarchy() -> None:
    assert issubclass(kopf.HandlerTimeoutError, kopf.PermanentError)
    assert issubclass(kopf.HandlerRetriesError, kopf.PermanentError)
    assert kopf.TemporaryError("x", delay=5).delay == 5
    assert {m.name for m in kopf.ErrorsMode} == {"IGNORED", "TEMPORARY", "PERMANENT"}


@pytest.fixture
def registry() -> Iterator[kopf.OperatorRegistry]:
    original = kopf.get_default_registry()
    fresh = kopf.OperatorRegistry()
    kopf.set_default_registry(fresh)
    try:
        yield fresh
    finally:
        kopf.set_default_registry(original)


def test_a_kopf_style_operator_module_registers(registry: kopf.OperatorRegistry) -> None:
    """The shapes of Kopf's documentation examples, written against ``kopf``."""

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.execution.default_backoff = 30

    @kopf.on.resume("kopfexamples")
    @kopf.on.create("kopf.dev", "v1", "kopfexamples", labels={"somelabel": kopf.PRESENT})
    def create_fn(spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> dict[str, Any]:
        return {"message": spec.get("field")}

    @kopf.on.field("kopfexamples", field="spec.field", old=kopf.ABSENT, new=kopf.PRESENT)
    def field_added(old: Any, new: Any, **_: Any) -> None:
        pass

    @kopf.on.delete("kopfexamples", optional=True)
    def delete_fn(**_: Any) -> None:
        pass

    @kopf.on.event("pods", when=kopf.all_([lambda **_: True, kopf.not_(lambda **_: False)]))
    def pod_event(event: kopf.RawEvent, **_: Any) -> None:
        pass

    @kopf.index("pods", labels={"app": kopf.any_([lambda v, **_: v == "a"])})
    def by_app(body: kopf.Body, **_: Any) -> Any:
        return {body.get("metadata", {}).get("name"): None}

    @kopf.daemon(kopf.EVERYTHING, annotations={"monitor": "yes"}, cancellation_timeout=1.0)
    async def monitor(stopped: Any, **_: Any) -> None:
        pass

    @kopf.timer("kex", interval=10, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
    def tick(**_: Any) -> None:
        pass

    @kopf.on.validate("kopfexamples", operations=["CREATE"])
    def check(spec: kopf.Spec, **_: Any) -> None:
        if spec.get("bad"):
            raise kopf.PermanentError("bad")

    counts = repr(registry)
    assert "ActivityHandler=1" in counts
    assert "ChangingHandler=4" in counts
    assert "WatchingHandler=1" in counts
    assert "IndexingHandler=1" in counts
    assert "SpawningHandler=2" in counts
    assert "WebhookHandler=1" in counts
