"""The object store behind the fake Kubernetes API: pure logic, no I/O and no trio.

It keeps objects per resource, a global resourceVersion counter, a bounded history of changes
per resource (what the real API server's watch cache holds), and reproduces the parts of the
kube-apiserver's storage semantics that operators depend on: system metadata, generations,
preconditions, merge, strategic merge and JSON patches, server-side apply and managed fields,
status and scale subresources, finalizers and graceful deletion.
Error texts mirror kube-apiserver 1.20, as checked by ``tests/contract``.

Stored objects are never mutated in place: every write builds a new dict. That lets changes in
the history and listed objects share the stored dicts without copying them.
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import random
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import msgspec
import yaml

from trioperator._engine.patches import (
    JSONPatchError,
    apply_json_patch,
    apply_merge_patch,
    json_equal,
)
from trioperator.testing._fakestore.catalogue import (
    CUSTOM_VERBS,
    ResourceDef,
    builtin_resources,
)
from trioperator.testing._fakestore.errors import (
    StatusError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    name_mismatch,
    namespace_mismatch,
    not_found,
    resource_details,
    resource_not_found,
)
from trioperator.testing._fakestore.fieldsets import Shapes
from trioperator.testing._fakestore.managedfields import (
    Managers,
    adopt_existing,
    apply_config,
    decode_managers,
    encode_managers,
    record_update,
)
from trioperator.testing._fakestore.scale import (
    SCALE_API_VERSION,
    replicas_of,
    scale_not_found,
    scale_of,
)
from trioperator.testing._fakestore.selectors import FieldSelector, LabelSelector
from trioperator.testing._fakestore.strategic import strategic_merge
from trioperator.testing._fakestore.values import (
    DECODE,
    ENCODE,
    ChangeType,
    Obj,
    ResourceKey,
    clone,
)

# --------------------------------------------------------------------------------------- history


@dataclasses.dataclass(frozen=True)
class Change:
    """One committed write, as a watch would see it before selector filtering."""

    type: ChangeType
    resource: ResourceDef
    rv: int
    obj: Obj
    """The new state; for DELETED the last stored state, stamped with the deletion's rv."""
    old: Obj | None
    """The previous state (for MODIFIED), to tell selector transitions."""


class _History:
    """The changes of one resource newer than ``floor``, the oldest rv a watch can start at."""

    def __init__(self, floor: int, limit: int) -> None:
        self.floor = floor
        self.changes: collections.deque[Change] = collections.deque(maxlen=limit)

    def append(self, change: Change) -> None:
        if self.changes.maxlen is not None and len(self.changes) == self.changes.maxlen:
            self.floor = self.changes[0].rv
        self.changes.append(change)

    def compact(self, rv: int) -> None:
        self.floor = rv
        self.changes.clear()


def watch_event(
    change: Change,
    *,
    namespace: str | None,
    labels: LabelSelector,
    fields: FieldSelector,
) -> tuple[str, Obj] | None:
    """How one change appears on a filtered watch, or ``None`` if it is invisible there.

    Like the real watch cache: an object that starts matching is ADDED, one that stops matching
    is DELETED (carrying its previous state with the new resourceVersion).
    """

    def visible(obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        return labels.matches(meta.get("labels")) and fields.matches(obj)

    now = visible(change.obj)
    if change.type != "MODIFIED":
        return (change.type, change.obj) if now else None
    before = visible(change.old)
    if now and before:
        return ("MODIFIED", change.obj)
    if now:
        return ("ADDED", change.obj)
    if before:
        assert change.old is not None
        return ("DELETED", _with_rv(change.old, change.rv))
    return None


def _with_rv(obj: Obj, rv: int) -> Obj:
    return {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": str(rv)}}


# ----------------------------------------------------------------------------------------- names

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_RE_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RE_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL_TEXT = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and"
    " must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used"
    " for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS_SUBDOMAIN_TEXT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or"
    " '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used"
    " for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _name_problem(res: ResourceDef, name: str) -> str | None:
    if res.key == ("", "namespaces"):
        return _DNS_LABEL_TEXT if len(name) > 63 or not _RE_DNS_LABEL.fullmatch(name) else None
    if res.plural == "events":
        # Events are laxer in the real server (e.g. ':' is allowed in their names).
        return None if re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.:]*", name) else _DNS_SUBDOMAIN_TEXT
    if len(name) > 253 or not _RE_DNS_SUBDOMAIN.fullmatch(name):
        return _DNS_SUBDOMAIN_TEXT
    return None


# ----------------------------------------------------------------------------------------- store


def encode_continue(rv: int, start: str) -> str:
    token = ENCODE.encode({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = DECODE.decode(raw)
        rv, start = data["rv"], data["start"]
        if (
            data.get("v") != "meta.k8s.io/v1"
            or not isinstance(rv, int)
            or not isinstance(start, str)
        ):
            raise ValueError("unexpected contents")
    except (binascii.Error, ValueError, msgspec.DecodeError, KeyError, TypeError) as exc:
        raise bad_request(f"invalid continue token: continue key is not valid: {exc}") from None
    return rv, start.removesuffix("\x00")


Listener = Callable[[Change], None]

APPLY_PATCH = "application/apply-patch+yaml"
DEFAULT_MANAGER = "unknown"
"""The field manager of writes that name none and come without a User-Agent."""

_BUILTIN_SHAPES = Shapes(custom=False)
_CUSTOM_SHAPES = Shapes(custom=True)

# What a new, empty object of a built-in kind holds before a create's fields are compared
# with it: its struct fields that are not pointers exist (empty) from the start.
_ZERO: dict[ResourceKey, Obj] = {
    ("apps", "deployments"): {
        "metadata": {},
        "spec": {"template": {"metadata": {}, "spec": {}}, "strategy": {}},
        "status": {},
    },
    ("", "pods"): {"metadata": {}, "spec": {}, "status": {}},
    ("", "namespaces"): {"metadata": {}, "spec": {}, "status": {}},
}


def _zero(res: ResourceDef) -> Obj:
    return _ZERO.get(res.key) or {"metadata": {}}


def _manager_required() -> StatusError:
    return _patch_option_invalid("fieldManager", "is required for apply patch", required=True)


def _patch_option_invalid(field: str, detail: str, *, required: bool = False) -> StatusError:
    message = f"{'Required value' if required else 'Forbidden'}: {detail}"
    return StatusError(
        422,
        "Invalid",
        f'PatchOptions.meta.k8s.io "" is invalid: {field}: {message}',
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired" if required else "FieldValueForbidden",
                    "message": message,
                    "field": field,
                }
            ],
        },
    )


