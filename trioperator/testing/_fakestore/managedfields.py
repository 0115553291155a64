"""Field managers: who owns which fields of an object, as ``metadata.managedFields`` records it.

The rules are structured-merge-diff's, as kube-apiserver 1.20 runs them:

- an *update* (create, PUT, any non-apply patch) gives its manager the fields it added or
  changed, taken from whoever owned them (updates never conflict); fields it removed are
  nobody's any more;
- an *apply* merges the configuration into the object, makes its manager own exactly the
  fields of the configuration, removes the fields the manager applied last time and no longer
  does (unless another manager owns them), and fails with a 409 when it would change a field
  that another manager owns, unless forced, in which case it takes the field over;
- an object applied to for the first time without any managed fields first gets a
  ``before-first-apply`` manager that owns everything it holds.

Managers are identified by name and operation, and for updates also by apiVersion. Entries
are sorted as the apiserver sorts them: by operation, time, then name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from trioperator.testing._fakestore.errors import StatusError
from trioperator.testing._fakestore.fieldsets import (
    MISSING,
    FieldSet,
    ListKind,
    Names,
    Path,
    Shapes,
    compare,
    decode_fields,
    encode_fields,
    field_set,
    item_element,
    path_text,
    prefixes,
)
from trioperator.testing._fakestore.values import JSON, Obj, clone

BEFORE_FIRST_APPLY = "before-first-apply"


@dataclasses.dataclass
class Manager:
    name: str
    operation: str  # "Apply" or "Update"
    api_version: str
    time: str | None
    fields: FieldSet

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.operation, self.api_version if self.operation == "Update" else "")

    def describe(self) -> str:
        """How conflict messages name the manager."""
        if self.operation == "Update":
            return f'"{self.name}" using {self.api_version}'
        return f'"{self.name}"'

    def entry(self, *, custom: bool) -> Obj:
        fields: dict[str, Any] = {
            "manager": self.name,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time is not None:
            fields["time"] = self.time
        fields["fieldsType"] = "FieldsV1"
        fields["fieldsV1"] = encode_fields(self.fields)
        # Custom resources are unstructured on the server: their keys come out sorted.
        return dict(sorted(fields.items())) if custom else fields


Managers = dict[tuple[str, str, str], Manager]


def decode_managers(obj: Obj) -> Managers:
    """The managers recorded in an object; none at all if any entry is malformed.

    An update may carry managedFields of its own; the apiserver ignores them whole, keeping
    the recorded ones, unless every entry can be decoded. (It refuses an update whose
    entries decode but are invalid otherwise, e.g. an unknown operation: the fake ignores
    those too.)
    """
    managers: Managers = {}
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    if not isinstance(entries, list):
        return {}
    for entry in entries:
        if not _valid_entry(entry):
            return {}
        manager = Manager(
            name=entry["manager"],
            operation=entry["operation"],
            api_version=str(entry.get("apiVersion", "")),
            time=entry.get("time"),
            fields=decode_fields(entry.get("fieldsV1")),
        )
        managers[manager.key] = manager
    return managers


def _valid_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("manager"), str)
        and entry.get("operation") in ("Apply", "Update")
        and entry.get("fieldsType") == "FieldsV1"
        and isinstance(entry.get("fieldsV1", {}), dict)
    )


def encode_managers(managers: Managers, *, custom: bool) -> list[Obj]:
    ordered = sorted(
        (m for m in managers.values() if m.fields),
        key=lambda m: (m.operation, m.time or "", m.name, m.api_version),
    )
    return [m.entry(custom=custom) for m in ordered]


def without_system_fields(obj: Obj) -> Obj:
    """A shallow view of an object for comparisons: no managedFields."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


# ------------------------------------------------------------------------------ updates


def record_update(
    managers: Managers,
    old: Obj,
    new: Obj,
    *,
    manager: str,
    api_version: str,
    shapes: Shapes,
    now: Callable[[], str],
) -> None:
    """Give ``manager`` what changed from ``old`` to ``new``; nobody owns removed fields."""
    diff = compare(without_system_fields(old), without_system_fields(new), shapes)
    changed = (diff.added | diff.modified) - diff.removed
    for other in managers.values():
        other.fields -= changed
        other.fields -= diff.removed
    if changed:
        key = (manager, "Update", api_version)
        mine = managers.get(key)
        if mine is None:
            mine = managers[key] = Manager(manager, "Update", api_version, None, set())
        mine.fields |= changed
        mine.time = now()
    for key in [k for k, m in managers.items() if not m.fields]:
        del managers[key]


def adopt_existing(
    managers: Managers,
    live: Obj,
    base: Obj,
    *,
    api_version: str,
    shapes: Shapes,
    now: Callable[[], str],
) -> None:
    """Before the first apply to an object without managed fields: someone owns what it has."""
    record_update(
        managers,
        base,
        live,
        manager=BEFORE_FIRST_APPLY,
        api_version=api_version,
        shapes=shapes,
        now=now,
    )


