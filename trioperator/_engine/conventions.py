"""How the storages name their annotations, and how they recognise Kopf-managed annotations.

Kubernetes limits an annotation key ``prefix/name``: the name part is at most 63 characters of
``[-._a-zA-Z0-9]``, the whole key at most 253. Handler ids do not fit that alphabet (sub-handlers
are ``parent/child``, lambdas contain ``<lambda>``) and can be arbitrarily long, so they are made
safe and, when too long, cut and suffixed with a short hash.

Two generations of keys exist on clusters, and both must be produced exactly as Kopf does, or an
operator that moves between Kopf and trioperator would not find its own records:

* **V1** cuts the *whole* key (prefix included) to 63 characters. The hash is of the safe name.
* **V2** cuts only the name part to 63 characters. The hash is of the name *before* the unsafe
  characters are replaced. This asymmetry is Kopf's and is kept on purpose.

Storages with ``v1=True`` (the default) write both variants when they differ and read either.

Kubernetes copies a Deployment's annotations to its ReplicaSets. When both kinds are served by
operators with the same prefix, the copied records would pass for the ReplicaSet's own. So for a
ReplicaSet owned by a Deployment, ``-ofDRS`` is appended to the record key before anything else.

Other operators' records must not count as essential changes of an object, or two operators
would keep reacting to each other's bookkeeping. Prefixes are recognised as Kopf-managed when
they are ``kopf.zalando.org``, a subdomain of it, or carry a ``<prefix>/kopf-managed`` annotation;
storages with a custom prefix not starting with ``kopf.`` write that marker themselves.

The module also holds the small helpers for dotted field paths that the storages share.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import warnings
from collections.abc import Collection, Iterable, Mapping, MutableMapping
from typing import Any, TypeAlias, TypeGuard

from trioperator._engine.bodies import Body, MappingView

__all__ = [
    "ANNOTATIONS_LIMIT",
    "DEFAULT_PREFIX",
    "KUBECTL_LAST_APPLIED",
    "MANAGED_MARKER",
    "FieldPath",
    "FieldSpec",
    "StorageKeyFormingConvention",
    "StorageKeyMarkingConvention",
    "StorageStanzaCleaner",
    "annotations_size_after",
    "check_prefix",
    "cherrypick_fields",
    "copy_json",
    "detect_kopf_prefixes",
    "ensure_field",
    "format_field",
    "has_field",
    "hash_suffix",
    "make_keys",
    "make_safe_name",
    "make_v1_key",
    "make_v2_key",
    "mark_key",
    "parse_field",
    "purge_field",
    "remove_field",
    "resolve_field",
    "set_field_if_changed",
    "store_marker",
]

DEFAULT_PREFIX = "kopf.zalando.org"
MANAGED_MARKER = "kopf-managed"
KUBECTL_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

MAX_NAME_LENGTH = 63
MAX_KEY_LENGTH = 253

# The longest prefix that leaves room for "/" and a 63-character name within 253 characters.
MAX_PREFIX_LENGTH = MAX_KEY_LENGTH - MAX_NAME_LENGTH - 1

_KNOWN_PREFIXES = frozenset({DEFAULT_PREFIX})
_KNOWN_MARKERS = frozenset({MANAGED_MARKER})
_UNSAFE_CHARS = str.maketrans({"/": ".", "<": "_", ">": "_"})
_DRS_MARK = "-ofDRS"


# ------------------------------------------------------------------ field paths

FieldPath: TypeAlias = tuple[str, ...]
FieldSpec: TypeAlias = str | tuple[str, ...] | list[str] | None
"""A field as users write it: ``"status.x"``, ``("status", "x")``, ``["status", "x"]``, or
``None`` for the root."""


def parse_field(field: FieldSpec) -> FieldPath:
    """Turn any accepted field notation into a tuple of keys."""
    if type(field) is tuple:  # the storages' own fields: the common case, nothing to convert
        return field
    if field is None:
        return ()
    if isinstance(field, str):
        return tuple(field.split("."))
    if isinstance(field, list | tuple):
        return tuple(field)
    raise ValueError(f"A field must be a dotted string, a list or a tuple; got {field!r}.")


def format_field(field: FieldSpec, name: str) -> FieldPath:
    """A status storage's field: ``{name}`` in a dotted string is the storage's name (Kopf's
    ``"status.{name}.progress"``)."""
    return parse_field(field.format(name=name) if isinstance(field, str) else field)


_ABSENT: Any = object()  # "no default given" for resolve_field()
_MISSING: Any = object()  # "not found" inside has_field()


def resolve_field(src: Mapping[str, Any] | None, field: FieldSpec, default: Any = _ABSENT) -> Any:
    """Get a nested value; with a ``default``, absent keys and non-dict parents give it.

    Without a default, an absent key raises ``KeyError``, a non-dict parent ``TypeError``.
    """
    # A body view is read through to its dict once, instead of resolving its path per key.
    # (Plain dicts and tuples first: checks against the ABCs cost a Python-level call each.)
    value: Any = src._resolve() if _is_view(src) else src
    for key in field if type(field) is tuple else parse_field(field):
        if type(value) is not dict and not isinstance(value, Mapping):
            if default is _ABSENT:
                raise TypeError(f"Cannot look up {key!r} in a non-mapping: {value!r}")
            return default
        try:
            value = value[key]
        except KeyError:
            if default is _ABSENT:
                raise
            return default
    return value


def has_field(src: Mapping[str, Any] | None, field: FieldSpec) -> bool:
    """Whether the nested key exists (even with a ``None`` value)."""
    return resolve_field(src, field, _MISSING) is not _MISSING


def ensure_field(dst: MutableMapping[str, Any], field: FieldSpec, value: Any) -> None:
    """Set a nested value, creating the missing parents as empty dicts."""
    path = parse_field(field)
    if not path:
        raise ValueError("Cannot set the root of a dict; name a field.")
    target: MutableMapping[str, Any] = dst
    for key in path[:-1]:
        child = target.get(key)
        if child is None or not isinstance(child, (dict, MutableMapping)):
            child = {}
            target[key] = child
        target = child
    target[path[-1]] = value


def remove_field(dst: MutableMapping[str, Any], field: FieldSpec) -> None:
    """Delete a nested key if present, then every parent that this leaves empty.

    A non-dict on the way raises ``TypeError`` (callers that tolerate corrupted data catch it).
    """
    path = parse_field(field)
    if not path:
        raise ValueError("Cannot remove the root of a dict; name a field.")
    head, rest = path[0], path[1:]
    if not rest:
        dst.pop(head, None)
        return
    if head not in dst:
        return
    child = dst[head]
    if not isinstance(child, (dict, MutableMapping)):
        raise TypeError(f"Cannot remove {rest!r} from a non-mapping: {child!r}")
    remove_field(child, rest)
    if not child:
        del dst[head]


def set_field_if_changed(
    *, body: Mapping[str, Any], patch: MutableMapping[str, Any], field: FieldSpec, value: Any
) -> bool:
    """Put ``value`` into the merge-patch unless the body has it already; tell if it did.

    A value already in the patch is always overwritten, even with what the body has: something
    earlier in this cycle decided otherwise (e.g. a purge), and the latest decision must win.
    """
    if has_field(patch, field) or resolve_field(body, field, _MISSING) != value:
        ensure_field(patch, field, value)
        return True
    return False


def purge_field(
    *, body: Mapping[str, Any], patch: MutableMapping[str, Any], field: FieldSpec
) -> None:
    """Delete a field on the object (``null`` in the merge-patch), or cancel its pending write."""
    if has_field(body, field):
        ensure_field(patch, field, None)
    elif has_field(patch, field):
        remove_field(patch, field)


ANNOTATIONS_LIMIT = 256 * 1024
"""The most bytes all annotations of an object may take, keys and values together (what the
API server checks: a write over it is rejected with 422 "metadata.annotations: Too long")."""


def annotations_size_after(
    *, body: Mapping[str, Any], patch: Mapping[str, Any], changes: Mapping[str, str | None]
) -> int:
    """The size of the object's annotations (as the API server counts it) after the merge-patch
    and then ``changes`` (``None`` removes a key) are applied."""
    metadata = body.get("metadata")
    annotations = metadata.get("annotations") if _is_mapping(metadata) else None
    result: dict[str, Any] = dict(annotations) if _is_mapping(annotations) else {}
    patch_meta = patch.get("metadata")
    pending = patch_meta.get("annotations") if _is_mapping(patch_meta) else None
    for source in (pending if _is_mapping(pending) else {}, changes):
        for key, value in source.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = value
    return sum(
        len(key.encode()) + len(value.encode())
        for key, value in result.items()
        if isinstance(value, str)
    )


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # Dicts (and subclasses, e.g. patches) and None without the ABC's Python-level check.
    return value is not None and isinstance(value, (dict, Mapping))


_VIEW_TYPES: dict[type, bool] = {}


def _is_view(value: Any) -> TypeGuard[MappingView]:
    """Whether it is a body view, remembered per type (not checked against the ABC each time)."""
    cls = type(value)
    known = _VIEW_TYPES.get(cls)
    if known is None:
        known = _VIEW_TYPES[cls] = issubclass(cls, MappingView)
    return known


_IMMUTABLE_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), as ``copy.deepcopy`` makes it.

    Several times cheaper than ``copy.deepcopy`` for what bodies are made of: no memo, no
    dispatch per value. Anything else (dict subclasses, tuples, user objects) is handed to
    ``copy.deepcopy``. Shared sub-objects become separate copies, which is what JSON decoded
    from the wire never has anyway.
    """
    # Scalars inside containers are taken as they are, without a call each (most leaves are).
    scalars = _IMMUTABLE_SCALARS
    cls = type(value)
    if cls is dict:
        return {
            key: item if type(item) in scalars else copy_json(item) for key, item in value.items()
        }
    if cls is list:
        return [item if type(item) in scalars else copy_json(item) for item in value]
    if cls in scalars:
        return value
    return copy.deepcopy(value)


