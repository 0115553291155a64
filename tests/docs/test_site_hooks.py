"""The site's hook (scripts/docsite/hooks.py): links to the repository's files outside docs/."""

from __future__ import annotations

import importlib.util
import logging
import sys
from types import ModuleType, SimpleNamespace

import pytest

from tests.docs.markdown import ROOT

REPO = "https://github.com/trioperator/trioperator"


def _hooks() -> ModuleType:
    name = "trioperator_docsite_hooks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts/docsite/hooks.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _render(markdown: str, src_uri: str = "guide/page.md") -> str:
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))
    config = {"repo_url": REPO, "docs_dir": str(ROOT / "docs")}
    result: str = _hooks().on_page_markdown(markdown, page=page, config=config, files=None)
    return result


def test_links_out_of_the_docs_point_at_the_repository() -> None:
    text = "See [the example](../../examples/01-minimal/example.py#L3) and [dir](../../manifests)."
    assert _render(text) == (
        f"See [the example]({REPO}/blob/main/examples/01-minimal/example.py#L3)"
        f" and [dir]({REPO}/tree/main/manifests)."
    )


def test_links_inside_the_docs_and_external_ones_are_left_to_mkdocs() -> None:
    text = "[a](../testing.md#setup) [b](index.md) [c](https://example.com/x) [d](#here)"
    assert _render(text) == text


def test_a_link_to_a_missing_file_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = "[gone](../../examples/no-such-file.py)"
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.trioperator"):
        assert _render(text) == text
    assert "names no file of the repository" in caplog.text
    assert "no-such-file.py" in caplog.text


def test_links_in_code_blocks_are_code() -> None:
    text = "```markdown\n[x](../../examples/no-such-file.py)\n```\n"
    assert _render(text) == text
