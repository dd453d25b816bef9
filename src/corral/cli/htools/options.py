"""The htools' command line: their options and how they are parsed.

The htools take GNU-style options (Haskell's ``GetOpt``, which Ganeti's tools use):
short options can be grouped (``-vv``) and take their argument attached or as the
next word (``-l 5``, ``-l5``); long options can be abbreviated to any unique prefix
and take ``--opt=value`` or ``--opt value``; an *optional* argument must be attached
(``-C``, ``-Cfile``, ``--print-commands=file``, ``-p``, ``-pname,fmem``); options and
arguments may be mixed, and ``--`` ends the options. Errors are reported as Ganeti's
tools report them: an unknown option or a missing argument with the usage (exit 2),
a value that cannot be read with ``Error while parsing command line arguments:``
(exit 1).

Each tool lists the options it takes by name (:data:`OPTIONS`); ``--help``,
``--version`` and ``--help-completion`` are every tool's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from corral import __version__

__all__ = [
    "OPTIONS",
    "Option",
    "Options",
    "UsageError",
    "ValueProblem",
    "parse",
    "usage",
]

DEFAULT_LUXI_SOCKET = "/var/run/corral/master.sock"


class UsageError(Exception):
    """A command line that does not parse (exit 2, with the usage)."""


class ValueProblem(Exception):
    """An option value that cannot be read (exit 1)."""


@dataclass
class Options:
    """Every option's value (defaults are htools')."""

    data_file: str | None = None
    disk_moves: bool = True
    inst_moves: bool = True
    disk_template: str | None = None
    spindle_use: int | None = None
    dynu_file: str | None = None
    ignore_dynu: bool = False
    ignore_soft_errors: bool = False
    independent_groups: bool = False
    accept_existing: bool = False
    mond: bool = False
    mond_file: str | None = None
    mond_xen: bool = False
    mond_exit_missing: bool = False
    evac_mode: bool = False
    restricted_migration: bool = False
    exclude_instances: list[str] = field(default_factory=list)
    exclusion_tags: list[str] | None = None
    exec_jobs: bool = False
    first_job_group: bool = False
    group: str | None = None
    ialloc_src: str | None = None
    select_instances: list[str] = field(default_factory=list)
    luxi: str | None = None
    machine_readable: bool = False
    master: str = ""
    max_length: int = -1
    max_cpu: float | None = None
    min_disk: float = 0.0
    min_gain: float = 1e-2
    min_gain_limit: float = 1e-1
    min_score: float = 1e-9
    no_headers: bool = False
    no_simulation: bool = False
    simulate: list[str] = field(default_factory=list)
    offline: list[str] = field(default_factory=list)
    restrict_to: list[str] | None = None
    output_dir: str = "."
    reason: str | None = None
    save: str | None = None
    print_commands: str | None = None
    show_help: bool = False
    show_completion: bool = False
    print_instances: bool = False
    print_nodes: list[str] | None = None
    show_version: bool = False
    static_kvm_memory: int = 4096
    std_spec: tuple[int, int, int, int] | None = None
    tiered_spec: tuple[int, int, int, int] | None = None
    verbose: int = 1
    priority: str | None = None
    capacity: bool = True
    parallel: int = 0


Setter = Callable[[Options, str | None], None]


@dataclass(frozen=True)
class Option:
    """One option: its letters and names, argument (none, required or optional), the
    argument's name in the usage, its help and what it sets."""

    short: str
    long: str
    arg: str | None          # None, "req" or "opt"
    metavar: str
    help: str
    apply: Setter


