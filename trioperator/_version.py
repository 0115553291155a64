"""The version of this build: the git tag it was built from (hatch-vcs, see pyproject.toml).

Each build and install writes it into ``_build_version.py`` (not kept in git); a source tree
that was never built nor installed says ``0+unknown``.
"""

try:
    from trioperator._build_version import __version__ as __version__
except ImportError:  # a source tree that was never built nor installed
    __version__ = "0+unknown"
