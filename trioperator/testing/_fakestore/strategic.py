"""Strategic merge patches (``application/strategic-merge-patch+json``) on built-in kinds.

Like a JSON merge patch, except for the lists that the built-in kinds declare mergeable:
their items are merged by a key (containers, env, volumes by ``name``, container ports by
``containerPort``, ...) or, for ``metadata.finalizers``, by value. The directives that
kubectl sends are understood: ``$patch: replace | delete | merge`` (in maps and list items),
``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>`` and ``$retainKeys``.

The order of a merged list follows the apiserver: the patch's items in the patch's order, with
the items only the server has slotted in where they were relative to them.
"""

from __future__ import annotations

from typing import Any

from trioperator.testing._fakestore.errors import StatusError
from trioperator.testing._fakestore.fieldsets import MISSING, Names
from trioperator.testing._fakestore.values import JSON, clone

# patchMergeKey of the mergeable lists, by the list field's name.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "topologySpreadConstraints": "topologyKey",
}
_PRIMITIVE_MERGE = frozenset({("metadata", "finalizers")})
_PORT_KEYS = {
    "containers": "containerPort",
    "initContainers": "containerPort",
    "ephemeralContainers": "containerPort",
    "spec": "port",
}


def _merge_key(names: Names) -> str | None:
    if not names:
        return None
    if names[-1] == "ports" and len(names) >= 2:
        return _PORT_KEYS.get(names[-2])
    return _MERGE_KEYS.get(names[-1])


def _invalid(message: str) -> StatusError:
    return StatusError(422, "Invalid", message, {})


def strategic_merge(original: JSON, patch: JSON) -> JSON:
    """``original`` with a strategic merge ``patch`` applied (neither is changed)."""
    if not isinstance(patch, dict):
        raise StatusError(400, "BadRequest", "the patch is not a JSON object")
    result = _merge_map(original if isinstance(original, dict) else {}, patch, ())
    return {} if result is MISSING else result


def _merge_map(original: dict[str, Any], patch: dict[str, Any], names: Names) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return MISSING
    if directive == "replace":
        return _strip(patch)
    if directive not in (None, "merge"):
        raise _invalid(f"Unknown patch type: {directive}")
    result = dict(original)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            current = result.get(field)
            if isinstance(current, list) and isinstance(value, list):
                result[field] = [item for item in current if item not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        child = (*names, key)
        if isinstance(value, dict):
            before = result.get(key)
            merged = _merge_map(before if isinstance(before, dict) else {}, value, child)
            if merged is MISSING:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            order = patch.get(f"$setElementOrder/{key}")
            before = result.get(key)
            result[key] = _merge_list(
                before if isinstance(before, list) else [],
                value,
                child,
                order if isinstance(order, list) else None,
            )
        else:
            result[key] = value
    return result


def _merge_list(
    original: list[Any], patch: list[Any], names: Names, order: list[Any] | None
) -> list[Any]:
    if names in _PRIMITIVE_MERGE:
        return _interleave([i for i in original if i not in patch], _dedupe(patch), original, None)
    key = _merge_key(names)
    if key is None:
        return [_strip(item) if isinstance(item, dict) else item for item in patch]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    deleted = {i.get(key) for i in patch if isinstance(i, dict) and i.get("$patch") == "delete"}
    items = [i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "delete")]
    by_key = {i.get(key): i for i in original if isinstance(i, dict)}
    merged: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise _invalid(f"the list {'.'.join(names)} holds a non-object item: {item!r}")
        if key not in item:
            shown = " ".join(f"{k}:{v}" for k, v in sorted(item.items()))
            raise StatusError(
                500, "", f"map: map[{shown}] does not contain declared merge key: {key}"
            )
        before = by_key.get(item[key])
        result = _merge_map(before if isinstance(before, dict) else {}, item, names)
        if result is not MISSING:
            merged.append(result)
    patched_keys = {i.get(key) for i in items} | deleted
    server_only = [i for i in original if not (isinstance(i, dict) and i.get(key) in patched_keys)]
    if order is not None:
        # $setElementOrder lists the wanted order of the whole list (kubectl sends it): the
        # items it names go in that order, the others keep their places around them.
        ranks = {(o.get(key) if isinstance(o, dict) else o): n for n, o in enumerate(order)}
        everything = merged + server_only
        merged = sorted(
            (i for i in everything if _rank(ranks, i, key) is not None),
            key=lambda i: _rank(ranks, i, key) or 0,
        )
        server_only = [i for i in everything if _rank(ranks, i, key) is None]
    return _interleave(server_only, merged, original, key)


def _rank(ranks: dict[Any, int], item: Any, key: str) -> int | None:
    return ranks.get(item.get(key)) if isinstance(item, dict) else None


def _interleave(left: list[Any], right: list[Any], server: list[Any], key: str | None) -> list[Any]:
    """Slot the server-only items (``left``) among the patched ones (``right``).

    A server-only item goes before a patched one when both were on the server, in that order;
    otherwise the patched item comes first. Both lists keep their own order.
    """

    def identity(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    positions: dict[Any, int] = {}
    for index, item in enumerate(server):
        try:
            positions.setdefault(identity(item), index)
        except TypeError:  # unhashable primitive: no position to honour
            continue
    result: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            result.append(left[i])
            i += 1
        elif i >= len(left):
            result.append(right[j])
            j += 1
        else:
            li = _position(positions, identity(left[i]))
            ri = _position(positions, identity(right[j]))
            if li is not None and ri is not None and li < ri:
                result.append(left[i])
                i += 1
            else:
                result.append(right[j])
                j += 1
    return result


def _position(positions: dict[Any, int], identity: Any) -> int | None:
    try:
        return positions.get(identity)
    except TypeError:
        return None


def _dedupe(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _strip(value: JSON) -> JSON:
    """A copy without the patch directives (keys starting with ``$``)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return clone(value)