def _number(kind: type, what: str, text: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ValueProblem(f"{what}: cannot parse string '{text}'") from None


_UNITS = {"": 1, "m": 1, "mib": 1, "g": 1024, "gib": 1024, "t": 1024 * 1024,
          "tib": 1024 * 1024, "mb": 1000 * 1000 / (1024 * 1024),
          "gb": 1000 ** 3 / (1024 * 1024), "tb": 1000 ** 4 / (1024 * 1024)}


def parse_unit(text: str, what: str) -> int:
    """A size in MiB from ``512``, ``16G``, ``1T``, ``500MB`` (htools' units: m/g/t
    binary, M/G/T and MB/GB/TB decimal)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", text)
    if not match:
        raise ValueProblem(f"{what}: cannot parse string '{text}'")
    number, unit = match.groups()
    key = unit.lower() if unit in ("m", "g", "t") or unit.lower().endswith("ib") else {
        "M": "mb", "G": "gb", "T": "tb"}.get(unit, unit.lower())
    if key not in _UNITS:
        raise ValueProblem(f"{what}: Unknown unit '{unit}'")
    value = float(number) * _UNITS[key]
    return int(-(-value // 1)) if value != int(value) else int(value)


def _spec(kind: str, text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if not 3 <= len(parts) <= 4:
        raise ValueProblem(f"Invalid {kind} specification: '{text}', expected disk,ram,cpu")
    disk = parse_unit(parts[0], f"{kind} specs disk")
    ram = parse_unit(parts[1], f"{kind} specs memory")
    cpu = _number(int, f"{kind} specs cpus", parts[2])
    spindles = _number(int, f"{kind} specs spindles", parts[3]) if len(parts) == 4 else 1
    return (disk, ram, cpu, spindles)


def _yes_no(default: bool, text: str | None) -> bool:
    if text is None:
        return default
    if text == "yes":
        return True
    if text == "no":
        return False
    raise ValueProblem(f"Invalid value of boolean option, expected 'yes' or 'no' "
                       f"(got '{text}')")


def _set(name: str, value: Any) -> Setter:
    return lambda opts, _arg: setattr(opts, name, value)


def _store(name: str, convert: Callable[[str], Any] = str) -> Setter:
    return lambda opts, arg: setattr(opts, name, convert(arg or ""))


def _check(convert: Callable[[str], Any], test: Callable[[Any], bool],
           message: str) -> Callable[[str], Any]:
    def run(text: str) -> Any:
        value = convert(text)
        if not test(value):
            raise ValueProblem(message)
        return value
    return run


def _nodes_fields(opts: Options, arg: str | None) -> None:
    text = arg or ""
    if text.startswith("+"):
        opts.print_nodes = ["+", *(text[1:].split(",") if text[1:] else [])]
    else:
        opts.print_nodes = text.split(",") if text else []


_PRIORITIES = ("low", "normal", "high")

OPTIONS: dict[str, Option] = {opt.long: opt for opt in (
    Option("p", "print-nodes", "opt", "FIELDS", "print the node list before and after",
           _nodes_fields),
    Option("", "print-instances", None, "", "print the instance list before and after",
           _set("print_instances", True)),
    Option("C", "print-commands", "opt", "FILE",
           "print the gnt-instance commands that reach the solution, or write them as "
           "a shell script to FILE",
           lambda o, a: setattr(o, "print_commands", a if a is not None else "-")),
    Option("t", "text-data", "req", "FILE", "read the cluster from a text data FILE",
           _store("data_file")),
    Option("", "disk-template", "req", "TEMPLATE",
           "the disk template of the instances to place", _store("disk_template")),
    Option("", "spindle-use", "req", "SPINDLES",
           "spindles each instance uses [default: the cluster's standard spec]",
           _store("spindle_use", _check(lambda t: _number(int, "parsing spindle-use", t),
                                        lambda v: v >= 0, "Invalid value of the "
                                        "spindle-use (expected >= 0)"))),
    Option("", "simulate", "req", "SPEC",
           "simulate an empty group of nodes, as 'alloc_policy,nodes,disk,ram,cpu'",
           lambda o, a: o.simulate.insert(0, a or "")),
    Option("m", "master", "req", "ADDRESS", "read the cluster through RAPI at ADDRESS",
           _store("master")),
    Option("L", "luxi", "opt", "SOCKET",
           f"read the cluster from the master daemon's luxi SOCKET [{DEFAULT_LUXI_SOCKET}]",
           lambda o, a: setattr(o, "luxi", a if a is not None else "")),
    Option("I", "ialloc-src", "req", "FILE", "read the cluster from an iallocator request",
           _store("ialloc_src")),
    Option("X", "exec", None, "", "run the moves as jobs (with -L only)",
           _set("exec_jobs", True)),
    Option("", "first-job-group", None, "", "run only the first set of jobs",
           _set("first_job_group", True)),
    Option("", "reason", "req", "REASON", "the reason given to the jobs",
           _store("reason")),
    Option("G", "group", "req", "ID", "the node group to work on (name or UUID)",
           _store("group")),
    Option("l", "max-length", "req", "N", "stop after N rounds of moves or allocations",
           _store("max_length", lambda t: _number(int, "max solution length", t))),
    Option("v", "verbose", None, "", "print more",
           lambda o, _a: setattr(o, "verbose", o.verbose + 1)),
    Option("q", "quiet", None, "", "print less",
           lambda o, _a: setattr(o, "verbose", o.verbose - 1)),
    Option("O", "offline", "req", "NODE", "treat NODE as offline",
           lambda o, a: o.offline.insert(0, a or "")),
    Option("", "static-kvm-node-memory", "req", "N",
           "memory of kvm nodes' own use in MiB instead of what they report (0: as "
           "reported)",
           _store("static_kvm_memory", lambda t: _number(int, "static node memory", t))),
    Option("e", "min-score", "req", "EPSILON", "stop when the score is this close to "
           "the best N+1 allows", _store("min_score",
                                         lambda t: _number(float, "min score", t))),
    Option("", "max-cpu", "req", "RATIO",
           "VCPUs per physical CPU allowed on a node [default: the policy's]",
           _store("max_cpu", _check(lambda t: _number(float, "parsing max-cpu", t),
                                    lambda v: v > 0, "Invalid value of the max-cpu ratio, "
                                    "expected >0"))),
    Option("", "min-disk", "req", "RATIO", "share of disk to keep free on a node (0 to 1)",
           _store("min_disk", lambda t: _number(float, "min free disk space", t))),
    Option("g", "min-gain", "req", "DELTA", "the least gain of a move worth making",
           _store("min_gain", lambda t: _number(float, "min gain", t))),
    Option("", "min-gain-limit", "req", "SCORE",
           "apply --min-gain only below this score",
           _store("min_gain_limit", lambda t: _number(float, "min gain limit", t))),
    Option("", "no-disk-moves", None, "", "make no disk moves, only failovers and "
           "migrations", _set("disk_moves", False)),
    Option("", "select-instances", "req", "INSTS", "move only these instances",
           _store("select_instances", lambda t: t.split(","))),
    Option("", "no-instance-moves", None, "", "move no primary, only secondaries",
           _set("inst_moves", False)),
    Option("", "ignore-soft-errors", None, "", "ignore soft limits when placing",
           _set("ignore_soft_errors", True)),
    Option("U", "dynu-file", "req", "FILE", "read instances' dynamic use from FILE",
           _store("dynu_file")),
    Option("", "ignore-dynu", None, "", "ignore dynamic use data",
           _set("ignore_dynu", True)),
    Option("", "mond", "opt", "CHOICE", "query the monitoring daemons ('yes' or 'no')",
           lambda o, a: setattr(o, "mond", _yes_no(True, a))),
    Option("", "mond-data", "req", "FILE", "read monitoring data from FILE",
           _store("mond_file")),
    Option("", "exit-on-missing-mond-data", None, "", "fail when monitoring data is "
           "missing", _set("mond_exit_missing", True)),
    Option("", "mond-xen", None, "", "also use Xen-specific monitoring data",
           _set("mond_xen", True)),
    Option("", "exclusion-tags", "req", "TAG,...",
           "keep instances with a tag of these prefixes on different nodes",
           _store("exclusion_tags", lambda t: t.split(","))),
    Option("", "exclude-instances", "req", "INSTS", "never move these instances",
           _store("exclude_instances", lambda t: t.split(","))),
    Option("S", "save", "req", "FILE", "write the cluster's state to FILE.<stage>",
           _store("save")),
    Option("", "priority", "req", "PRIO", "the priority of the jobs (low, normal, high)",
           _store("priority", _check(str, lambda v: v in _PRIORITIES,
                                     "Unknown priority; expected low, normal or high"))),
    Option("", "parallel", "req", "N",
           "with -X, run at most N jobs of a set at once (0: all of them)",
           _store("parallel", _check(lambda t: _number(int, "parallel jobs", t),
                                     lambda v: v >= 0, "Invalid number of parallel "
                                     "jobs, expected >= 0"))),
    Option("", "independent-groups", None, "", "check the groups' capacity one by one",
           _set("independent_groups", True)),
    Option("", "accept-existing-errors", None, "",
           "accept the N+1 failures the cluster has, only add none",
           _set("accept_existing", True)),
    Option("", "no-capacity-checks", None, "", "skip global N+1 capacity checks",
           _set("capacity", False)),
    Option("", "machine-readable", "opt", "CHOICE",
           "print shell variable assignments ('yes' or 'no'; alone: yes)",
           lambda o, a: setattr(o, "machine_readable", _yes_no(True, a))),
    Option("", "standard-alloc", "req", "STDSPEC",
           "allocate instances of one size, given as 'disk,ram,cpu'",
           _store("std_spec", lambda t: _spec("standard", t))),
    Option("", "tiered-alloc", "req", "TSPEC",
           "allocate shrinking instances from a size, given as 'disk,ram,cpu'",
           _store("tiered_spec", lambda t: _spec("tiered", t))),
    Option("", "restrict-allocation-to", "req", "NODE,...",
           "place instances only on these nodes",
           _store("restrict_to", lambda t: t.split(","))),
    Option("E", "evac-mode", None, "", "only move instances off offline and drained nodes",
           _set("evac_mode", True)),
    Option("", "restricted-migration", None, "",
           "make no replace-primary moves (in evac mode: migrate only off drained nodes)",
           _set("restricted_migration", True)),
    Option("", "no-simulation", None, "", "do not simulate a rebalancing",
           _set("no_simulation", True)),
    Option("d", "output-dir", "req", "PATH", "write the data files into PATH",
           _store("output_dir")),
    Option("", "no-headers", None, "", "print no header line", _set("no_headers", True)),
    Option("V", "version", None, "", "print the version", _set("show_version", True)),
    Option("h", "help", None, "", "print this help", _set("show_help", True)),
    Option("", "help-completion", None, "", "print what shell completion needs",
           _set("show_completion", True)),
)}

GENERIC = ("version", "help", "help-completion")


def _left(opt: Option) -> str:
    if not opt.short:
        return ""
    if opt.arg == "req":
        return f"-{opt.short} {opt.metavar}"
    if opt.arg == "opt":
        return f"-{opt.short}[{opt.metavar}]"
    return f"-{opt.short}"


def _right(opt: Option) -> str:
    if opt.arg == "req":
        return f"--{opt.long}={opt.metavar}"
    if opt.arg == "opt":
        return f"--{opt.long}[={opt.metavar}]"
    return f"--{opt.long}"


def usage(tool: str, names: Sequence[str]) -> str:
    """The usage text of ``--help``, as the htools lay it out."""
    opts = [OPTIONS[name] for name in (*names, *GENERIC)]
    left = max(len(_left(o)) for o in opts)
    right = max(len(_right(o)) for o in opts)
    lines = [f"{tool} (corral) version {__version__}", f"Usage: {tool} [OPTION...]"]
    for opt in opts:
        lines.append(f"  {_left(opt).ljust(left)}  {_right(opt).ljust(right)}  {opt.help}")
    return "\n".join(lines) + "\n"


def completion(names: Sequence[str]) -> str:
    """What ``--help-completion`` prints: each option's spellings."""
    out = []
    for name in (*names, *GENERIC):
        opt = OPTIONS[name]
        spelled = ([f"-{opt.short}"] if opt.short else []) + [f"--{opt.long}"]
        out.append(",".join(spelled) + " " + ("none" if opt.arg is None else opt.metavar))
    return "\n".join(out) + "\n"


def _find_long(name: str, allowed: Sequence[str]) -> Option:
    if name in allowed:
        return OPTIONS[name]
    found = [n for n in allowed if n.startswith(name)]
    if len(found) == 1:
        return OPTIONS[found[0]]
    if not found:
        raise UsageError(f"unrecognized option `--{name}'")
    raise UsageError(f"option `--{name}' is ambiguous; could be one of:\n"
                     + "\n".join("  --" + n for n in found))


def parse(argv: Sequence[str], names: Sequence[str]) -> tuple[Options, list[str]]:
    """Parse ``argv`` against the options ``names``; the options and the arguments."""
    allowed = [*names, *GENERIC]
    shorts = {OPTIONS[n].short: OPTIONS[n] for n in allowed if OPTIONS[n].short}
    opts = Options()
    args: list[str] = []
    pending: list[tuple[Option, str | None]] = []
    pos = 0
    while pos < len(argv):
        word = argv[pos]
        pos += 1
        if word == "--":
            args.extend(argv[pos:])
            break
        if word.startswith("--"):
            name, eq, given = word[2:].partition("=")
            value: str | None = given
            opt = _find_long(name, allowed)
            if opt.arg is None:
                if eq:
                    raise UsageError(f"option `--{opt.long}' doesn't allow an argument")
                pending.append((opt, None))
            elif opt.arg == "opt":
                pending.append((opt, value if eq else None))
            elif eq:
                pending.append((opt, value))
            elif pos < len(argv):
                pending.append((opt, argv[pos]))
                pos += 1
            else:
                raise UsageError(f"option `--{opt.long}' requires an argument {opt.metavar}")
        elif word.startswith("-") and word != "-":
            letters = word[1:]
            while letters:
                letter, letters = letters[0], letters[1:]
                found = shorts.get(letter)
                if found is None:
                    raise UsageError(f"unrecognized option `-{letter}'")
                opt = found
                if opt.arg is None:
                    pending.append((opt, None))
                    continue
                if letters:
                    pending.append((opt, letters))
                elif opt.arg == "opt":
                    pending.append((opt, None))
                elif pos < len(argv):
                    pending.append((opt, argv[pos]))
                    pos += 1
                else:
                    raise UsageError(f"option `-{letter}' requires an argument "
                                     f"{opt.metavar}")
                letters = ""
        else:
            args.append(word)
    for opt, value in pending:
        opt.apply(opts, value)
    return opts, args


def run(tool: str, names: Sequence[str], argv: Sequence[str] | None = None) -> tuple[
        Options, list[str]]:
    """Parse the command line of ``tool`` as the htools do: print the help or the
    version and exit, or exit with the htools' message and code on a bad line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, args = parse(argv, names)
    except UsageError as err:
        sys.stderr.write(f"Command line error: {err}\n\n{usage(tool, names)}")
        raise SystemExit(2) from None
    except ValueProblem as err:
        sys.stderr.write(f"Error while parsing command line arguments:\n{err}\n")
        raise SystemExit(1) from None
    if opts.show_help:
        sys.stdout.write(usage(tool, names))
        raise SystemExit(0)
    if opts.show_version:
        sys.stdout.write(f"{tool} (corral) version {__version__}\n")
        raise SystemExit(0)
    if opts.show_completion:
        sys.stdout.write(completion(names))
        raise SystemExit(0)
    return opts, args


def fail(message: str, code: int = 1) -> NoReturn:
    """Exit as the htools do on an error (``Error: message``)."""
    sys.stdout.flush()
    sys.stderr.write(f"Error: {message}\n")
    raise SystemExit(code)
