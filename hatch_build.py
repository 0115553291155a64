"""A build hook of hatchling (pyproject.toml: tool.hatch.build.hooks.custom): the wheel gets
``trioperator/_build_version.py`` with the version hatch-vcs derived from git (or from an
sdist's PKG-INFO), written into a temporary file and placed in the wheel only.

Hatch's own version hook writes that file into the source tree, so that building a wheel from a
checkout (scripts/check-wheel, scripts/scaffold-test) changed what the checkout's processes
said their version was. An editable install gets no such file: a checkout says its install's
version (trioperator/_version.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TARGET = "trioperator/_build_version.py"
TEMPLATE = '# Written into the wheel by its build (hatch_build.py).\n__version__ = "{version}"\n'


class VersionIntoWheel(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        self._directory = tempfile.TemporaryDirectory(prefix="trioperator-build-")
        path = Path(self._directory.name) / "_build_version.py"
        path.write_text(TEMPLATE.format(version=self.metadata.version))
        build_data["force_include"][str(path)] = TARGET

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        directory = getattr(self, "_directory", None)
        if directory is not None:
            directory.cleanup()
