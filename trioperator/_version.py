"""The version of the installed distribution: the git tag it was built from (hatch-vcs, see
pyproject.toml), read from the package's metadata so that no generated file is needed."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trioperator")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
