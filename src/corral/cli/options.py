"""Options every gnt-* command shares, with Ganeti's names and meanings.

Each ``*_option`` is a click decorator; the Python parameter it adds is named in its
docstring. A bad value is a usage error (exit code 2, as Ganeti's option parser
exits) whose message names the option and the bad item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from corral.cli.keyval import (
    IdentValue,
    KeyValDict,
    merge_ident_keyvals,
    parse_ident_keyval,
    parse_keyval,
)
from corral.errors import ParameterError

__all__ = [
    "GANETI_NOTHING",
    "PRIORITY_BY_NAME",
    "UNITS",
    "FieldSelection",
    "FieldsType",
    "IdentKeyValType",
    "KeyValType",
    "common_list_options",
    "dry_run_option",
    "force_option",
    "ident_keyval_option",
    "json_option",
    "no_headers_option",
    "output_fields_option",
    "print_jobid_option",
    "priority_option",
    "reason_option",
    "resolve_fields",
    "separator_option",
    "submit_option",
    "units_option",
    "yes_do_it_option",
    "yes_no_option",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The line Ganeti's change commands print when given nothing to change.
GANETI_NOTHING = "Please give at least one of the parameters."

#: ``--priority`` names and the opcode priorities they stand for (lower runs first).
PRIORITY_BY_NAME: dict[str, int] = {"low": 10, "normal": 0, "high": -10}

#: ``--units`` choices: human-readable, MiB, GiB, TiB.
UNITS = ("h", "m", "g", "t")


if TYPE_CHECKING:  # click >= 8.2 types ParamType by its value; older clicks are not generic
    _KeyValBase = click.ParamType[KeyValDict]
    _IdentKeyValBase = click.ParamType[tuple[str, IdentValue]]
    _FieldsBase = click.ParamType["FieldSelection"]
else:
    _KeyValBase = _IdentKeyValBase = _FieldsBase = click.ParamType


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name or "value"]
    return "/".join(opts)


def _usage_error(err: ParameterError, ctx: click.Context | None) -> click.UsageError:
    return click.UsageError(err.message, ctx)


# -- parameter types ---------------------------------------------------------------


class KeyValType(_KeyValBase):
    """``key=val,key=val`` (``-B``, ``-N``, ``--node-parameters``) → ``dict``.

    Bare items follow Ganeti: ``no_key`` → False, ``-key`` → None, ``key`` → True.
    """

    name = "KEY=VAL[,...]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> KeyValDict:
        """Parse the option's text; a dict (a default) passes through."""
        if isinstance(value, dict):
            return value
        try:
            return parse_keyval(_option_name(param), str(value))
        except ParameterError as err:
            raise _usage_error(err, ctx) from err


class IdentKeyValType(_IdentKeyValBase):
    """``ident:key=val,...`` (``-H``, ``-D``) → ``(ident, dict | False | None)``.

    Use with ``multiple=True`` (or :func:`ident_keyval_option`, which also merges
    the uses into one dict).
    """

    name = "NAME:KEY=VAL[,...]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, IdentValue]:
        """Parse the option's text; a tuple (a default) passes through."""
        if isinstance(value, tuple):
            return value
        try:
            return parse_ident_keyval(_option_name(param), str(value))
        except ParameterError as err:
            raise _usage_error(err, ctx) from err


@dataclass(frozen=True)
class FieldSelection:
    """The value of ``-o``: the fields named, and whether they extend the defaults."""

    fields: tuple[str, ...]
    #: True when the value started with ``+``: add to the default fields.
    extend: bool = False

    def resolve(self, default: Sequence[str]) -> list[str]:
        """The fields to show given the command's default fields."""
        if self.extend:
            return [*default, *self.fields]
        return list(self.fields)


class FieldsType(_FieldsBase):
    """``-o FIELD,FIELD`` or ``-o +FIELD,...`` → :class:`FieldSelection`."""

    name = "FIELDS"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> FieldSelection:
        """Split the comma-separated list; a leading ``+`` extends the defaults."""
        if isinstance(value, FieldSelection):
            return value
        text = str(value)
        extend = text.startswith("+")
        if extend:
            text = text[1:]
        fields = tuple(text.split(","))
        if any(not field for field in fields):
            raise click.UsageError(
                f"option {_option_name(param)}: empty field name in '{value}';"
                " expected FIELD[,FIELD...] or +FIELD[,FIELD...]",
                ctx,
            )
        return FieldSelection(fields, extend)


def resolve_fields(selection: FieldSelection | None, default: Sequence[str]) -> list[str]:
    """The fields a list command shows: the defaults unless ``-o`` was given."""
    return list(default) if selection is None else selection.resolve(default)


# -- single options ----------------------------------------------------------------


def no_headers_option(fn: F) -> F:
    """``--no-headers``: omit the header line. Parameter ``no_headers: bool``."""
    return click.option(
        "--no-headers", "no_headers", is_flag=True, help="Don't display column headers."
    )(fn)


