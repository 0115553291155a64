"""The configuration and API reference cannot fall behind the code.

The reference pages are generated from the code (scripts/docsite/reference.py); these tests make
sure that what they are generated from is complete: every setting and every option has a
description, every environment variable the package reads is listed, and every public name has
a docstring.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import trioperator
import trioperator.conditions
import trioperator.on
import trioperator.testing
import trioperator.typed
from trioperator._engine.settings import OperatorSettings
from trioperator._util.environment import VARIABLES
from trioperator.cli import app

from tests.docs.markdown import ROOT, load_reference

reference = load_reference()
PACKAGE = ROOT / "trioperator"


# ------------------------------------------------------------------------------ settings


def test_every_settings_group_is_in_the_reference() -> None:
    groups = [group.name for group in reference.settings_groups()]
    assert groups == [field.name for field in dataclasses.fields(OperatorSettings)]
    assert "queueing" in groups
    assert "networking" in groups


def test_every_settings_group_has_a_description() -> None:
    undescribed = [group.name for group in reference.settings_groups() if not group.description]
    assert undescribed == [], "Write a docstring for these groups' classes: " + repr(undescribed)


def test_every_setting_has_a_description() -> None:
    undescribed = [
        setting.path
        for group in reference.settings_groups()
        for setting in group.settings
        if not setting.description.strip()
    ]
    assert undescribed == [], (
        "Write a docstring right below each of these settings' fields: " + ", ".join(undescribed)
    )


def test_the_settings_page_shows_the_code_defaults() -> None:
    page = reference.settings_page()
    defaults = OperatorSettings()
    for group in reference.settings_groups():
        assert f"## `settings.{group.name}`" in page
        for setting in group.settings:
            name = setting.path.rsplit(".", 1)[1]
            value = getattr(getattr(defaults, group.name), name)
            if isinstance(value, int | float | str | bool | type(None)):
                # The row of this setting shows its type and the value a new settings has.
                row = f"| `{name}` | `{setting.type}` | `{value!r}` |"
                assert row in page, setting.path


def test_attribute_docstrings_are_read_from_the_source() -> None:
    @dataclasses.dataclass
    class Sample:
        described: int = 1
        """The one with a docstring."""
        bare: int = 2

    docs = reference.attribute_docstrings(Sample)
    assert docs == {"described": "The one with a docstring."}


# ------------------------------------------------------------------------------ command line


def test_every_command_and_option_is_in_the_reference() -> None:
    commands = {command.name: command for command in reference.commands()}
    assert {"run", "freeze", "resume", "rbac", "crd"} <= set(commands)
    assert set(commands) == {name for name in app if not name.startswith("-")}
    run_options = {name for option in commands["run"].options for name in option.names}
    assert {
        "-n",
        "--namespace",
        "-A",
        "--all-namespaces",
        "--log-format",
        "--shards",
    } <= run_options
    assert "--no-log-prefix" in run_options


def test_every_command_and_option_has_a_description() -> None:
    undescribed = [
        f"{command.name} {option.names[0]}"
        for command in reference.commands()
        for option in command.options
        if not option.description.strip()
    ] + [command.name for command in reference.commands() if not command.description.strip()]
    assert undescribed == [], "Describe them in the commands' docstrings: " + ", ".join(undescribed)


def test_the_documented_environment_variables_set_the_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each flag, set through the variable the reference names, reaches the command as true.
    checked = 0
    for command in reference.commands():
        for option in command.options:
            if option.type != "bool" or option.env is None:
                continue
            with monkeypatch.context() as patch:
                patch.setenv(option.env, "true")
                _, bound, *_ = app.parse_args([command.name, *_required(command)])
            long_names = [n for n in option.names if n.startswith("--")]
            parameter = long_names[0].removeprefix("--").replace("-", "_")
            assert bound.arguments.get(parameter) is True, (command.name, option.env)
            checked += 1
    assert checked >= 5


def test_only_run_and_the_peering_of_freeze_and_resume_name_variables() -> None:
    named = {
        (command.name, option.env)
        for command in reference.commands()
        for option in command.options
        if option.env is not None and command.name != "run"
    }
    assert named == {("freeze", "TRIOPERATOR_PEERING"), ("resume", "TRIOPERATOR_PEERING")}


def _required(command: object) -> list[str]:
    """Values for the options without a default (freeze's --peering and --lifetime) and for
    the positionals (new's NAME; run's files take one too, harmlessly: nothing is run)."""
    args: list[str] = []
    positionals: list[str] = []
    for option in command.options:  # type: ignore[attr-defined]
        if option.default:
            continue
        if option.names[0].startswith("-"):
            args += [option.names[0], "5" if option.type == "int" else "x"]
        else:
            positionals.append("x")
    return [*positionals, *args]


# ------------------------------------------------------------------------------ environment


def _environment_reads() -> dict[str, list[str]]:
    """Every variable the package reads by name: ``os.environ[...]``, ``os.environ.get(...)``,
    ``os.getenv(...)`` and ``env.get(...)`` on a mapping named ``env``/``environ``, with the name
    as a string or a module constant. Maps each name to where it is read."""
    found: dict[str, list[str]] = {}
    unresolved: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            key: ast.expr | None = None
            if isinstance(node, ast.Subscript) and _is_environment(node.value):
                if isinstance(node.ctx, ast.Load):
                    key = node.slice
            elif isinstance(node, ast.Call) and node.args:
                func = node.func
                environment_get = (
                    isinstance(func, ast.Attribute)
                    and func.attr == "get"
                    and _is_environment(func.value)
                )
                if environment_get or _name(func) == "getenv":
                    key = node.args[0]
            if key is None:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.setdefault(key.value, []).append(where)
            elif isinstance(key, ast.Name) and key.id in constants:
                found.setdefault(constants[key.id], []).append(where)
            else:
                unresolved.append(where)
    assert unresolved == [], f"environment reads whose variable cannot be told: {unresolved}"
    return found


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_environment(node: ast.expr) -> bool:
    return _name(node) in ("environ", "env")


def _registered() -> set[str]:
    return {name.strip() for var in VARIABLES for name in var.name.split(",")}


def test_every_environment_variable_read_is_in_the_registry() -> None:
    reads = _environment_reads()
    assert {"KUBECONFIG", "POD_ID", "POD_NAMESPACE"} <= set(reads)  # the scan finds reads
    missing = {name: where for name, where in reads.items() if name not in _registered()}
    assert missing == {}, (
        "Add these to trioperator/_util/environment.py (the documented list): " + repr(missing)
    )


def test_the_registry_lists_only_variables_that_are_read() -> None:
    reads = _environment_reads()
    stale = [
        name.strip()
        for var in VARIABLES
        if not var.indirect
        for name in var.name.split(",")
        if name.strip() not in reads
    ]
    assert stale == [], (
        f"read nowhere in trioperator/ (remove them, or mark them indirect): {stale}"
    )


def test_the_environment_page_lists_every_variable() -> None:
    page = reference.environment_page()
    for name in _registered():
        assert f"`{name}`" in page


# ------------------------------------------------------------------------------ API


def _public_objects() -> list[tuple[str, object]]:
    names: list[tuple[str, object]] = []
    for module, exported in [
        (trioperator, trioperator.__all__),
        (trioperator.testing, trioperator.testing.__all__),
        (trioperator.conditions, trioperator.conditions.__all__),
        (trioperator.typed, getattr(trioperator.typed, "__all__", [])),
        (
            trioperator.on,
            [
                name
                for name, value in vars(trioperator.on).items()
                if inspect.isfunction(value)
                and value.__module__ == "trioperator.on"
                and not name.startswith("_")
            ],
        ),
    ]:
        names += [(f"{module.__name__}.{name}", getattr(module, name)) for name in exported]
    return names


def test_every_public_class_and_function_has_a_docstring() -> None:
    public = _public_objects()
    assert len(public) > 150
    undocumented = []
    for name, obj in public:
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = obj.__doc__
        inherited = inspect.isclass(obj) and any(doc is base.__doc__ for base in obj.__mro__[1:])
        if not (doc or "").strip() or inherited:
            undocumented.append(name)
    assert undocumented == [], "Write their docstrings: " + ", ".join(undocumented)


def test_the_api_reference_pages_name_only_public_objects() -> None:
    # A page's `::: trioperator.X` that names nothing would render empty (or fail the build).
    pages = sorted((ROOT / "docs" / "reference" / "api").glob("*.md"))
    assert pages
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("::: "):
                target = line.removeprefix("::: ").strip()
                assert _resolves(target), f"{Path(page).name}: {target}"


def test_every_public_name_is_in_the_api_reference() -> None:
    directives = {
        line.removeprefix("::: ").strip()
        for page in (ROOT / "docs" / "reference" / "api").glob("*.md")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("::: ")
    }
    shown = {target.removeprefix("trioperator.") for target in directives}
    # The handlers page documents the module kopf.on, whose functions kopf re-exports.
    shown |= {name for name, value in vars(trioperator.on).items() if inspect.isfunction(value)}
    shown.add("__version__")  # a string, named in the text of the "Running" page
    missing = sorted(set(trioperator.__all__) - shown)
    assert missing == [], "Add them to a page in docs/reference/api/: " + ", ".join(missing)
    assert {"trioperator.testing", "trioperator.typed", "trioperator.conditions"} <= directives


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False