# ------------------------------------------------------------------------------ apply


def apply_config(
    managers: Managers,
    live: Obj,
    config: Obj,
    *,
    manager: str,
    api_version: str,
    force: bool,
    shapes: Shapes,
    now: Callable[[], str],
) -> Obj:
    """The object after applying ``config`` as ``manager``; updates ``managers`` in place.

    Raises the apiserver's 409 when the apply would change fields that other managers own.
    """
    live = without_system_fields(live)
    key = (manager, "Apply", "")
    previous = managers.get(key)
    last = previous.fields if previous is not None else set()
    applied = field_set(config, shapes)
    merged: Obj = merge(live, config, (), shapes)
    others = [m for k, m in managers.items() if k != key]
    owned_elsewhere: FieldSet = set().union(*(m.fields for m in others)) if others else set()
    owned = applied | owned_elsewhere
    kept_parents = prefixes(owned)
    dropped = {p for p in last - owned if p not in kept_parents}
    if dropped:
        merged = remove_paths(merged, dropped, shapes)

    diff = compare(live, merged, shapes)
    changed = diff.modified | diff.added
    conflicts: list[tuple[Manager, Path]] = []
    for other in others:
        conflicts.extend((other, path) for path in sorted(other.fields & changed))
    if conflicts and not force:
        raise conflict_error(conflicts)
    for other in others:
        other.fields -= changed
        other.fields -= diff.removed
    managers[key] = Manager(
        manager,
        "Apply",
        api_version,
        now() if not diff.same or previous is None else previous.time,
        applied,
    )
    for stale in [k for k, m in managers.items() if not m.fields]:
        del managers[stale]
    return merged


def conflict_error(conflicts: list[tuple[Manager, Path]]) -> StatusError:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {manager.describe()}",
            "field": path_text(path),
        }
        for manager, path in conflicts
    ]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {manager.describe()}: {path_text(path)}"
        )
    else:
        by_manager: dict[str, list[str]] = {}
        for manager, path in conflicts:
            by_manager.setdefault(manager.describe(), []).append(path_text(path))
        lines: list[str] = []
        for name in sorted(by_manager):
            lines.append(f"conflicts with {name}:")
            lines.extend(f"- {text}" for text in by_manager[name])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return StatusError(409, "Conflict", message, {"causes": causes})


def merge(live: JSON, config: JSON, names: Names, shapes: Shapes) -> JSON:
    """``config`` merged into ``live``: maps by key, associative lists by item, else replaced."""
    if isinstance(live, dict) and isinstance(config, dict):
        if names and shapes.map_kind(names) == "atomic":
            return clone(config)
        result = dict(live)
        for key, value in config.items():
            result[key] = merge(live.get(key, MISSING), value, (*names, key), shapes)
        return result
    if isinstance(live, list) and isinstance(config, list):
        kind = shapes.list_kind(names)
        if kind != "atomic":
            return _merge_items(live, config, names, kind, shapes)
    return clone(config)


def _merge_items(
    live: list[JSON], config: list[JSON], names: Names, kind: ListKind, shapes: Shapes
) -> list[JSON]:
    # Live items keep their places (merged with the applied ones); new items follow, in the
    # order of the configuration.
    applied = {item_element(item, kind, i): item for i, item in enumerate(config)}
    result: list[JSON] = []
    seen: set[str] = set()
    for index, item in enumerate(live):
        element = item_element(item, kind, index)
        seen.add(element)
        if element in applied:
            result.append(merge(item, applied[element], names, shapes))
        else:
            result.append(item)
    for element, item in applied.items():
        if element not in seen:
            result.append(clone(item))
    return result


def remove_paths(obj: Obj, paths: FieldSet, shapes: Shapes) -> Obj:
    """A copy of ``obj`` without the nodes at ``paths`` (and what is under them).

    Maps that the removal empties are dropped for built-in kinds (their empty maps serialize
    as nothing there).
    """
    result: Obj = clone(obj)
    for path in sorted(paths, key=len):
        _remove(result, path, (), shapes)
    return result


def _remove(node: JSON, path: Path, names: Names, shapes: Shapes) -> bool:
    """Remove ``path`` under ``node``; tells whether ``node`` became an empty container."""
    element, rest = path[0], path[1:]
    if isinstance(node, dict) and element.startswith("f:"):
        key = element[2:]
        if key not in node:
            return False
        emptied = bool(rest) and _remove(node[key], rest, (*names, key), shapes)
        if not rest or (emptied and not shapes.custom):
            del node[key]
        return not node
    if isinstance(node, list):
        kind = shapes.list_kind(names)
        for index, item in enumerate(node):
            if item_element(item, kind, index) == element:
                if rest:
                    _remove(item, rest, names, shapes)
                else:
                    del node[index]
                break
        return not node
    return False
