"""The version of trioperator: the git tag it comes from (hatch-vcs, see pyproject.toml).

A wheel carries it in ``_build_version.py``, which the build writes into the wheel only
(``hatch_build.py``), never into the source tree: building a wheel from a checkout must not
change what the checkout's processes say. A checkout (an editable install) says the version
its install derived from git, kept in the install's metadata; a tree that was never installed
says ``0+unknown``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

__all__ = ["__version__"]


def _version() -> str:
    # A checkout may still hold a _build_version.py written by an older build: not its own.
    if not (Path(__file__).parent.parent / ".git").exists():
        try:
            # By name: the module exists in wheels only, where import-linter never looks.
            built = importlib.import_module("trioperator._build_version")
        except ImportError:
            pass
        else:
            return str(built.__version__)
    return _installed() or "0+unknown"


def _installed() -> str | None:
    """The version in the install's metadata (``trioperator-*.dist-info/METADATA``), read
    directly: importlib.metadata would import email and more (tests/integration/
    test_lazy_imports.py), and an editable install's entry is found the same way."""
    for entry in sys.path:
        try:
            infos = sorted(Path(entry or ".").glob("trioperator-*.dist-info"))
        except OSError:
            continue
        for info in infos:
            try:
                with (info / "METADATA").open(encoding="utf-8") as metadata:
                    for line in metadata:
                        if line.startswith("Version:"):
                            return line.removeprefix("Version:").strip()
                        if not line.strip():
                            break  # the headers end here
            except OSError:
                continue
    return None


__version__ = _version()
