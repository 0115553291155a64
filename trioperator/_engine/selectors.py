"""Resource selectors: what a decorator's positional/keyword resource arguments mean.

A ``Selector`` is declared long before the cluster is known, so it only remembers the user's
intent; ``select()`` resolves it against the resources discovered at runtime, in the spirit of
``kubectl``: a bare name matches any of plural/singular/kind/short names, the core ``v1`` group
wins over same-named resources of other groups, only preferred versions are served unless a
version is given, and catch-all selectors never serve Events (they are produced by the operator
itself, so watching them would feed back into every cycle).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Collection, Iterable
from typing import Final, TypeAlias

from trioperator._client.resources import DiscoveryScope, Resource

__all__ = [
    "EVERYTHING",
    "Marker",
    "ResourceCallback",
    "Selector",
    "ServedResources",
    "discovery_scope",
    "resolve_resources",
]


class Marker(enum.Enum):
    """Special values in place of a resource name."""

    EVERYTHING = "EVERYTHING"

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__


EVERYTHING: Final = Marker.EVERYTHING
"""Every resource (of the given group/version, if any) except Events."""

ResourceCallback: TypeAlias = Callable[[Resource], bool]

# Kubernetes API versions: v1, v2, v1beta1, v2alpha3, ... (used to parse "pods.v1" and the like).
_VERSION_RE: Final = re.compile(r"v[0-9]+(?:(?:alpha|beta)[0-9]+)?")

_NAME_KWARGS: Final = ("kind", "plural", "singular", "shortcut")


def _is_event(resource: Resource) -> bool:
    return resource.plural == "events" and resource.group in ("", "events.k8s.io")


@dataclasses.dataclass(frozen=True, repr=False)
class Selector:
    """A resource specification as written in a decorator.

    Positional forms (the rightmost is always the name, or ``EVERYTHING``)::

        Selector('kopfexamples')                      # any group, preferred version
        Selector('kopfexamples.kopf.dev')             # kubectl style: name.group
        Selector('pods.v1'), Selector('deployments.v1.apps')   # name.version[.group]
        Selector('kopf.dev', 'kopfexamples')          # group + name, preferred version
        Selector('kopf.dev/v1', 'kopfexamples')       # group/version + name
        Selector('kopf.dev', 'v1', 'kopfexamples')    # group, version, name
        Selector('v1', 'pods'), Selector('', 'v1', 'pods')      # the core API
        Selector(EVERYTHING), Selector('kopf.dev', EVERYTHING)
        Selector(callback)                            # callback(resource) -> bool

    Keyword forms: ``group=, version=, kind=, plural=, singular=, shortcut=, category=``; they can
    be combined with a callback but not with a positional name.
    """

    group: str | None = None
    version: str | None = None
    kind: str | None = None
    plural: str | None = None
    singular: str | None = None
    shortcut: str | None = None
    category: str | None = None
    any_name: str | Marker | None = None
    callback: ResourceCallback | None = None

    def __init__(
        self,
        arg1: str | Marker | ResourceCallback | None = None,
        arg2: str | Marker | None = None,
        arg3: str | Marker | None = None,
        /,
        *,
        group: str | None = None,
        version: str | None = None,
        kind: str | None = None,
        plural: str | None = None,
        singular: str | None = None,
        shortcut: str | None = None,
        category: str | None = None,
    ) -> None:
        keywords = {
            "group": group,
            "version": version,
            "kind": kind,
            "plural": plural,
            "singular": singular,
            "shortcut": shortcut,
            "category": category,
        }
        for what, value in keywords.items():
            if value is not None and not isinstance(value, str):
                raise TypeError(f"The resource {what}= must be a string, got {value!r}.")
            if value == "" and what != "group":  # only the core API group has an empty name
                raise ValueError(f"The resource {what}= cannot be an empty string.")

        pos_group, pos_version, any_name, callback = _parse_positional(arg1, arg2, arg3)

        if pos_group is not None and group is not None:
            raise TypeError(
                f"The API group is given both positionally ({pos_group!r}) "
                f"and as group={group!r}; use one of them."
            )
        if pos_version is not None and version is not None:
            raise TypeError(
                f"The API version is given both positionally ({pos_version!r}) "
                f"and as version={version!r}; use one of them."
            )
        named = {k: keywords[k] for k in _NAME_KWARGS if keywords[k] is not None}
        if any_name is not None and named:
            kwargs_text = ", ".join(f"{k}={v!r}" for k, v in named.items())
            raise TypeError(
                f"The resource name is given both positionally ({any_name!r}) "
                f"and by keywords ({kwargs_text}); use one of them."
            )
        if any_name is None and callback is None and not named and category is None:
            raise TypeError(
                "A resource must be specified: a name (e.g. 'kopfexamples' or "
                "'kopf.dev', 'v1', 'kopfexamples'), kind=/plural=/singular=/shortcut=, "
                "category=, EVERYTHING, or a callable selector."
            )

        object.__setattr__(self, "group", pos_group if pos_group is not None else group)
        object.__setattr__(self, "version", pos_version if pos_version is not None else version)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "plural", plural)
        object.__setattr__(self, "singular", singular)
        object.__setattr__(self, "shortcut", shortcut)
        object.__setattr__(self, "category", category)
        object.__setattr__(self, "any_name", any_name)
        object.__setattr__(self, "callback", callback)

    def __repr__(self) -> str:
        parts = [
            f"{field.name}={getattr(self, field.name)!r}"
            for field in dataclasses.fields(self)
            if getattr(self, field.name) is not None
        ]
        return f"Selector({', '.join(parts)})"

    @property
    def is_specific(self) -> bool:
        """Whether it names one resource (as opposed to categories, callbacks, ``EVERYTHING``).

        Only specific selectors can be ambiguous, and only they get the core-v1 priority.
        """
        return isinstance(self.any_name, str) or any(
            getattr(self, name) is not None for name in _NAME_KWARGS
        )

    def check(self, resource: Resource) -> bool:
        """Whether this one resource matches, regardless of the other discovered resources."""
        if self.group is not None and resource.group != self.group:
            return False
        if self.version is not None:
            if resource.version != self.version:
                return False
        elif self.callback is None and not resource.preferred:
            # By-name selection picks the preferred version; callbacks decide on their own.
            return False
        # Older clusters do not report singular names of core resources; kubectl then derives
        # them from the kind, and so do we.
        singular = resource.singular or resource.kind.lower()
        if self.kind is not None and resource.kind != self.kind:
            return False
        if self.plural is not None and resource.plural != self.plural:
            return False
        if self.singular is not None and singular != self.singular:
            return False
        if self.shortcut is not None and self.shortcut not in resource.shortcuts:
            return False
        if self.category is not None and self.category not in resource.categories:
            return False
        if isinstance(self.any_name, str):
            name = self.any_name
            if not (
                name == resource.plural
                or name == singular
                or name == resource.kind
                or name in resource.shortcuts
            ):
                return False
        return self.callback is None or bool(self.callback(resource))

    def select(self, resources: Collection[Resource]) -> set[Resource]:
        """The resources this selector serves among the discovered ones."""
        selected = {resource for resource in resources if self.check(resource)}
        if self.is_specific:
            # As in kubectl, the core API shadows other groups: "pods" means v1 pods, not
            # pods.metrics.k8s.io (unless a group was given, and then there is nothing to shadow).
            core = {resource for resource in selected if resource.group == ""}
            if core:
                selected = core
        else:
            selected = {resource for resource in selected if not _is_event(resource)}
        return selected

    def is_ambiguous(self, resources: Collection[Resource]) -> bool:
        """Whether a by-name selector matches several different resources (not just versions)."""
        if not self.is_specific:
            return False
        selected = self.select(resources)
        return len({(resource.group, resource.plural) for resource in selected}) > 1


def _parse_positional(
    arg1: str | Marker | ResourceCallback | None,
    arg2: str | Marker | None,
    arg3: str | Marker | None,
) -> tuple[str | None, str | None, str | Marker | None, ResourceCallback | None]:
    """Positional arguments → (group, version, name-or-marker, callback)."""
    args = [arg1, arg2, arg3]
    while args and args[-1] is None:
        args.pop()
    if any(arg is None for arg in args):
        raise TypeError(f"Resource arguments cannot have gaps (None) in the middle: {args!r}.")

    if args and callable(args[0]) and not isinstance(args[0], (str, Marker)):
        if len(args) > 1:
            raise TypeError(
                "A callable resource selector must be the only positional argument; "
                "combine it with group=, version=, etc. by keywords instead."
            )
        return None, None, None, args[0]

    if not args:
        return None, None, None, None

    *prefix, name = args
    if not isinstance(name, (str, Marker)):
        raise TypeError(
            f"Resource arguments must be strings or EVERYTHING (or one callable), got {name!r}."
        )
    parts: list[str] = []
    for arg in prefix:
        if isinstance(arg, Marker):
            raise TypeError(f"{arg!r} can only be the last (rightmost) resource argument.")
        if not isinstance(arg, str):
            raise TypeError(f"The API group/version must be a string, got {arg!r}.")
        parts.append(arg)

    if isinstance(name, str):
        if not name:
            raise ValueError("The resource name cannot be an empty string.")
        if "/" in name:
            raise ValueError(
                f"The resource name cannot contain a slash: {name!r}. "
                "Pass the group/version and the name as separate arguments."
            )

    if not parts:
        if isinstance(name, Marker):
            return None, None, name, None
        # kubectl style: "name", "name.group", "name.version", "name.version.group".
        if "." not in name:
            return None, None, name, None
        head, rest = name.split(".", 1)
        if not head or not rest:
            raise ValueError(f"Malformed resource specification: {name!r}.")
        version_part, _, group_part = rest.partition(".")
        if _VERSION_RE.fullmatch(version_part):
            return group_part, version_part, head, None
        return rest, None, head, None

    if len(parts) == 1:
        first = parts[0]
        if "/" in first:
            group, version = first.split("/", 1)
            if not version or "/" in version:
                raise ValueError(f"Malformed API group/version: {first!r}.")
            return group, version, name, None
        if first == "v1":
            return "", "v1", name, None  # the legacy core API has no group name
        return first, None, name, None

    group, version = parts
    if "/" in group or "/" in version:
        raise ValueError(
            f"With three resource arguments, the group and the version must be separate: "
            f"{group!r}, {version!r}."
        )
    if not version:
        raise ValueError("The API version cannot be an empty string.")
    return group, version, name, None


# ---------------------------------------------------------------------------------- resolving


@dataclasses.dataclass(frozen=True)
class ServedResources:
    """What to serve, per kind of handler, after resolving all selectors against discovery.

    ``watched`` is what needs a list+watch stream at all (everything but admission webhooks).
    """

    watching: frozenset[Resource] = frozenset()
    changing: frozenset[Resource] = frozenset()
    spawning: frozenset[Resource] = frozenset()
    indexing: frozenset[Resource] = frozenset()
    webhooks: frozenset[Resource] = frozenset()
    reconciling: frozenset[Resource] = frozenset()
    """Resources of ``on.reconcile`` handlers (trioperator's own)."""
    relaying: frozenset[Resource] = frozenset()
    """Resources owned or watched by reconcile handlers: their events enqueue other objects."""
    warnings: tuple[str, ...] = ()

    @property
    def watched(self) -> frozenset[Resource]:
        watched = self.watching | self.changing | self.spawning | self.indexing
        return watched | self.reconciling | self.relaying


def _names(resources: Iterable[Resource]) -> str:
    return ", ".join(sorted(str(resource) for resource in resources))


def discovery_scope(
    selectors: Iterable[Selector], *, extra_groups: Iterable[str] = ()
) -> DiscoveryScope | None:
    """The group versions the selectors can match: what the discovery needs to scan.

    ``None`` (every group) as soon as one selector has no group: a name (which the core group
    shadows, and which may be ambiguous across groups), a category, a callback, ``EVERYTHING``.
    A selector without a version needs every version of its group (the preferred one is only
    known from the group's listing). ``extra_groups`` are needed in full as well (e.g. peering).
    """
    scope: set[tuple[str, str | None]] = {(group, None) for group in extra_groups}
    for selector in selectors:
        if selector.group is None:
            return None
        scope.add((selector.group, selector.version))
    return frozenset(scope)


def resolve_resources(
    resources: Collection[Resource],
    *,
    watching: Iterable[Selector] = (),
    changing: Iterable[Selector] = (),
    spawning: Iterable[Selector] = (),
    indexing: Iterable[Selector] = (),
    webhooks: Iterable[Selector] = (),
    reconciling: Iterable[Selector] = (),
    relaying: Iterable[Selector] = (),
) -> ServedResources:
    """Resolve the selectors of each handler kind against the discovered resources.

    Ambiguous selectors serve nothing. Streams need ``list`` and ``watch``; changing handlers
    and daemons/timers also need ``patch`` (for progress, diff-base and finalizers). Resources
    that fail these requirements are left out, and every exclusion comes with a warning.
    """
    groups = {
        "watching": list(watching),
        "changing": list(changing),
        "spawning": list(spawning),
        "indexing": list(indexing),
        "webhooks": list(webhooks),
        "reconciling": list(reconciling),
        "relaying": list(relaying),
    }
    warnings: list[str] = []

    ambiguous: dict[Selector, set[Resource]] = {}
    for selectors in groups.values():
        for selector in selectors:
            if selector not in ambiguous and selector.is_ambiguous(resources):
                ambiguous[selector] = selector.select(resources)
    for selector, matched in ambiguous.items():
        warnings.append(
            f"Ambiguous resources will not be served (try specifying API groups): "
            f"{selector!r} => {_names(matched)}"
        )

    selected: dict[str, set[Resource]] = {}
    for kind, selectors in groups.items():
        selected[kind] = set()
        for selector in selectors:
            if selector not in ambiguous:
                selected[kind] |= selector.select(resources)

    def watchable(resource: Resource) -> bool:
        return {"list", "watch"} <= resource.verbs

    needs_stream = selected["watching"] | selected["changing"] | selected["spawning"]
    needs_stream |= selected["indexing"] | selected["reconciling"] | selected["relaying"]
    unwatchable = {resource for resource in needs_stream if not watchable(resource)}
    if unwatchable:
        warnings.append(f"Non-watchable resources will not be served: {_names(unwatchable)}")

    needs_patch = selected["changing"] | selected["spawning"] | selected["reconciling"]
    needs_patch -= unwatchable
    unpatchable = {resource for resource in needs_patch if "patch" not in resource.verbs}
    if unpatchable:
        warnings.append(
            f"Non-patchable resources will not be served by resource-changing handlers, "
            f"daemons, timers, or reconcilers: {_names(unpatchable)}"
        )

    return ServedResources(
        watching=frozenset(selected["watching"] - unwatchable),
        changing=frozenset(selected["changing"] - unwatchable - unpatchable),
        spawning=frozenset(selected["spawning"] - unwatchable - unpatchable),
        indexing=frozenset(selected["indexing"] - unwatchable),
        webhooks=frozenset(selected["webhooks"]),
        reconciling=frozenset(selected["reconciling"] - unwatchable - unpatchable),
        relaying=frozenset(selected["relaying"] - unwatchable),
        warnings=tuple(warnings),
    )