def separator_option(fn: F) -> F:
    """``--separator SEP``: separate fields with SEP, unpadded. Parameter ``separator``."""
    return click.option(
        "--separator",
        "separator",
        metavar="SEP",
        default=None,
        help="Separator between output fields (default: aligned columns).",
    )(fn)


def output_fields_option(fn: F) -> F:
    """``-o/--output FIELDS``; ``+FIELDS`` adds to the defaults.

    Parameter ``output: FieldSelection | None``; see :func:`resolve_fields`.
    """
    return click.option(
        "-o",
        "--output",
        "output",
        type=FieldsType(),
        default=None,
        help="Comma-separated list of output fields; a leading '+' adds to the defaults.",
    )(fn)


def units_option(fn: F) -> F:
    """``--units h|m|g|t``: unit of sizes. Parameter ``units: str | None``."""
    return click.option(
        "--units",
        "units",
        type=click.Choice(UNITS),
        default=None,
        help="Units for sizes: h (human-readable), m, g or t (default: h, or m with --separator).",
    )(fn)


def reason_option(fn: F) -> F:
    """``--reason TEXT``: why the command runs, kept in the job. Parameter ``reason``."""
    return click.option(
        "--reason", "reason", metavar="TEXT", default=None, help="The reason for this command."
    )(fn)


def submit_option(fn: F) -> F:
    """``--submit``: print the job id and do not wait. Parameter ``submit_only: bool``."""
    return click.option(
        "--submit",
        "submit_only",
        is_flag=True,
        help="Submit the job and print its id without waiting for it to finish.",
    )(fn)


def print_jobid_option(fn: F) -> F:
    """``--print-jobid``: print the job id first on stdout. Parameter ``print_jobid: bool``."""
    return click.option(
        "--print-jobid",
        "print_jobid",
        is_flag=True,
        help="Also print the job id as the first line on stdout (for scripts).",
    )(fn)


def _priority(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else PRIORITY_BY_NAME[value]


def priority_option(fn: F) -> F:
    """``--priority low|normal|high`` → 10, 0 or -10. Parameter ``priority: int | None``."""
    return click.option(
        "--priority",
        "priority",
        type=click.Choice(list(PRIORITY_BY_NAME)),
        default=None,
        callback=_priority,
        help="Priority of the job's opcodes.",
    )(fn)


def dry_run_option(fn: F) -> F:
    """``--dry-run``: only check whether it could be done. Parameter ``dry_run: bool``."""
    return click.option(
        "--dry-run",
        "dry_run",
        is_flag=True,
        help="Only run the checks and report whether the operation could be done.",
    )(fn)


def force_option(fn: F) -> F:
    """``-f/--force``: force the operation. Parameter ``force: bool``."""
    return click.option("-f", "--force", "force", is_flag=True, help="Force the operation.")(fn)


def yes_do_it_option(fn: F) -> F:
    """``--yes-do-it`` (alias ``--ya-rly``): confirm a destructive command.

    Parameter ``yes_do_it: bool``.
    """
    return click.option(
        "--yes-do-it",
        "--ya-rly",
        "yes_do_it",
        is_flag=True,
        help="Really do it: confirms an operation that cannot be undone.",
    )(fn)


def json_option(fn: F) -> F:
    """``--json``: print machine-readable JSON (corral's own). Parameter ``as_json: bool``."""
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(fn)


def ident_keyval_option(*param_decls: str, **attrs: Any) -> Callable[[F], F]:
    """A repeatable ``ident:key=val,...`` option (``-H``, ``-D``) merged into one dict.

    The parameter is ``dict[ident, dict | False | None]`` (empty when not given);
    giving an ident twice is a usage error.
    """

    def merge(
        ctx: click.Context, param: click.Parameter, value: tuple[tuple[str, IdentValue], ...]
    ) -> dict[str, IdentValue]:
        try:
            return merge_ident_keyvals(_option_name(param), value)
        except ParameterError as err:
            raise _usage_error(err, ctx) from err

    attrs.setdefault("type", IdentKeyValType())
    attrs["multiple"] = True
    attrs["callback"] = merge
    return click.option(*param_decls, **attrs)


def common_list_options(fn: F) -> F:
    """``-o``, ``--no-headers``, ``--separator``, ``--units`` and ``--json`` together.

    Parameters ``output``, ``no_headers``, ``separator``, ``units``, ``as_json``.
    """
    for decorator in (
        json_option,
        units_option,
        separator_option,
        no_headers_option,
        output_fields_option,
    ):
        fn = decorator(fn)
    return fn


def _yes_no(ctx: click.Context, param: click.Parameter, value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.lower()
    if text in ("yes", "true"):
        return True
    if text in ("no", "false"):
        return False
    raise click.BadParameter(f"{value!r} is not yes or no", ctx, param)


def yes_no_option(*decls: str, help: str) -> Callable[[F], F]:
    """A ``yes|no`` option (Ganeti's ``bool`` options) → ``True``/``False``/``None``."""
    return click.option(*decls, metavar="yes|no", default=None, callback=_yes_no, help=help)