def cherrypick_fields(
    src: Mapping[str, Any], dst: MutableMapping[str, Any], fields: Iterable[FieldSpec] | None
) -> None:
    """Copy (deeply) the listed fields that exist in ``src`` into ``dst``."""
    for field in fields or ():
        try:
            value = resolve_field(src, field)
        except (KeyError, TypeError):
            continue  # absent in the source: nothing to restore
        ensure_field(dst, field, copy_json(value))


# ------------------------------------------------------------------ key forming


def make_safe_name(key: str) -> str:
    """Replace the characters that handler ids may have but annotation names may not."""
    return key.translate(_UNSAFE_CHARS)


def hash_suffix(text: str) -> str:
    """``-`` and 6 characters of a 32-bit BLAKE2b digest, base64 with ``-`` and ``.`` for ``+/``.

    Trailing ``=``/``-``/``.`` are stripped as Kubernetes wants names to end alphanumerically.
    (Four bytes make six significant characters, the last of which is always alphanumeric, so in
    practice only the ``==`` padding goes.)
    """
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest()
    encoded = base64.b64encode(digest, altchars=b"-.").decode("ascii")
    return f"-{encoded}".rstrip("=-.")


def mark_key(key: str, *, body: Mapping[str, Any] | None) -> str:
    """Append ``-ofDRS`` for ReplicaSets owned by a Deployment (see the module docstring)."""
    if body is None or body.get("kind") != "ReplicaSet":
        return key
    metadata = body.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    if any(
        isinstance(owner, Mapping) and owner.get("kind") == "Deployment" for owner in owners or ()
    ):
        return f"{key}{_DRS_MARK}"
    return key


