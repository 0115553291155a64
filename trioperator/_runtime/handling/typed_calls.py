"""Handlers that take typed values: ``spec: WidgetSpec`` decoded before the call.

A handler opts in with its annotations: a ``spec``, ``status``, ``old`` or ``new`` parameter
annotated with a ``msgspec.Struct`` class (optionally ``| None``), or ``body``/``old``/``new``
annotated with a resource model (``_engine/models.py``). The decorator then registers a
wrapper that decodes those values (strictly, with ``msgspec.convert``) and calls the function
with them; a function without such annotations is registered as it is, so dict handlers (and
every Kopf handler) pay nothing, not even a check per call.

A value that does not decode is the object's fault, not the handler's: the handler is not
called, the problem (which field, why) is logged once by the usual "failed permanently" line,
and a ``Warning`` Event is posted on the object (if it exists: not under admission of a new
one, where the rejection tells the client). A permanent failure is not retried: the handler is
called again when the object changes (update and field handlers), not in a loop. ``old`` and
``new`` are ``None`` where there is no old or new object (or field), whatever their annotation.

A Struct returned by the handler (a result stored in the status) or put into its ``patch``
(``patch['status'] = WidgetStatus(...)``) is turned into plain dicts after the call.

The wrappers live here (not in ``_engine``) because they post Events; like ``_engine/models``
this module imports neither trio nor asyncio, which would sway the async flavor detection of
the handlers it wraps.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from trioperator._engine.errors import PermanentError
from trioperator._engine.filters import FieldPath
from trioperator._engine.models import (
    SpecDecodeError,
    decode,
    encode_if_struct,
    model_of,
    struct_type,
)
from trioperator._runtime.handling.posting import PostingUnavailableError, warn

__all__ = ["INVALID_REASON", "typed_handler"]

INVALID_REASON: Final = "InvalidSpec"
"""The reason of the Warning Event posted on an object whose values do not decode."""

_TYPED_KWARGS: Final = ("spec", "status", "old", "new", "body")

Mode = Literal["whole", "spec", "status", "value"]


@dataclasses.dataclass(frozen=True)
class _Decoding:
    kwarg: str
    target: type[Any]
    optional: bool
    mode: Mode
    """whole: the whole value; spec/status: that part of a body; value: the value itself."""


def typed_handler(fn: Callable[..., Any], *, field: FieldPath | None) -> Callable[..., Any] | None:
    """A wrapper of ``fn`` that decodes the values its annotations ask for, or ``None`` if it
    asks for none. ``field``: the handler's field (``old``/``new`` are then that field's)."""
    raw = getattr(fn, "__annotations__", None)
    if not isinstance(raw, Mapping) or not any(name in raw for name in _TYPED_KWARGS):
        return None
    plan = [
        decoding
        for name in _TYPED_KWARGS
        if name in raw
        and (decoding := _decoding(name, _evaluate(fn, raw[name]), field=field)) is not None
    ]
    if not plan:
        return None
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(**kwargs: Any) -> Any:
            _decode_kwargs(plan, kwargs)
            result = await fn(**kwargs)
            return _encode_results(result, kwargs)

        return async_wrapper

    @functools.wraps(fn)
    def sync_wrapper(**kwargs: Any) -> Any:
        _decode_kwargs(plan, kwargs)
        result = fn(**kwargs)
        return _encode_results(result, kwargs)

    return sync_wrapper


def _evaluate(fn: Callable[..., Any], annotation: Any) -> Any:
    """An annotation as a type (``from __future__ import annotations`` keeps strings); one
    that cannot be evaluated (a name imported only for type checkers) asks for nothing."""
    namespace = dict(getattr(inspect.unwrap(fn), "__globals__", {}))
    for _ in range(2):  # "Spec", or '"Spec"' when quoted under the __future__ import
        if not isinstance(annotation, str):
            return annotation
        try:
            annotation = eval(annotation, namespace)  # as typing.get_type_hints does
        except Exception:  # any failure means: not a type we decode into
            return None
    return None if isinstance(annotation, str) else annotation


def _decoding(name: str, annotation: Any, *, field: FieldPath | None) -> _Decoding | None:
    if annotation is None:
        return None
    found = struct_type(annotation)
    if found is None:
        return None
    target, optional = found
    if model_of(target) is not None:
        # A whole object: the body, or old/new of a handler without a field.
        if name == "body" or (name in ("old", "new") and field is None):
            return _Decoding(name, target, optional, "whole")
        raise TypeError(
            f"{name}: {target.__name__} is a whole resource; annotate {name} with its spec "
            f"type (or body/old/new with the resource)."
        )
    if name == "body":
        raise TypeError(f"body can only be annotated with a resource model, not {target!r}.")
    if name in ("old", "new"):
        return _Decoding(name, target, optional, "value" if field is not None else "spec")
    return _Decoding(name, target, optional, "spec" if name == "spec" else "status")


def _decode_kwargs(plan: list[_Decoding], kwargs: dict[str, Any]) -> None:
    body = kwargs.get("body")
    for decoding in plan:
        value = kwargs.get(decoding.kwarg)
        what = decoding.kwarg
        if decoding.mode in ("spec", "status"):
            part = decoding.mode
            holder = body if decoding.kwarg in ("spec", "status") else value
            if decoding.kwarg in ("old", "new"):
                if holder is None:  # no old object on creation, no new one on deletion
                    kwargs[decoding.kwarg] = None
                    continue
                what = f"{decoding.kwarg} spec"
            value = holder.get(part) if holder is not None else None
            if value is None and not decoding.optional and part == "status":
                value = {}  # no status yet: the status type's defaults
        elif decoding.mode == "whole" and value is not None:
            value = dict(value)
        elif decoding.kwarg in ("old", "new") and value is None:
            kwargs[decoding.kwarg] = None  # a field that is not there (yet, or any more)
            continue
        if value is None and decoding.optional:
            kwargs[decoding.kwarg] = None
            continue
        try:
            kwargs[decoding.kwarg] = decode(value, decoding.target, what=what)
        except SpecDecodeError as exc:
            _report(body, exc)
            raise PermanentError(f"{exc}; the handler waits for the object to change.") from None


def _report(body: Any, exc: SpecDecodeError) -> None:
    # An object under admission may not exist yet: no uid, nothing to post an Event about
    # (the rejected admission says it to the client instead).
    metadata = body.get("metadata") if body is not None else None
    if not isinstance(metadata, Mapping) or not metadata.get("uid"):
        return
    try:
        warn(body, reason=INVALID_REASON, message=str(exc))
    except PostingUnavailableError:
        pass  # outside of an operator (a handler called directly): the log line says it all


def _encode_results(result: Any, kwargs: Mapping[str, Any]) -> Any:
    patch = kwargs.get("patch")
    if isinstance(patch, dict):
        for key in ("spec", "status"):
            if key in patch:
                patch[key] = encode_if_struct(patch[key])
    return encode_if_struct(result)
