"""Identifiers shared across the engine."""

from __future__ import annotations

from typing import NewType

HandlerId = NewType("HandlerId", str)
"""A handler's id: the function's qualified name by default, ``parent/child`` for sub-handlers,
``fn/spec.field`` for field handlers. It keys the progress records on the cluster."""
