"""What every gnt-* tool shares: Ganeti's command line conventions, the master
connection, reason trails.

Administrators' scripts read what Ganeti's tools print and test their exit codes, so
every tool is a :class:`CorralGroup` of :class:`GanetiCommand` commands, which keep
click but behave like Ganeti's option parser:

- no command, or one that does not exist: the tool's usage (``Usage: gnt-instance
  {command} [options...] [argument...]`` and the command list) on stdout, exit 1;
  ``--help`` as the command: the same, exit 0; ``--version``: ``TOOL (corral V) V``;
- long options may be shortened to an unambiguous prefix (``--force-mult``);
- an option error (unknown or ambiguous option, missing or bad value): the
  command's usage, then ``gnt-instance: error: no such option: --bogus`` on stderr,
  exit 2;
- too few or too many arguments: ``Error: Command rename expects 2 argument(s)`` on
  stderr, exit 1;
- ``gnt-instance|gnt-node|gnt-group list`` take default options from
  ``GNT_INSTANCE_LIST`` (``GNT_NODE_LIST``, ``GNT_GROUP_LIST``), as Ganeti's do;
- ``COMMAND --help``: Ganeti's titled help (``Usage``/``=====``) on stdout, exit 0;
- a :class:`CorralError`: Ganeti's text for its kind (see
  :func:`corral.errors.failure_text`) on stderr, exit with the error's code.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import click

from corral import __version__
from corral.errors import CorralError, MasterUnreachableError, ParameterError, failure_text
from corral.luxi import Client
from corral.paths import Paths

__all__ = [
    "CONTEXT_SETTINGS",
    "ENV_DEFAULTS",
    "EXIT_OPTION_ERROR",
    "INTERRUPTED",
    "CorralGroup",
    "GanetiCommand",
    "env_defaults_variable",
    "get_client",
    "reason_trail",
    "tool_usage",
]

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: What a tool says when interrupted (Ganeti's words): jobs it submitted go on.
INTERRUPTED = ("Aborted. Note that if the operation created any jobs, they might have been "
               "submitted and will continue to run in the background.")
#: Exit code of an option error (Ganeti's optparse exits so).
EXIT_OPTION_ERROR = 2
#: Exit code of a wrong number of arguments, an unknown or missing command.
EXIT_USAGE = 1


def _tool(ctx: click.Context) -> str:
    return ctx.find_root().info_name or "gnt"


def _argument_text(param: click.Argument) -> str:
    # A metavar gives Ganeti's name for the argument (``<instance-name>``).
    name = param.metavar or f"<{(param.name or 'argument').replace('_', '-')}>"
    if param.nargs == -1:
        return f"[{name}...]"
    return name if param.required else f"[{name}]"


def _command_usage(ctx: click.Context) -> str:
    """``gnt-instance startup [<names>...]``: the command line one command takes."""
    command = ctx.command
    args = [_argument_text(p) for p in command.params if isinstance(p, click.Argument)]
    return " ".join([ctx.command_path, *args])


def _argument_bounds(command: click.Command) -> tuple[int, int | None]:
    """The least and most positional arguments ``command`` takes (None: no limit)."""
    least, most = 0, 0
    unlimited = False
    for param in command.params:
        if not isinstance(param, click.Argument):
            continue
        if param.nargs == -1:
            unlimited = True
            least += 1 if param.required else 0
        else:
            least += param.nargs if param.required else 0
            most += param.nargs
    return least, None if unlimited else most


class _OptionError(click.ClickException):
    """An option error, shown as Ganeti's optparse shows it: the command's usage and
    ``TOOL: error: MESSAGE`` on stderr, exit 2."""

    exit_code = EXIT_OPTION_ERROR

    def __init__(self, message: str, ctx: click.Context) -> None:
        super().__init__(message)
        self.ctx = ctx

    def show(self, file: Any = None) -> None:
        """Write the usage block and the error line to stderr."""
        click.echo(f"Usage\n=====\n  {_command_usage(self.ctx)}\n\n"
                   f"{_tool(self.ctx)}: error: {self.message}", err=True)


class _ArgumentCountError(click.ClickException):
    """Too few or too many arguments: ``Error: Command X expects ...`` on stderr,
    exit 1 (Ganeti's argument check)."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        """Write the message alone to stderr."""
        click.echo(f"Error: {self.message}", err=True)


class _Failure(click.ClickException):
    """A :class:`CorralError` found while parsing, printed as one from the command."""

    def __init__(self, error: CorralError) -> None:
        super().__init__(error.message)
        self.error = error
        # click reads exit_code from the instance; the error's own code applies
        setattr(self, "exit_code", error.exit_code)  # noqa: B010

    def show(self, file: Any = None) -> None:
        """Write Ganeti's text for the error to stderr."""
        click.echo(failure_text(self.error), err=True)


def _argument_count_error(ctx: click.Context, too_many: bool) -> _ArgumentCountError:
    least, most = _argument_bounds(ctx.command)
    name = ctx.info_name
    if most == 0:
        text = f"Command {name} expects no arguments"
    elif least == most:
        text = f"Command {name} expects {least} argument(s)"
    elif too_many:
        text = f"Command {name} expects only {most} argument(s)"
    else:
        text = f"Command {name} expects at least {least} argument(s)"
    return _ArgumentCountError(text)


def _option_hint(param: click.Parameter | None) -> str:
    opts = list(getattr(param, "opts", []) or [])
    longs = [o for o in opts if o.startswith("--")]
    fallback = param.name if param is not None and param.name else "value"
    return str((longs or opts or [fallback])[0])


_QUOTED_VALUE = re.compile(r"^('.*') is not ")


def _bad_value(err: click.BadParameter) -> str:
    """optparse's words for a bad choice or number, click's for anything else."""
    if isinstance(err, click.MissingParameter):
        return "a value is required"
    message = err.message.rstrip(".")
    quoted = _QUOTED_VALUE.match(message)
    kind = err.param.type if err.param is not None else None
    if quoted and isinstance(kind, click.Choice):
        choices = ", ".join(repr(str(choice)) for choice in kind.choices)
        return f"invalid choice: {quoted.group(1)} (choose from {choices})"
    if quoted and "valid integer" in message:
        return f"invalid integer value: {quoted.group(1)}"
    return message


def ganeti_usage_error(err: click.UsageError, ctx: click.Context) -> click.ClickException:
    """Click's usage error ``err`` as Ganeti's option parser reports it."""
    if isinstance(err, click.NoSuchOption):
        return _OptionError(f"no such option: {err.option_name}", ctx)
    if isinstance(err, click.BadOptionUsage):
        text = err.message
        if "requires" in text:
            return _OptionError(f"{err.option_name} option requires 1 argument", ctx)
        if "does not take a value" in text:
            return _OptionError(f"{err.option_name} option does not take a value", ctx)
        return _OptionError(text, ctx)
    if isinstance(err, click.MissingParameter) and isinstance(err.param, click.Argument):
        return _argument_count_error(ctx, too_many=False)
    if isinstance(err, click.BadParameter) and isinstance(err.param, click.Argument):
        # Ganeti's arguments are untyped: the command itself refuses a bad one
        name = (err.param.name or "argument").replace("_", "-")
        return _Failure(ParameterError(f"{name}: {_bad_value(err)}"))
    if isinstance(err, click.BadParameter) and err.param is not None:
        return _OptionError(f"option {_option_hint(err.param)}: {_bad_value(err)}", ctx)
    if err.message.startswith("Got unexpected extra argument"):
        return _argument_count_error(ctx, too_many=True)
    return _OptionError(err.message, ctx)


class GanetiCommand(click.Command):
    """A click command whose usage errors and help look like Ganeti's (see the
    module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse as click does, long options abbreviated as optparse allows; click's
        usage errors become Ganeti's."""
        try:
            return super().parse_args(ctx, self._expand_abbreviations(ctx, args))
        except click.UsageError as err:
            raise ganeti_usage_error(err, ctx) from None

    def _expand_abbreviations(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``--force-mult`` for ``--force-multiple``: a long option may be shortened to
        any prefix that names only it, as with Ganeti's option parser."""
        longs = {opt for param in self.get_params(ctx) if isinstance(param, click.Option)
                 for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")}
        expanded: list[str] = []
        for index, arg in enumerate(args):
            if arg == "--":
                return expanded + args[index:]
            name, eq, value = arg.partition("=")
            if name.startswith("--") and len(name) > 2 and name not in longs:
                matches = sorted(opt for opt in longs if opt.startswith(name))
                if len(matches) > 1:
                    raise _OptionError(
                        f"ambiguous option: {name} ({', '.join(matches)}?)", ctx)
                if matches:
                    arg = matches[0] + eq + value
            expanded.append(arg)
        return expanded

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Ganeti's titled help: ``Usage``, the description, ``Options``."""
        formatter.write(f"Usage\n=====\n  {_command_usage(ctx)}\n\n")
        if self.help:
            formatter.write(inspect.cleandoc(self.help) + "\n\n")
        records = [record for param in self.get_params(ctx)
                   if (record := param.get_help_record(ctx)) is not None]
        if records:
            formatter.write("Options\n=======\n")
            formatter.write_dl(records)


def _first_paragraph(command: click.Command) -> str:
    text = inspect.cleandoc(command.help or command.short_help or "")
    return " ".join(text.split("\n\n")[0].split())


def tool_usage(tool: str, commands: Mapping[str, click.Command]) -> Iterator[str]:
    """The lines of a tool's usage: Ganeti's header, then each command (aliases left
    out) with the first paragraph of its help, wrapped beside the names."""
    names = sorted(name for name, cmd in commands.items()
                   if not cmd.hidden and name == cmd.name)
    width = min(60, max((len(name) for name in names), default=0))
    yield f"Usage: {tool} {{command}} [options...] [argument...]"
    yield f"{tool} <command> --help to see details, or man {tool}"
    yield ""
    yield "Commands:"
    for name in names:
        lines = textwrap.wrap(_first_paragraph(commands[name]), 79 - 3 - width) or [""]
        yield f" {name:<{width}} - {lines[0]}"
        for line in lines[1:]:
            yield f" {'':<{width}}   {line}"
    yield ""


#: Commands whose default options an environment variable may give, as in Ganeti:
#: ``GNT_INSTANCE_LIST="-o name,status"`` (the tool and command, upper case, ``_``).
ENV_DEFAULTS: dict[str, frozenset[str]] = {
    "gnt-instance": frozenset({"list"}),
    "gnt-node": frozenset({"list"}),
    "gnt-group": frozenset({"list"}),
}


def env_defaults_variable(tool: str, command: str) -> str:
    """``GNT_INSTANCE_LIST``: the variable holding default options of a command."""
    return f"{tool}_{command}".replace("-", "_").upper()


def _with_env_defaults(tool: str, command: click.Command, args: list[str]) -> list[str]:
    """``args`` with the options of the command's environment variable (see
    :data:`ENV_DEFAULTS`) put right after the command name, so that the command
    line's own options come later and win."""
    name = command.name or args[0]
    if name not in ENV_DEFAULTS.get(tool, frozenset()):
        return args
    extra = os.environ.get(env_defaults_variable(tool, name))
    if not extra:
        return args
    return [args[0], *shlex.split(extra), *args[1:]]


class CorralGroup(click.Group):
    """A gnt-* tool: its commands are :class:`GanetiCommand`; a missing or unknown
    command prints the tool's usage; :class:`CorralError` is reported the way Ganeti's
    tools report errors."""

    command_class = GanetiCommand

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        super().__init__(*args, **kwargs)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Add ``cmd``; a plain click command becomes a :class:`GanetiCommand`."""
        if type(cmd) is click.Command:
            cmd.__class__ = GanetiCommand
        super().add_command(cmd, name)

    def _usage_exit(self, ctx: click.Context, code: int) -> NoReturn:
        for line in tool_usage(_tool(ctx), self.commands):
            click.echo(line)
        ctx.exit(code)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Ganeti's rules for the first argument: usage on stdout unless it names a
        command (exit 0 for ``--help``, 1 otherwise); ``--version``."""
        if not args:
            self._usage_exit(ctx, EXIT_USAGE)
        first = args[0]
        if first == "--version":
            click.echo(f"{_tool(ctx)} (corral {__version__}) {__version__}")
            ctx.exit(0)
        if first == "--help":
            self._usage_exit(ctx, 0)
        if first not in self.commands:
            self._usage_exit(ctx, EXIT_USAGE)
        return super().parse_args(ctx, _with_env_defaults(_tool(ctx), self.commands[first],
                                                          args))

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; turn corral errors into Ganeti's text and exit code."""
        try:
            return super().invoke(ctx)
        except CorralError as err:
            click.echo(failure_text(err), err=True)
            sys.exit(err.exit_code)
        except click.UsageError as err:  # raised by a command's own code
            raise ganeti_usage_error(err, err.ctx or ctx) from None
        except KeyboardInterrupt:
            click.echo(INTERRUPTED, err=True)
            sys.exit(1)


def get_client(paths: Paths | None = None, *, explain: bool = True) -> Client:
    """A luxi client for this node's master daemon: the one place the tools connect.

    When the master daemon cannot be reached and ``explain`` holds, the error says
    why, as Ganeti's tools do: that this machine is in no cluster, or which node is
    the master to run the command on (see :mod:`corral.cli.master`). That lookup
    runs only after connecting failed, never on the master's normal path.
    """
    paths = paths or Paths.from_env()

    def why(err: MasterUnreachableError) -> CorralError:
        from corral.cli.master import explain_unreachable

        return explain_unreachable(paths, err)

    return Client(paths.master_socket, explain=why if explain else None)


def reason_trail(tool: str, verb: str, user_text: str | None = None) -> list[list[Any]]:
    """The reason trail a CLI command starts with.

    A user's ``--reason`` text comes first as ``("user", text, ns)``, then the tool's
    own entry ``("gnt:client:<tool>", verb, ns)``, the order Ganeti's tools use.
    """
    trail: list[list[Any]] = []
    if user_text:
        trail.append(["user", user_text, time.time_ns()])
    trail.append([f"gnt:client:{tool}", verb, time.time_ns()])
    return trail
