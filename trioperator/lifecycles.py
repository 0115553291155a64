"""Kopf's ``kopf.lifecycles``: the built-in lifecycles, under the same names.

A lifecycle decides which of an object's pending handlers run in the current processing
cycle (``kopf.set_default_lifecycle(kopf.lifecycles.one_by_one)``, or
``Operator(lifecycle=...)``). The implementations live in the engine; this module only gives
them their public home.
"""

from __future__ import annotations

from trioperator._engine.lifecycles import LifeCycleFn as LifeCycleFn
from trioperator._engine.lifecycles import all_at_once as all_at_once
from trioperator._engine.lifecycles import asap as asap
from trioperator._engine.lifecycles import get_default_lifecycle as get_default_lifecycle
from trioperator._engine.lifecycles import one_by_one as one_by_one
from trioperator._engine.lifecycles import randomized as randomized
from trioperator._engine.lifecycles import set_default_lifecycle as set_default_lifecycle
from trioperator._engine.lifecycles import shuffled as shuffled

__all__ = [
    "LifeCycleFn",
    "all_at_once",
    "asap",
    "get_default_lifecycle",
    "one_by_one",
    "randomized",
    "set_default_lifecycle",
    "shuffled",
]
