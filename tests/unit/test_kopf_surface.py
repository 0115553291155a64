"""Every public name of Kopf 1.45 exists in trioperator, or the allow-list says why not.

``KOPF_NAMES`` is data, generated once from the real package (kopf==1.45.2) with::

    sorted(set(kopf.__all__) | {n for n in dir(kopf) if not n.startswith("_")} - {modules})

(``harmonize_naming`` and ``adjust_namespace`` are importable from Kopf without being listed in
its ``__all__``; they are here too).
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import trioperator

KOPF_NAMES = [
    "ABSENT", "AdmissionError", "AiohttpSession", "Annotations", "AnnotationsDiffBaseStorage",
    "AnnotationsProgressStorage", "AsyncDaemonStopperChecker", "Body", "BodyEssence",
    "ConnectionInfo", "DaemonStopped", "DaemonStoppingReason", "Diff", "DiffBaseStorage",
    "DiffItem", "DiffOperation", "EVERYTHING", "ErrorsMode", "FieldPath", "FieldSpec", "HandlerId",
    "HandlerRetriesError", "HandlerTimeoutError", "Headers", "Index", "Labels", "LocalObjectLogger",
    "LogFormat", "Logger", "LoginError", "Memo", "Meta", "MultiDiffBaseStorage",
    "MultiProgressStorage", "ObjectLogger", "ObjectReference", "Operation", "OperatorRegistry",
    "OperatorSettings", "OwnerReference", "PRESENT", "Patch", "PatchFn", "PermanentError",
    "ProgressRecord", "ProgressStorage", "RawBody", "RawEvent", "RawEventType", "Reason",
    "Resource", "SSLPeer", "SmartProgressStorage", "Spec", "Status", "StatusDiffBaseStorage",
    "StatusProgressStorage", "Store", "SyncDaemonStopperChecker", "TemporaryError", "UserInfo",
    "WebhookAutoServer", "WebhookAutoTunnel", "WebhookClientConfig", "WebhookClientConfigService",
    "WebhookDockerDesktopServer", "WebhookFn", "WebhookK3dServer", "WebhookMinikubeServer",
    "WebhookNgrokTunnel", "WebhookServer", "WebhookServerProtocol", "adjust_namespace", "adopt",
    "all_", "any_", "append_owner_reference", "build_object_reference", "build_owner_reference",
    "configure", "daemon", "event", "exception", "execute", "get_default_lifecycle",
    "get_default_registry", "harmonize_naming", "index", "info", "label", "lifecycles",
    "login_via_async_client", "login_via_client", "login_via_pykube", "login_with_kubeconfig",
    "login_with_service_account", "none_", "not_", "on", "operator", "register",
    "remove_owner_reference", "run", "run_tasks", "set_default_lifecycle", "set_default_registry",
    "spawn_tasks", "subhandler", "timer", "warn",
]  # fmt: skip

MISSING_ON_PURPOSE: dict[str, str] = {}
"""Kopf names deliberately absent, each with its reason (none at the moment)."""

# Kopf lists its modules `on` and `lifecycles` in __all__ too.
PUBLIC_MODULES = {"on", "lifecycles"}


def test_kopf_names_are_data_of_kopf_1_45() -> None:
    assert sorted(set(KOPF_NAMES)) == KOPF_NAMES
    assert len(KOPF_NAMES) == 110  # 108 in kopf.__all__, plus harmonize_naming, adjust_namespace


def test_every_kopf_name_exists_or_has_a_reason() -> None:
    missing = [name for name in KOPF_NAMES if not hasattr(trioperator, name)]
    unexplained = [name for name in missing if not MISSING_ON_PURPOSE.get(name, "").strip()]
    assert unexplained == [], f"Kopf's names missing from trioperator without a reason: {missing}"


def test_allow_list_holds_only_names_that_are_still_missing() -> None:
    # A name that arrived must leave the allow-list, so the list never hides a regression.
    arrived = [name for name in MISSING_ON_PURPOSE if hasattr(trioperator, name)]
    assert arrived == []
    assert set(MISSING_ON_PURPOSE) <= set(KOPF_NAMES)


@pytest.mark.parametrize("name", [name for name in KOPF_NAMES if name not in MISSING_ON_PURPOSE])
def test_kopf_name_is_exported_in_all(name: str) -> None:
    assert name in trioperator.__all__


def test_all_lists_exactly_what_is_exported() -> None:
    assert trioperator.__all__ == sorted(set(trioperator.__all__))
    missing = [name for name in trioperator.__all__ if not hasattr(trioperator, name)]
    assert missing == []
    exported = {
        name
        for name, value in vars(trioperator).items()
        if not name.startswith("_")
        and (not isinstance(value, types.ModuleType) or name in PUBLIC_MODULES)
    }
    assert exported == set(trioperator.__all__) - {"__version__"}


def test_lifecycles_module_has_kopfs_lifecycles() -> None:
    from trioperator import lifecycles

    for name in ("asap", "all_at_once", "one_by_one", "randomized", "shuffled"):
        assert callable(getattr(lifecycles, name))
    assert lifecycles.get_default_lifecycle is trioperator.get_default_lifecycle
    assert lifecycles.set_default_lifecycle is trioperator.set_default_lifecycle


# Kopf 1.45's ConnectionInfo fields and defaults (all keyword-only), as data.
KOPF_CONNECTION_INFO_FIELDS = {
    "server": dataclasses.MISSING, "priority": 0, "default_namespace": None, "expiration": None,
    "ca_path": None, "ca_data": None, "insecure": None, "username": None, "password": None,
    "scheme": None, "token": None, "certificate_path": None, "certificate_data": None,
    "private_key_path": None, "private_key_data": None, "proxy_url": None, "trust_env": False,
}  # fmt: skip


def test_connection_info_has_kopfs_fields_and_defaults() -> None:
    fields = {field.name: field for field in dataclasses.fields(trioperator.ConnectionInfo)}
    for name, default in KOPF_CONNECTION_INFO_FIELDS.items():
        assert name in fields, name
        assert fields[name].default == default, name
        assert fields[name].kw_only, name
    for method in ("as_http_headers", "as_ssl_context", "as_aiohttp_basic_auth"):
        assert callable(getattr(trioperator.ConnectionInfo, method))
