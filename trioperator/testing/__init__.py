"""Testing operators without a cluster: an in-process fake Kubernetes API with fault injection.

See :class:`FakeAPI`.
"""

from __future__ import annotations

from trioperator.testing._fakestore import ResourceDef, StatusError
from trioperator.testing.fakeapi import FakeAPI, Injection, RecordedRequest

__all__ = ["FakeAPI", "Injection", "RecordedRequest", "ResourceDef", "StatusError"]