def make_v1_key(prefix: str | None, key: str) -> str:
    """The V1 annotation key: the whole ``prefix/name`` fits into 63 characters."""
    safe = make_safe_name(key)
    head = f"{prefix}/" if prefix else ""
    room = MAX_NAME_LENGTH - len(head)
    if len(safe) <= room:
        return f"{head}{safe}"
    suffix = hash_suffix(safe)
    # With prefixes of 56+ characters the bound goes negative; Python's slicing then cuts from
    # the end, exactly as Kopf's keys were formed, so it is left as is.
    return f"{head}{safe[: room - len(suffix)]}{suffix}"


def make_v2_key(prefix: str | None, key: str) -> str:
    """The V2 annotation key: only the name part is limited to 63 characters."""
    head = f"{prefix}/" if prefix else ""
    suffix = hash_suffix(key) if len(key) > MAX_NAME_LENGTH else ""
    safe = make_safe_name(key)
    return f"{head}{safe[: max(0, MAX_NAME_LENGTH - len(suffix))]}{suffix}"


def make_keys(
    prefix: str | None, key: str, *, v1: bool = True, body: Mapping[str, Any] | None = None
) -> list[str]:
    """All annotation keys of one record: V2 first, then V1 if enabled and different."""
    # Asked several times per object and cycle: only ReplicaSets need the ownership looked at.
    if body is not None and body.get("kind") == "ReplicaSet":
        key = mark_key(key, body=body)
    return list(_make_keys(prefix, key, v1))


@functools.lru_cache(maxsize=1024)
def _make_keys(prefix: str | None, marked: str, v1: bool) -> tuple[str, ...]:
    # The same few keys are formed for every object in every cycle (hashing long ids, too):
    # they depend on nothing but these arguments, so they are formed once.
    v2 = make_v2_key(prefix, marked)
    if v1:
        v1_key = make_v1_key(prefix, marked)
        if v1_key != v2:
            return (v2, v1_key)
    return (v2,)


