"""The configuration reference, written from the code when the site is built.

Three pages: every setting (the dataclasses under ``OperatorSettings``: name, type, default and
the attribute's docstring), every option of every command (read from the cyclopts app of
``trioperator.cli``, with the help its docstrings give), and every environment variable
(``trioperator._util.environment.VARIABLES``). ``hooks.py`` adds them to the site;
tests/docs/test_reference.py checks that nothing in them is undescribed.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class Setting:
    path: str  # "settings.queueing.max_pending"
    type: str
    default: str
    description: str


@dataclasses.dataclass(frozen=True)
class Group:
    name: str  # "queueing"
    cls: type[Any]
    description: str
    settings: tuple[Setting, ...]


def class_docstring(cls: type[Any]) -> str:
    """The docstring written in the class's source (not the signature that ``dataclass``
    puts into ``__doc__`` when there is none)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    return ast.get_docstring(node) or ""


def attribute_docstrings(cls: type[Any]) -> dict[str, str]:
    """The string literal right after each annotated attribute in the class's source (the
    convention that griffe, Sphinx and PEP 257's "attribute docstrings" read)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        made = field.default_factory()
        return f"{type(made).__name__}()"
    return "(required)"


def settings_groups() -> list[Group]:
    """The groups of ``OperatorSettings`` in their declared order, with their settings."""
    from trioperator._engine.settings import OperatorSettings

    groups: list[Group] = []
    for group_field in dataclasses.fields(OperatorSettings):
        cls = group_field.default_factory  # every group is made by its class
        assert isinstance(cls, type), group_field.name
        docs = attribute_docstrings(cls)
        settings = tuple(
            Setting(
                path=f"settings.{group_field.name}.{field.name}",
                type=str(field.type),
                default=_default(field),
                description=docs.get(field.name, ""),
            )
            for field in dataclasses.fields(cls)
            if not field.name.startswith("_")
        )
        groups.append(Group(group_field.name, cls, class_docstring(cls), settings))
    return groups


def _cell(text: str) -> str:
    """Markdown for one table cell: one line, its pipes escaped except in code spans (where
    the tables extension ignores them, and a backslash would show)."""
    parts = " ".join(text.split()).split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


def _code(text: str) -> str:
    """A code span in a table cell, on one line."""
    return f"`{' '.join(text.split())}`"


def settings_page() -> str:
    lines = [
        "# Settings",
        "",
        "<!-- Generated from trioperator/_engine/settings.py and trioperator/_client/settings.py "
        "when the site is built (scripts/docsite/reference.py); edit the docstrings there. -->",
        "",
        "Every setting of `OperatorSettings`, grouped as in Kopf. Change them in an "
        "`@kopf.on.startup` handler, which gets the operator's `settings`:",
        "",
        "<!-- fragment -->",
        "```python",
        "@kopf.on.startup()",
        "def configure(settings: kopf.OperatorSettings, **_):",
        "    settings.queueing.max_pending = 500",
        "    settings.networking.request_timeout = 60",
        "```",
        "",
        "or pass `settings=OperatorSettings(...)` to `kopf.operator()` / `kopf.run()` when "
        "embedding. Some values are checked when set: a wrong one raises `ValueError` in the "
        "startup handler, before anything connects.",
        "",
    ]
    for group in settings_groups():
        lines += [f"## `settings.{group.name}`", ""]
        if group.description:
            lines += [group.description, ""]
        lines += ["| setting | type | default | description |", "|---|---|---|---|"]
        for s in group.settings:
            name = s.path.rsplit(".", 1)[1]
            lines.append(
                f"| `{name}` | {_code(s.type)} | {_code(s.default)} | {_cell(s.description)} |"
            )
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ command line


@dataclasses.dataclass(frozen=True)
class Option:
    names: tuple[str, ...]  # ("-n", "--namespace") or ("PATHS",) for a positional
    type: str
    default: str
    description: str
    env: str | None


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    description: str
    options: tuple[Option, ...]


def _type_name(hint: Any) -> str:
    text = getattr(hint, "__name__", None) if isinstance(hint, type) else None
    return text or str(hint).replace("typing.", "")


def commands() -> list[Command]:
    """Every command of the ``trioperator`` app, with its parameters as cyclopts parses them
    (so the names, negatives and help are the ones ``--help`` prints)."""
    from trioperator.cli import app

    found: list[Command] = []
    for name in sorted(_command_names(app)):
        sub = app[name]
        arguments = sub.assemble_argument_collection(parse_docstring=True)
        options: list[Option] = []
        for argument in arguments:
            if not argument.parse or argument.parameter.show is False:
                continue
            positional = argument.field_info.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.VAR_POSITIONAL,
            )
            if positional:
                names: tuple[str, ...] = (argument.field_info.name.upper(),)
            else:
                # The negatives of flags (--no-log-prefix), not those of lists (--empty-x).
                negatives = tuple(n for n in argument.negatives if n.startswith("--no-"))
                names = tuple(argument.positives) + negatives
            default = argument.field_info.default
            shown_default = "" if default is inspect.Parameter.empty else repr(default)
            # A variable named on the option itself (freeze's --peering), else the command's
            # Env source (run's only), which matches a variable against every name of an
            # option; the long one is what users write (TRIOPERATOR_NAMESPACE, not _N).
            longs = [n for n in argument.positives if n.startswith("--")]
            env = None
            if argument.parameter.env_var:
                env = argument.parameter.env_var[0]
            elif longs and not positional and _reads_environment(sub):
                env = "TRIOPERATOR_" + longs[0].removeprefix("--").replace("-", "_").upper()
            options.append(
                Option(
                    names=names,
                    type=_type_name(argument.hint),
                    default=shown_default,
                    description=inspect.cleandoc(argument.parameter.help or ""),
                    env=env,
                )
            )
        # The docstring's prose; its "Parameters" section is the table below.
        summary = inspect.cleandoc(sub.help or "").split("\nParameters\n", 1)[0].strip()
        found.append(Command(name, summary, tuple(options)))
    return found


def _reads_environment(command: Any) -> bool:
    """Whether the command takes its options from ``TRIOPERATOR_<OPTION>`` (cyclopts' Env)."""
    from cyclopts.config import Env

    return any(isinstance(source, Env) for source in command.app_stack.resolve("_config") or ())


def _command_names(app: Any) -> Iterator[str]:
    for name in app:
        if name.startswith("-"):  # --help, --version
            continue
        yield name


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "<!-- Generated from trioperator/cli.py when the site is built "
        "(scripts/docsite/reference.py); edit the docstrings there. -->",
        "",
        "`trioperator COMMAND [OPTIONS]` (or `python -m trioperator ...`). "
        "`trioperator --version` prints the version, `trioperator COMMAND --help` the help "
        "below. Every option of `run` can also be given as an environment variable "
        "`TRIOPERATOR_<OPTION>` (its long name in capitals, `-` as `_`), and the peering of "
        "`freeze` and `resume` as `TRIOPERATOR_PEERING` (the column below); the command line "
        "wins. Wrong or conflicting options exit with code 2 before anything connects.",
        "",
    ]
    for command in commands():
        lines += [f"## `trioperator {command.name}`", "", command.description, ""]
        lines += ["| option | type | default | environment | description |"]
        lines += ["|---|---|---|---|---|"]
        for o in command.options:
            names = ", ".join(f"`{n}`" for n in o.names)
            if o.default:
                default = _code(o.default)
            else:  # an option without a default must be given; a positional may be left out
                default = "*required*" if o.names[0].startswith("-") else ""
            env = f"`{o.env}`" if o.env else ""
            lines.append(
                f"| {names} | {_code(o.type)} | {default} | {env} | {_cell(o.description)} |"
            )
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ environment


def environment_page() -> str:
    from trioperator._util.environment import VARIABLES

    lines = [
        "# Environment variables",
        "",
        "<!-- Generated from trioperator/_util/environment.py when the site is built; "
        "tests/docs/test_reference.py checks that it lists every variable the code reads. -->",
        "",
        "Every environment variable trioperator reads. Nothing else in the environment "
        "changes its behaviour (the client libraries it can log in through, `kubernetes` and "
        "`pykube-ng`, read their own).",
        "",
        "| variable | read by | what it does |",
        "|---|---|---|",
    ]
    for var in VARIABLES:
        names = ", ".join(f"`{n.strip()}`" for n in var.name.split(","))
        lines.append(f"| {names} | {_cell(var.read_by)} | {_cell(var.description)} |")
    lines.append("")
    return "\n".join(lines)


PAGES = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/environment.md": environment_page,
}
