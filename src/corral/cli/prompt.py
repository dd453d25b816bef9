"""Questions to the person at the terminal, asked the way Ganeti's tools ask them.

The question is written to and the answer read from the controlling terminal
(``/dev/tty``), not standard input and output: piping into a command does not answer
it, and its output stays clean. Without a terminal (cron, CI, ``setsid``) nobody is
asked and the last choice, the safe one, is taken, so a script that forgot
``--force-multiple`` does nothing rather than hang.

:func:`ask_user` shows the choices as ``y/[n]/?``: the bracketed one is what happens
without a terminal, ``?`` lists what each choice means, anything else asks again.
:func:`confirm_operation` is Ganeti's "The startup will operate on 3 instances."
question with the list of what is affected.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

__all__ = ["Choice", "Terminal", "ask_user", "confirm_operation", "open_tty"]

#: One possible answer: (the character to type, what it returns, what it means).
Choice = tuple[str, object, str]

#: Above this many items the list is shown only on request ("v"), as Ganeti does.
_LIST_AT_MOST = 20
#: Question lines are wrapped at this width.
_WIDTH = 70


class Terminal(Protocol):
    """Where a question goes and its answer comes from."""

    def write(self, text: str) -> None:
        """Show ``text`` (no newline added)."""
        ...

    def readline(self) -> str:
        """One line typed by the user; empty at end of input."""
        ...


class _Tty:
    """The controlling terminal, unbuffered (a tty cannot be opened buffered r+)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, text: str) -> None:
        os.write(self._fd, text.encode())

    def readline(self) -> str:
        data = bytearray()
        while not data.endswith(b"\n"):
            chunk = os.read(self._fd, 1)
            if not chunk:
                break
            data += chunk
        return data.decode(errors="replace")


@contextmanager
def open_tty(device: str = "/dev/tty") -> Iterator[Terminal | None]:
    """The controlling terminal, or None when the process has none."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        yield None
        return
    try:
        yield _Tty(fd)
    finally:
        os.close(fd)


def ask_user(text: str, choices: Sequence[Choice] | None = None,
             terminal: Terminal | None = None) -> object:
    """Ask ``text`` on the terminal and return the chosen choice's value.

    ``choices`` default to yes (True) and no (False). With no ``terminal`` given the
    controlling one is opened; without one, or at end of input, the last choice's
    value is returned.
    """
    if choices is None:
        choices = [("y", True, "Perform the operation"),
                   ("n", False, "Do not perform the operation")]
    if not choices or any(len(c) != 3 or c[0] == "?" for c in choices):
        raise ValueError(f"invalid choices for a question: {choices!r}")
    if terminal is None:
        with open_tty() as tty:
            return ask_user(text, choices, tty) if tty is not None else choices[-1][1]
    question = "\n".join(textwrap.fill(line, _WIDTH, replace_whitespace=False)
                         for line in text.splitlines())
    keys = [c[0] for c in choices]
    prompt = "/".join([*keys[:-1], f"[{keys[-1]}]", "?"]) + ": "
    values = {c[0]: c[1] for c in choices}
    while True:
        terminal.write(f"{question}\n{prompt}")
        line = terminal.readline()
        if not line:
            return choices[-1][1]
        answer = line.strip().lower()
        if answer in values:
            return values[answer]
        if answer == "?":
            terminal.write("".join(f" {key} - {meaning}\n" for key, _, meaning in choices)
                           + "\n")


def confirm_operation(names: Sequence[str], list_type: str, operation: str,
                      terminal: Terminal | None = None) -> bool:
    """Ask whether ``operation`` (``startup``) may go on for ``names`` of ``list_type``
    (``instances``); the names are listed, or shown on request ("v") above 20."""
    message = (f"The {operation} will operate on {len(names)} {list_type}.\n"
               "Do you want to continue?")
    affected = f"\nAffected {list_type}:\n" + "\n".join(f"  {name}" for name in names)
    choices: list[Choice] = [("y", True, f"Yes, execute the {operation}"),
                             ("n", False, f"No, abort the {operation}")]
    if len(names) <= _LIST_AT_MOST:
        return ask_user(message + affected, choices, terminal) is True
    with_view = [choices[0], ("v", "v", f"View the list of affected {list_type}"), choices[1]]
    choice = ask_user(message, with_view, terminal)
    if choice == "v":
        choice = ask_user(message + affected, choices, terminal)
    return choice is True