def _patched(current: Obj, content_type: str, data: bytes) -> Any:
    """``current`` (a private copy) with a JSON, merge or strategic merge patch applied."""
    if content_type == "application/json-patch+json":
        try:
            operations = DECODE.decode(data)
        except msgspec.DecodeError as exc:
            raise bad_request(str(exc)) from None
        if not isinstance(operations, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            return apply_json_patch(current, operations)
        except JSONPatchError:
            raise StatusError(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
                {},
            ) from None
    try:
        patch = DECODE.decode(data)
    except msgspec.DecodeError:
        raise StatusError(500, "", "Invalid JSON Patch") from None
    if content_type == "application/strategic-merge-patch+json":
        return strategic_merge(current, patch)
    return apply_merge_patch(current, patch)


def _decode_config(data: bytes) -> Obj:
    """An apply configuration (an object): JSON, or YAML, which JSON is a subset of."""
    try:
        config = DECODE.decode(data)
    except msgspec.DecodeError:
        try:
            config = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            raise bad_request(f"error decoding YAML: {exc}") from None
    if not isinstance(config, dict):
        raise bad_request(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot"
            f" unmarshal {_json_kind(config)} into Go value of type map[string]interface {{}}"
        )
    return config


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null"


class Store:
    """All objects of the fake cluster, with the write semantics of kube-apiserver."""

    def __init__(
        self,
        *,
        now: Callable[[], str],
        history_limit: int = 1000,
        namespaces: Iterable[str] = ("default", "kube-system", "kube-public", "kube-node-lease"),
        track_managed_fields: bool = False,
    ) -> None:
        self.rv = 0
        self.now = now
        self.track_managed_fields = track_managed_fields
        """Record managedFields on every write, as the real server does; by default only on
        writes that name a field manager, applies, and objects that already have them."""
        self.history_limit = history_limit
        self.compacted_rv = 0
        self.resources: dict[ResourceKey, ResourceDef] = {}
        self.listeners: list[Listener] = []
        self.removal_listeners: list[Callable[[ResourceDef], None]] = []
        self._objects: dict[ResourceKey, dict[tuple[str, str], Obj]] = {}
        self._history: dict[ResourceKey, _History] = {}
        for res in builtin_resources():
            self.register(res)
        for name in namespaces:
            self.create(self.resources[("", "namespaces")], None, {"metadata": {"name": name}})

    # ------------------------------------------------------------------ resources

    def register(self, res: ResourceDef) -> None:
        """Start serving a resource; a new one gets a watch window starting now."""
        self.resources[res.key] = res
        self._objects.setdefault(res.key, {})
        if res.key not in self._history:
            self._history[res.key] = _History(self.rv, self.history_limit)

    def unregister(self, key: ResourceKey) -> None:
        res = self.resources.pop(key, None)
        self._objects.pop(key, None)
        self._history.pop(key, None)
        if res is not None:
            for listener in list(self.removal_listeners):
                listener(res)

    def find(self, group: str, version: str, plural: str) -> ResourceDef | None:
        res = self.resources.get((group, plural))
        return res if res is not None and version in res.versions else None

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group, preferred first, in registration order."""
        groups: dict[str, list[str]] = {}
        for res in self.resources.values():
            versions = groups.setdefault(res.group, [])
            for version in res.versions:
                if version not in versions:
                    versions.append(version)
        return groups

    def resolve(self, name: str) -> ResourceDef:
        """A resource by ``plural`` (the core group wins) or ``plural.group``."""
        if "." not in name:
            if ("", name) in self.resources:
                return self.resources[("", name)]
            for res in self.resources.values():
                if res.plural == name:
                    return res
        else:
            plural, group = name.split(".", 1)
            if (group, plural) in self.resources:
                return self.resources[(group, plural)]
        raise KeyError(f"unknown resource: {name!r}")

    # ------------------------------------------------------------------ reading

    def get(self, res: ResourceDef, namespace: str | None, name: str) -> Obj:
        obj = self._objects[res.key].get((namespace or "", name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def peek(self, res: ResourceDef, namespace: str | None, name: str) -> Obj | None:
        return self._objects[res.key].get((namespace or "", name))

    def iter_objects(self, res: ResourceDef, namespace: str | None = None) -> Iterator[Obj]:
        """Objects in the order of their etcd keys (``namespace/name``)."""
        items = self._objects.get(res.key, {})
        for key in sorted(items, key=lambda k: f"{k[0]}/{k[1]}"):
            if namespace is None or key[0] == namespace:
                yield items[key]

    def list_objects(
        self,
        res: ResourceDef,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> tuple[list[Obj], Obj]:
        """The items and the list ``metadata`` (resourceVersion, continue, remainingItemCount)."""
        labels = LabelSelector.parse(label_selector)
        fields = FieldSelector.parse(field_selector, res)
        rv = self.rv
        start = ""
        if continue_token:
            if resource_version:
                raise bad_request("specifying resource version is not allowed when using continue")
            rv, start = decode_continue(continue_token)
            if rv < self.compacted_rv:
                raise expired(
                    "The provided continue parameter is too old to display a consistent list"
                    " result. You can start a new list without the continue parameter, or use the"
                    " continue token in this response to retrieve the remainder of the results."
                    " Continuing with the provided token results in an inconsistent list - objects"
                    " that were created, modified, or deleted between the time the first chunk was"
                    " returned and now may show up in the list."
                )
        elif resource_version == "0":
            limit = None  # served from the watch cache, which ignores paging
        wide = res.namespaced and namespace is None

        def sort_key(obj: Obj) -> str:
            meta = obj["metadata"]
            return f"{meta.get('namespace', '')}/{meta['name']}" if wide else str(meta["name"])

        selected = [
            obj
            for obj in self.iter_objects(res, namespace)
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)
        ]
        if start:
            selected = [obj for obj in selected if sort_key(obj) > start]
        metadata: Obj = {"resourceVersion": str(rv)}
        if limit and len(selected) > limit:
            remaining = len(selected) - limit
            selected = selected[:limit]
            metadata["continue"] = encode_continue(rv, sort_key(selected[-1]))
            if not labels.requirements and not fields.requirements:
                metadata["remainingItemCount"] = remaining
        elif res.custom:
            metadata["continue"] = ""
        return selected, metadata

    def changes_since(self, res: ResourceDef, rv: int) -> list[Change]:
        history = self._history[res.key]
        if rv < history.floor:
            raise expired(f"too old resource version: {rv} ({history.floor})")
        return [change for change in history.changes if change.rv > rv]

    def compact(self) -> None:
        """Forget all history: watches and continue tokens from before now get 410."""
        self.compacted_rv = self.rv
        for history in self._history.values():
            history.compact(self.rv)

    # ------------------------------------------------------------------ writing: helpers

    def _commit(self, change_type: ChangeType, res: ResourceDef, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        key = (meta.get("namespace", ""), meta["name"])
        if change_type == "DELETED":
            self._objects[res.key].pop(key, None)
        else:
            self._objects[res.key][key] = obj
        change = Change(change_type, res, self.rv, obj, old)
        self._history[res.key].append(change)
        for listener in list(self.listeners):
            listener(change)
        return obj

    def _remove(self, res: ResourceDef, obj: Obj) -> Obj:
        """Drop an object for good; the DELETED event carries its last stored state."""
        gone = self._commit("DELETED", res, clone(obj), obj)
        namespace = gone["metadata"].get("namespace")
        if namespace:
            self._finish_namespace(namespace)
        if res.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._drop_crd_resource(obj)
        return gone

    def _normalize_kind(self, res: ResourceDef, body: Obj, name: str | None) -> None:
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        served = [res.api_version(v) for v in res.versions]
        if res.custom and (not kind or not api_version):
            missing = "Kind" if not kind else "APIVersion"
            raw = ENCODE.encode(body).decode()
            raise bad_request(
                f'{res.kind} in version "{res.storage_version}" cannot be handled as a {res.kind}:'
                f" unmarshalerDecoder: Object '{missing}' is missing in '{raw}'"
            )
        if api_version and api_version not in served:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API"
                f" version ({res.api_version()})"
            )
        if kind and kind != res.kind:
            if res.custom:
                raise invalid(
                    res,
                    name or "",
                    [("FieldValueInvalid", "kind", f'Invalid value: "{kind}": must be {res.kind}')],
                    kind=str(kind),
                )
            raise bad_request(
                f'{kind} in version "{res.storage_version}" cannot be handled as a {res.kind}:'
                f" converting ({res.storage_version}.{kind}) to ({res.group or 'core'}.{res.kind}):"
                " unknown conversion"
            )
        body["apiVersion"] = res.api_version()
        body["kind"] = res.kind

    @staticmethod
    def _ordered(body: Obj) -> Obj:
        """apiVersion, kind, metadata first: easier to read in test failures."""
        head: Obj = {k: body[k] for k in ("apiVersion", "kind", "metadata") if k in body}
        head.update((k, v) for k, v in body.items() if k not in head)
        return head

    def _check_namespace(self, res: ResourceDef, namespace: str, name: str) -> None:
        ns = self._objects[("", "namespaces")].get(("", namespace))
        if ns is None:
            raise not_found(self.resources[("", "namespaces")], namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise StatusError(
                403,
                "Forbidden",
                f'{res.qualified} "{name}" is forbidden: unable to create new content in namespace'
                f" {namespace} because it is being terminated",
                {
                    **resource_details(res, name),
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    # ------------------------------------------------------------------ writing: create

    def create(
        self,
        res: ResourceDef,
        namespace: str | None,
        body: Any,
        *,
        keep_status: bool = False,
        manager: str | None = None,
        default_manager: str = DEFAULT_MANAGER,
        managed_fields: list[Obj] | None = None,
        version: str | None = None,
    ) -> Obj:
        """Create as a POST would; ``keep_status`` also stores the given status (test access).

        ``manager`` is the request's ``fieldManager``; ``managed_fields`` are set as they are
        (an apply that creates). ``version`` is the request's API version, which managed
        fields record (the storage version by default).
        """
        if not isinstance(body, dict):
            raise bad_request(f"the object provided is unrecognized (must be of type {res.kind})")
        body = clone(body)
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        self._normalize_kind(res, body, meta.get("name"))
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise namespace_mismatch()
            if not namespace:
                raise resource_not_found()
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)

        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = self._generate_name(res, namespace, str(meta["generateName"]))
        if not name:
            raise invalid(
                res,
                "",
                [
                    (
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )
                ],
            )
        name = str(name)
        if problem := _name_problem(res, name):
            raise invalid(
                res,
                name,
                [("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {problem}')],
            )
        meta["name"] = name
        if res.namespaced:
            assert namespace is not None
            self._check_namespace(res, namespace, name)
        if self.peek(res, namespace, name) is not None:
            raise already_exists(res, name)

        for field in (
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
            "resourceVersion",
        ):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        if res.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        status = body.pop("status", None)
        if not (res.status_subresource and res.custom) and status is not None:
            body["status"] = status  # otherwise, the status subresource owns it
        self._prepare_create(res, body)
        if keep_status and status is not None:
            body["status"] = status
        if managed_fields is None and (manager is not None or self.track_managed_fields):
            managers: Managers = {}
            record_update(
                managers,
                _zero(res),
                body,
                manager=manager or default_manager,
                api_version=res.api_version(version),
                shapes=self.shapes(res),
                now=self.now,
            )
            managed_fields = encode_managers(managers, custom=res.custom)
        if managed_fields:
            meta["managedFields"] = managed_fields
        created = self._commit("ADDED", res, self._ordered(body), None)
        if res.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._register_crd(created)
        return created

    def _generate_name(self, res: ResourceDef, namespace: str | None, prefix: str) -> str:
        prefix = prefix[:58]
        while True:
            suffix = "".join(random.choices(_GENERATE_ALPHABET, k=5))
            if self.peek(res, namespace, prefix + suffix) is None:
                return prefix + suffix

    def _prepare_create(self, res: ResourceDef, body: Obj) -> None:
        """Per-kind defaults the real strategies and controllers fill in."""
        if res.key == ("", "namespaces"):
            body.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            body["status"] = {"phase": "Active"}
        elif res.key == ("", "pods"):
            body["status"] = {"phase": "Pending"}
        elif res.key == ("apps", "deployments"):
            body["status"] = {}  # no controller fills it in
        elif res.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._prepare_crd(res, body, None)

    # ------------------------------------------------------------------ writing: updates

    def replace(
        self,
        res: ResourceDef,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        manager: str | None = None,
        default_manager: str = DEFAULT_MANAGER,
        version: str | None = None,
    ) -> Obj:
        """Replace as a PUT would; ``subresource="*"`` replaces status too (test access)."""
        if not isinstance(body, dict):
            raise bad_request(f"the object provided is unrecognized (must be of type {res.kind})")
        body = clone(body)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        if meta.get("name", name) != name:
            raise name_mismatch(meta.get("name"), name)
        if res.namespaced and meta.get("namespace", namespace) != namespace:
            raise namespace_mismatch()
        self._normalize_kind(res, body, name)
        old = self.get(res, namespace, name)
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise conflict(res, name)
        if not rv and res.custom:
            raise invalid(
                res,
                name,
                [
                    (
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
                by_resource=True,
            )
        managed = self._track_update(res, old, body, manager, default_manager, version)
        return self._update(res, old, body, subresource=subresource, managed=managed)

    def patch(
        self,
        res: ResourceDef,
        namespace: str | None,
        name: str,
        content_type: str,
        data: bytes,
        *,
        subresource: str | None = None,
        manager: str | None = None,
        default_manager: str = DEFAULT_MANAGER,
        force: bool = False,
        version: str | None = None,
    ) -> Obj:
        """Patch as a PATCH would; server-side apply (``application/apply-patch+yaml``) too."""
        content_type = content_type.split(";")[0].strip().lower()
        if content_type == APPLY_PATCH:
            return self.apply(
                res,
                namespace,
                name,
                data,
                manager=manager,
                force=force,
                subresource=subresource,
                version=version,
            )
        if force:
            raise _patch_option_invalid("force", "may not be specified for non-apply patch")
        supported = ["application/json-patch+json", "application/merge-patch+json"]
        if not res.custom:
            supported.append("application/strategic-merge-patch+json")
        if content_type not in supported:
            if res.custom:
                raise StatusError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types"
                    " include: application/json-patch+json, application/merge-patch+json,"
                    " application/apply-patch+yaml",
                )
            raise StatusError(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
        old = self.get(res, namespace, name)
        patched = _patched(clone(old), content_type, data)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise bad_request("the patched object is not a Kubernetes object")
        meta = patched["metadata"]
        if meta.get("name") != name:
            raise name_mismatch(meta.get("name"), name)
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise conflict(res, name)
        managed = self._track_update(res, old, patched, manager, default_manager, version)
        return self._update(res, old, patched, subresource=subresource, managed=managed)

    # ------------------------------------------------------------------ server-side apply

    def shapes(self, res: ResourceDef) -> Shapes:
        """How server-side apply merges and owns the fields of a resource's objects."""
        return _CUSTOM_SHAPES if res.custom else _BUILTIN_SHAPES

    def apply(
        self,
        res: ResourceDef,
        namespace: str | None,
        name: str,
        data: bytes | Obj,
        *,
        manager: str | None,
        force: bool = False,
        subresource: str | None = None,
        version: str | None = None,
    ) -> Obj:
        """Server-side apply of a configuration (JSON or YAML) as ``manager``; creates if absent."""
        if not manager:
            raise _manager_required()
        config = _decode_config(data) if isinstance(data, bytes) else clone(data)
        meta = config.get("metadata")
        if meta is None:
            meta = config["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if meta.get("managedFields") is not None:
            raise bad_request("metadata.managedFields must be nil")
        if meta.get("name", name) != name:
            raise name_mismatch(meta.get("name"), name)
        if res.namespaced and meta.get("namespace", namespace) != namespace:
            raise namespace_mismatch()
        # An applied configuration must say what it is: nothing is inferred from the URL.
        api_version = config.get("apiVersion") or ""
        if api_version != res.api_version(version):
            raise bad_request(
                "Incorrect version specified in apply patch. Specified patch version:"
                f" {api_version}, expected: {res.api_version(version)}"
            )
        if not config.get("kind"):
            group_version = api_version if "/" in api_version else f"/{api_version}"
            raise StatusError(
                500,
                "",
                "failed to create typed patch object: no corresponding type for"
                f" {group_version}, Kind=",
            )
        self._normalize_kind(res, config, name)
        shapes = self.shapes(res)
        managers: Managers = {}
        old = self.peek(res, namespace, name)
        if old is None and subresource is not None:
            raise not_found(res, name)
        if old is not None:
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"].get("resourceVersion"):
                raise conflict(res, name)
            managers = decode_managers(old)
            if not managers:
                adopt_existing(
                    managers,
                    old,
                    _zero(res),
                    api_version=res.api_version(version),
                    shapes=shapes,
                    now=self.now,
                )
        merged = apply_config(
            managers,
            old if old is not None else {},
            config,
            manager=manager,
            api_version=res.api_version(version),
            force=force,
            shapes=shapes,
            now=self.now,
        )
        managed = encode_managers(managers, custom=res.custom)
        if old is None:
            merged["metadata"]["name"] = name
            return self.create(res, namespace, merged, managed_fields=managed, version=version)
        return self._update(res, old, merged, subresource=subresource, managed=managed)

    # ------------------------------------------------------------------ the scale subresource

    def get_scale(self, res: ResourceDef, namespace: str | None, name: str) -> Obj:
        obj = self.peek(res, namespace, name)
        if obj is None:
            raise scale_not_found(res, name)
        return scale_of(obj)

    def replace_scale(self, res: ResourceDef, namespace: str | None, name: str, body: Any) -> Obj:
        self.get_scale(res, namespace, name)
        return self._write_scale(res, namespace, name, body)

    def patch_scale(
        self,
        res: ResourceDef,
        namespace: str | None,
        name: str,
        content_type: str,
        data: bytes,
        *,
        manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        """Patch or apply to the Scale; 1.20 keeps no managed fields for it, so an apply
        conflicts with ``before-first-apply`` over any value it changes, unless forced."""
        current = self.get_scale(res, namespace, name)
        content_type = content_type.split(";")[0].strip().lower()
        if content_type == APPLY_PATCH:
            if not manager:
                raise _manager_required()
            config = _decode_config(data)
            api_version = config.get("apiVersion")
            if api_version != SCALE_API_VERSION:
                raise bad_request(
                    "Incorrect version specified in apply patch. Specified patch version:"
                    f" {api_version or ''}, expected: {SCALE_API_VERSION}"
                )
            managers: Managers = {}
            adopt_existing(
                managers,
                current,
                {"metadata": {}, "spec": {}, "status": {}},
                api_version=SCALE_API_VERSION,
                shapes=_BUILTIN_SHAPES,
                now=self.now,
            )
            scale = apply_config(
                managers,
                current,
                config,
                manager=manager,
                api_version=SCALE_API_VERSION,
                force=force,
                shapes=_BUILTIN_SHAPES,
                now=self.now,
            )
        elif content_type in (
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            scale = _patched(current, content_type, data)
        else:
            raise StatusError(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
        return self._write_scale(res, namespace, name, scale)

    def _write_scale(self, res: ResourceDef, namespace: str | None, name: str, scale: Any) -> Obj:
        replicas = replicas_of(res, scale, name)
        old = self.get(res, namespace, name)
        rv = scale["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise conflict(res, name)
        new = clone(old)
        new.setdefault("spec", {})["replicas"] = replicas
        # Writes through the Scale leave the object's managed fields as they are (as in 1.20).
        managed = old["metadata"].get("managedFields")
        return scale_of(self._update(res, old, new, subresource=None, managed=managed))

    def _track_update(
        self,
        res: ResourceDef,
        old: Obj,
        new: Obj,
        manager: str | None,
        default_manager: str,
        version: str | None = None,
    ) -> list[Obj] | None:
        """The managedFields after an update, or ``None`` when the object is not tracked.

        Objects are tracked once a write names a manager (or always, with
        ``track_managed_fields``); untracked ones cost nothing here.
        """
        old_entries = old["metadata"].get("managedFields")
        if manager is None and not old_entries and not self.track_managed_fields:
            return None
        meta = new.get("metadata")
        given = meta.get("managedFields") if isinstance(meta, dict) else None
        # Like the apiserver: managedFields sent with the update replace the recorded ones
        # (``[{}]`` clears them); absent or empty, the recorded ones stay.
        if given == [{}]:
            managers: Managers = {}
        else:
            managers = (decode_managers(new) if given else {}) or decode_managers(old)
        record_update(
            managers,
            old,
            new,
            manager=manager or default_manager,
            api_version=res.api_version(version),
            shapes=self.shapes(res),
            now=self.now,
        )
        return encode_managers(managers, custom=res.custom)

    def _update(
        self,
        res: ResourceDef,
        old: Obj,
        new: Obj,
        *,
        subresource: str | None,
        managed: list[Obj] | None = None,
    ) -> Obj:
        """Apply the update rules of the real registry to ``new`` (a private copy) and commit.

        ``managed`` are the object's new managedFields (``None``: it has none).
        """
        if subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif res.status_subresource and subresource != "*":
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)

        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        new["apiVersion"] = res.api_version()
        new["kind"] = res.kind
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise invalid(
                res,
                old_meta["name"],
                [
                    (
                        "FieldValueInvalid",
                        "metadata.uid",
                        f'Invalid value: "{meta["uid"]}": field is immutable',
                    )
                ],
            )
        meta["name"] = old_meta["name"]
        if "namespace" in old_meta:
            meta["namespace"] = old_meta["namespace"]
        else:
            meta.pop("namespace", None)
        for field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta.pop("managedFields", None)
        if managed:
            meta["managedFields"] = managed
        meta.pop("selfLink", None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)

        deleting = bool(old_meta.get("deletionTimestamp"))
        if deleting:
            added = [
                f for f in meta.get("finalizers", []) if f not in old_meta.get("finalizers", [])
            ]
            if added:
                found = "[]string{" + ", ".join(f'"{f}"' for f in added) + "}"
                message = (
                    "Forbidden: no new finalizers can be added if the object is being deleted,"
                    f" found new finalizers {found}"
                )
                raise invalid(
                    res, meta["name"], [("FieldValueForbidden", "metadata.finalizers", message)]
                )

        if res.key == ("apiextensions.k8s.io", "customresourcedefinitions") and subresource is None:
            self._prepare_crd(res, new, old)
        if res.tracks_generation and self._spec_changed(res, old, new):
            meta["generation"] = int(old_meta.get("generation", 0)) + 1

        new = self._ordered(new)
        if json_equal(new, old):
            return old  # a no-op write stores nothing and emits no event
        if deleting and not meta.get("finalizers") and self._may_vanish(res, new):
            # The last finalizer is gone: the registry deletes the stored object instead of
            # writing the update. The caller gets the update as it would have been stored.
            self._remove(res, old)
            return new
        committed = self._commit("MODIFIED", res, new, old)
        if res.key == ("apiextensions.k8s.io", "customresourcedefinitions") and not deleting:
            self._register_crd(committed)
        return committed

    @staticmethod
    def _spec_changed(res: ResourceDef, old: Obj, new: Obj) -> bool:
        ignored = {"metadata", "status"} if res.status_subresource else {"metadata"}
        return not json_equal(
            {k: v for k, v in old.items() if k not in ignored},
            {k: v for k, v in new.items() if k not in ignored},
        )

    def _may_vanish(self, res: ResourceDef, obj: Obj) -> bool:
        if res.key == ("", "namespaces"):
            return self._namespace_empty(obj["metadata"]["name"])
        return True

    # ------------------------------------------------------------------ writing: deletion

    def delete(
        self,
        res: ResourceDef,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> Obj:
        """Delete or mark for deletion; returns what the real DELETE responds with."""
        obj = self.get(res, namespace, name)
        meta = obj["metadata"]
        preconditions = (options or {}).get("preconditions") or {}
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(field)
            if wanted and wanted != meta.get(field):
                raise StatusError(
                    409,
                    "Conflict",
                    f"Precondition failed: {label} in precondition: {wanted},"
                    f" {label} in object meta: {meta.get(field)}",
                    resource_details(res, name),
                )
        if res.key == ("", "namespaces"):
            return self._delete_namespace(obj)
        if res.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            return self._delete_crd(res, obj)
        if meta.get("deletionTimestamp"):
            return obj
        if meta.get("finalizers"):
            return self._mark_deleting(res, obj)
        self._remove(res, obj)
        return self._deleted_reply(res, obj)

    def _deleted_reply(self, res: ResourceDef, obj: Obj) -> Obj:
        if res.returns_deleted_object:
            return obj
        details = resource_details(res, obj["metadata"]["name"])
        details["uid"] = obj["metadata"]["uid"]
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _mark_deleting(self, res: ResourceDef, obj: Obj, *, grace: bool = True) -> Obj:
        new = clone(obj)
        meta = new["metadata"]
        meta["deletionTimestamp"] = self.now()
        if grace:
            meta["deletionGracePeriodSeconds"] = 0
        if res.tracks_generation and "generation" in meta:
            meta["generation"] = int(meta["generation"]) + 1
        return self._commit("MODIFIED", res, new, obj)

    def delete_collection(
        self,
        res: ResourceDef,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], Obj]:
        items, metadata = self.list_objects(
            res, namespace, label_selector=label_selector, field_selector=field_selector
        )
        for obj in items:
            meta = obj["metadata"]
            if self.peek(res, meta.get("namespace"), meta["name"]) is not None:
                self.delete(res, meta.get("namespace"), meta["name"])
        return items, metadata

    # Namespaces: the fake plays the namespace controller at once, like a cluster with
    # kube-controller-manager would shortly after: contents are deleted (honouring their
    # finalizers) and the namespace disappears when it is empty.

    def _delete_namespace(self, ns: Obj) -> Obj:
        res = self.resources[("", "namespaces")]
        name = ns["metadata"]["name"]
        if not ns["metadata"].get("deletionTimestamp"):
            new = clone(ns)
            new["metadata"]["deletionTimestamp"] = self.now()
            new["status"] = {**new.get("status", {}), "phase": "Terminating"}
            ns = self._commit("MODIFIED", res, new, ns)
        for other in list(self.resources.values()):
            if not other.namespaced:
                continue
            for obj in list(self.iter_objects(other, name)):
                if not obj["metadata"].get("deletionTimestamp"):
                    self.delete(other, name, obj["metadata"]["name"])
        self._finish_namespace(name)
        return ns

    def _namespace_empty(self, namespace: str) -> bool:
        return not any(
            next(self.iter_objects(res, namespace), None) is not None
            for res in self.resources.values()
            if res.namespaced
        )

    def _finish_namespace(self, namespace: str) -> None:
        res = self.resources[("", "namespaces")]
        ns = self.peek(res, None, namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if ns["metadata"].get("finalizers") or not self._namespace_empty(namespace):
            return
        self._remove(res, ns)

    # ------------------------------------------------------------------ CRDs

    def _prepare_crd(self, res: ResourceDef, body: Obj, old: Obj | None) -> None:
        spec = body.get("spec")
        name = body["metadata"]["name"]
        if not isinstance(spec, dict):
            raise invalid(res, name, [("FieldValueRequired", "spec", "Required value")])
        group = spec.get("group")
        names = spec.get("names") or {}
        plural = names.get("plural")
        kind = names.get("kind")
        problems: list[tuple[str, str, str]] = []
        if not group:
            problems.append(("FieldValueRequired", "spec.group", "Required value"))
        if not plural:
            problems.append(("FieldValueRequired", "spec.names.plural", "Required value"))
        if not kind:
            problems.append(("FieldValueRequired", "spec.names.kind", "Required value"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            problems.append(
                (
                    "FieldValueNotSupported",
                    "spec.scope",
                    f'Unsupported value: "{spec.get("scope", "")}":'
                    ' supported values: "Cluster", "Namespaced"',
                )
            )
        versions = spec.get("versions") or []
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            problems.append(
                (
                    "FieldValueInvalid",
                    "spec.versions",
                    "must have exactly one version marked as storage version",
                )
            )
        if plural and group and name != f"{plural}.{group}":
            problems.append(
                (
                    "FieldValueInvalid",
                    "metadata.name",
                    f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                )
            )
        if problems:
            raise invalid(res, name, problems)
        if old is not None:
            old_spec = old.get("spec", {})
            if old_spec.get("group") != group or old_spec.get("scope") != spec.get("scope"):
                raise invalid(
                    res,
                    name,
                    [
                        (
                            "FieldValueInvalid",
                            "spec.group" if old_spec.get("group") != group else "spec.scope",
                            "field is immutable",
                        )
                    ],
                )
        names.setdefault("singular", str(kind).lower())
        names.setdefault("listKind", f"{kind}List")
        spec["names"] = names
        spec.setdefault("conversion", {"strategy": "None"})
        if old is None:
            now = self.now()
            body["status"] = {
                "conditions": [
                    {
                        "type": "NamesAccepted",
                        "status": "True",
                        "lastTransitionTime": now,
                        "reason": "NoConflicts",
                        "message": "no conflicts found",
                    },
                    {
                        "type": "Established",
                        "status": "True",
                        "lastTransitionTime": now,
                        "reason": "InitialNamesAccepted",
                        "message": "the initial names have been accepted",
                    },
                ],
                "acceptedNames": dict(names),
                "storedVersions": [storage[0]["name"]],
            }
        else:
            status = body.setdefault("status", {})
            status["acceptedNames"] = dict(names)
            stored = status.setdefault("storedVersions", [])
            if storage[0]["name"] not in stored:
                stored.append(storage[0]["name"])

    def _register_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        names = spec["names"]
        versions = [v for v in spec["versions"] if v.get("served", True)]
        versions.sort(key=lambda v: not v.get("storage"))
        if not versions:
            self.unregister((spec["group"], names["plural"]))
            return
        res = ResourceDef(
            group=spec["group"],
            versions=[v["name"] for v in versions],
            plural=names["plural"],
            kind=names["kind"],
            namespaced=spec["scope"] == "Namespaced",
            singular=names.get("singular", ""),
            list_kind=names.get("listKind", ""),
            short_names=list(names.get("shortNames", [])),
            categories=list(names.get("categories", [])),
            status_subresource=any("status" in (v.get("subresources") or {}) for v in versions),
            tracks_generation=True,
            custom=True,
            verbs=CUSTOM_VERBS,
        )
        self.register(res)

    def _delete_crd(self, res: ResourceDef, crd: Obj) -> Obj:
        # The real server marks the CRD, lets a controller delete every custom object, then
        # removes the CRD; here it happens at once, and custom objects' finalizers are ignored.
        if crd["metadata"].get("deletionTimestamp"):
            return crd
        new = clone(crd)
        new["metadata"]["deletionTimestamp"] = self.now()
        new["metadata"]["finalizers"] = [
            *new["metadata"].get("finalizers", []),
            "customresourcecleanup.apiextensions.k8s.io",
        ]
        marked = self._commit("MODIFIED", res, new, crd)
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        custom = self.resources.get(key)
        if custom is not None:
            for obj in list(self.iter_objects(custom)):
                self._commit("DELETED", custom, clone(obj), obj)
        remaining = [
            f
            for f in marked["metadata"]["finalizers"]
            if f != "customresourcecleanup.apiextensions.k8s.io"
        ]
        if remaining:
            cleaned = clone(marked)
            cleaned["metadata"]["finalizers"] = remaining
            self._commit("MODIFIED", res, cleaned, marked)
            self.unregister(key)
        else:
            self._remove(res, marked)
        return marked

    def _drop_crd_resource(self, crd: Obj) -> None:
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        custom = self.resources.get(key)
        if custom is not None:
            for obj in list(self.iter_objects(custom)):
                self._commit("DELETED", custom, clone(obj), obj)
            self.unregister(key)
