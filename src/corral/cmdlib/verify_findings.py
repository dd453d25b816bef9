"""How a verification opcode reports what it found: Ganeti's finding lines.

A finding goes to the job log as one line, in one of Ganeti's two forms (scripts parse
both)::

      - ERROR: node node2.example.org: while contacting node: connection refused
      - ERROR:ENODERPC:node:node2.example.org:while contacting node: connection refused

The first is the default, the second ``--error-codes`` (``severity:code:kind:item:
message``). A finding about the whole cluster has no item: the first form then reads
``  - ERROR: cluster : message`` and the second names the item ``None``, as Ganeti's
do. A code given in ``ignore_errors`` is reported as a ``WARNING``; only errors make
the opcode's result false. With ``debug_simulate_errors`` every check reports its
finding as if it had failed (to see what each can say), as in Ganeti.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from corral.cmdlib.base import Feedback
from corral.objects.verify_codes import CODE_KINDS, ERROR, WARNING, Severity

__all__ = ["Findings", "VerifyOptions", "format_finding"]

#: A message, or what makes it (only called when the finding is reported).
Message = str | Callable[[], str]


class VerifyOptions(Protocol):
    """The reporting parameters every verification opcode has."""

    debug_simulate_errors: bool
    error_codes: bool
    ignore_errors: list[Any]
    verbose: bool


def format_finding(severity: str, code: str, item: str | None, message: str, *,
                   error_codes: bool) -> str:
    """One finding line in Ganeti's form (see the module doc)."""
    kind = CODE_KINDS[code]
    if error_codes:
        return f"  - {severity}:{code}:{kind}:{item}:{message}"
    return f"  - {severity}: {kind} {item or ''}: {message}"


class Findings:
    """Collects an opcode's findings into its job log; ``bad`` once an error was seen."""

    def __init__(self, options: VerifyOptions, feedback: Feedback) -> None:
        self._error_codes = options.error_codes
        self._ignored = frozenset(options.ignore_errors)
        self.simulate = options.debug_simulate_errors
        self.verbose = options.verbose
        self._feedback = feedback
        #: Whether an error (not a warning) was reported.
        self.bad = False
        #: Every finding reported: ``(severity, code, item, message)``.
        self.reported: list[tuple[str, str, str | None, str]] = []

    def step(self, text: str) -> None:
        """A progress line (``* Verifying node status``)."""
        self._feedback(text)

    def note(self, text: str) -> None:
        """A progress line shown only with ``verbose``."""
        if self.verbose:
            self._feedback(text)

    def report(self, code: str, item: str | None, message: Message, *,
               severity: Severity = ERROR) -> None:
        """Report a finding (an ignored code's error becomes a warning)."""
        text = message() if callable(message) else message
        if code in self._ignored:
            severity = WARNING
        if severity == ERROR:
            self.bad = True
        self.reported.append((severity, code, item, text))
        self._feedback(format_finding(severity, code, item, text,
                                      error_codes=self._error_codes))

    def report_if(self, failed: object, code: str, item: str | None, message: Message, *,
                  severity: Severity = ERROR) -> bool:
        """Report the finding when ``failed`` is true (or errors are simulated); whether
        the check failed for real."""
        if failed or self.simulate:
            self.report(code, item, message, severity=severity)
        return bool(failed)

    def report_all(self, code: str, item: str | None, messages: Iterable[str], *,
                   severity: Severity = ERROR) -> None:
        """Report one finding per message."""
        for message in messages:
            self.report(code, item, message, severity=severity)