def check_prefix(prefix: str | None) -> None:
    """Refuse unprefixed storages; warn about prefixes too long for valid annotation keys."""
    if not prefix:
        raise ValueError("Annotations storages must be prefixed.")
    if len(prefix) > MAX_PREFIX_LENGTH:
        warnings.warn(
            f"The annotations prefix is too long. It can cause errors when PATCHing: "
            f"{len(prefix)} characters, while at most {MAX_PREFIX_LENGTH} leave room for "
            f"a {MAX_NAME_LENGTH}-character name within {MAX_KEY_LENGTH} characters.",
            UserWarning,
            stacklevel=3,
        )


# ------------------------------------------------------------------ Kopf-managed prefixes


def detect_kopf_prefixes(keys: Iterable[str]) -> frozenset[str]:
    """The prefixes among ``keys`` that belong to Kopf-based operators (ours included)."""
    found: set[str] = set()
    for key in keys:
        prefix, slash, name = key.partition("/")
        if not slash:
            continue
        if (
            name in _KNOWN_MARKERS
            or prefix in _KNOWN_PREFIXES
            or any(prefix.endswith(f".{known}") for known in _KNOWN_PREFIXES)
        ):
            found.add(prefix)
    return frozenset(found)


def store_marker(
    *, prefix: str | None, body: Mapping[str, Any], patch: MutableMapping[str, Any]
) -> None:
    """Add ``<prefix>/kopf-managed: "yes"`` for custom prefixes, unless already there."""
    if not prefix or prefix.startswith("kopf."):
        return  # kopf.zalando.org and its kin are recognised without a marker
    marker = f"{prefix}/{MANAGED_MARKER}"
    field = ("metadata", "annotations", marker)
    if has_field(body, field) or has_field(patch, field):
        return
    ensure_field(patch, field, "yes")


# ------------------------------------------------------------------ mixins (Kopf's base classes)


class StorageKeyFormingConvention:
    """A mixin for storages keyed by annotation names: ``prefix`` and ``v1`` handling.

    ``make_keys(key, body=...)`` gives every annotation key a record lives under; reading tries
    them in order, writing and purging touches all of them.
    """

    def __init__(self, *args: Any, prefix: str, v1: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_prefix(prefix)
        self.prefix = prefix
        self.v1 = v1

    def make_keys(self, key: str, *, body: Body | Mapping[str, Any] | None = None) -> list[str]:
        # As make_keys(), without the extra call: this is asked several times per cycle.
        if body is not None and body.get("kind") == "ReplicaSet":
            key = mark_key(key, body=body)
        return list(_make_keys(self.prefix, key, self.v1))

    def make_v1_key(self, key: str) -> str:
        return make_v1_key(self.prefix, key)

    def make_v2_key(self, key: str) -> str:
        return make_v2_key(self.prefix, key)


class StorageKeyMarkingConvention:
    """A mixin to recognise other Kopf-based operators' annotations and to mark our own."""

    def detect_marked_prefixes(self, keys: Collection[str]) -> frozenset[str]:
        return detect_kopf_prefixes(keys)

    def store_marker(
        self, *, prefix: str | None, patch: MutableMapping[str, Any], body: Mapping[str, Any]
    ) -> None:
        store_marker(prefix=prefix, body=body, patch=patch)


class StorageStanzaCleaner:
    """A mixin to drop given annotations and the stanzas left empty in an essence."""

    @staticmethod
    def remove_annotations(essence: MutableMapping[str, Any], keys: Collection[str]) -> None:
        """Remove the given annotation keys (in place)."""
        metadata = essence.get("metadata")
        annotations = metadata.get("annotations") if _is_mapping(metadata) else None
        if annotations is None or not isinstance(annotations, (dict, MutableMapping)):
            return
        for key in [key for key in annotations if key in keys]:
            del annotations[key]

    @staticmethod
    def remove_empty_stanzas(essence: MutableMapping[str, Any]) -> None:
        """Drop empty ``metadata.annotations``/``labels``, then empty ``metadata`` and ``status``.

        Only these: an empty ``spec`` (or any other user field) is real content and stays.
        """
        metadata = essence.get("metadata")
        if metadata is not None and isinstance(metadata, (dict, MutableMapping)):
            for stanza in ("annotations", "labels"):
                if stanza in metadata and not metadata[stanza]:
                    del metadata[stanza]
        if "metadata" in essence and not essence["metadata"]:
            del essence["metadata"]
        if "status" in essence and not essence["status"]:
            del essence["status"]
