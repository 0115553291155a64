"""Reading the documentation's Markdown and the site's generator from the tests."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# The line that marks the next fenced block as a part of a module (compiled, not executed).
FRAGMENT = "<!-- fragment -->"

_FENCE_OPEN = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    fragment: bool

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with their language and whether the last
    non-blank line before the fence is the fragment marker."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    previous = ""
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if match is None:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            # A fence indented in a list item: its lines carry the same indentation.
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        blocks.append(
            Block(
                path, start + 1, match["lang"].lower(), "\n".join(body) + "\n", previous == FRAGMENT
            )
        )
        previous = ""
        i += 1
    return blocks


def documentation_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def load_reference() -> ModuleType:
    """scripts/docsite/reference.py, the generator of the configuration reference."""
    name = "trioperator_docsite_reference"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts/docsite/reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
