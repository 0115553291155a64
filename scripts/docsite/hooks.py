"""mkdocs hooks of the documentation site (mkdocs.yml: ``hooks:``).

- The configuration reference pages are generated from the code at every build
  (``reference.py``), so they cannot drift from it.
- The pages link to the repository's files outside docs/ (``../examples/...``), which read
  well on GitHub but are not part of the site: such links are checked to exist (a missing one
  is a warning, so an error under ``--strict``) and pointed at the repository's web view.
"""

from __future__ import annotations

import importlib.util
import logging
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
log = logging.getLogger("mkdocs.plugins.trioperator")


def _load_reference() -> Any:
    name = "trioperator_docsite_reference"
    spec = importlib.util.spec_from_file_location(name, HERE / "reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = _load_reference()


def on_files(files: Files, config: Any) -> Files:
    for uri, make in reference.PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files


# [text](target) and [text](target "title"); images too. Targets with a scheme or only an
# anchor are left to mkdocs (internal ones are validated by it).
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?((?:\s+\"[^\"]*\")?\))")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    repo_url = str(config.get("repo_url") or "").rstrip("/")
    page_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return match.group(0)
        joined = posixpath.normpath(posixpath.join("docs", page_dir, target))
        if joined.startswith("docs/") or joined == "docs":
            return match.group(0)  # inside the site: mkdocs validates it
        path = ROOT / joined
        if not path.exists():
            log.warning(f"{page.file.src_uri}: the link {target} names no file of the repository")
            return match.group(0)
        kind = "tree" if path.is_dir() else "blob"
        anchor = match.group(3) or ""
        return f"{match.group(1)}{repo_url}/{kind}/main/{joined}{anchor}{match.group(4)}"

    # Links inside fenced code are code, not links.
    parts: list[str] = []
    last = 0
    for fence in _FENCE.finditer(markdown):
        parts.append(_LINK.sub(rewrite, markdown[last : fence.start()]))
        parts.append(fence.group(0))
        last = fence.end()
    parts.append(_LINK.sub(rewrite, markdown[last:]))
    return "".join(parts)
