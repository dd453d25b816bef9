"""One RAPI request as handlers see it, and the helpers every handler shares.

The server has already matched the route, checked the caller's rights, read the query
arguments by their declared kinds and decoded (and, where declared, checked) the
body. Handlers read path and query arguments through :class:`RapiRequest`, build
opcodes with :meth:`RapiRequest.opcode` (Ganeti's rules for filling an opcode from a
body and fixed parameters) and talk to the master daemon through luxi.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from corral.errors import (
    InternalError,
    ParameterError,
)
from corral.jobs.follow import JOB_RESULT_FIELDS, JobFollower, job_results
from corral.jobs.model import job_error
from corral.opcodes import op_from_dict
from corral.opcodes.reason import rapi_entries, user_entry
from corral.rapi.users import RapiUser

if TYPE_CHECKING:
    from corral.rapi.luxi_pool import LuxiPool
    from corral.rapi.spec import Operation, Route

__all__ = ["IGNORED_ARGS_HEADER", "RapiRequest", "ignored_args", "job_error", "parse_args"]

_log = logging.getLogger(__name__)

#: The response header naming the query arguments a request gave and RAPI ignored.
IGNORED_ARGS_HEADER: Final = "X-Corral-Ignored-Arguments"

#: How the master names an opcode parameter when it refuses a submitted job.
_SUBMIT_ERROR_RE: Final = re.compile(
    r"^job, opcode (?P<index>\d+): OP_[A-Z_]+: parameter '(?P<param>[a-z_]+)'")

#: Seconds one WaitForJobChange call may wait (Ganeti's RAPI uses 10).
WAIT_TIMEOUT: Final = 10.0


def ignored_args(operation: Operation, method: str, path: str,
                 names: Iterable[str]) -> list[str]:
    """The query arguments given that ``operation`` does not take, each once, in order.

    Ganeti's RAPI ignores them (clients send arguments of other versions, e.g.
    gentleman's ``no-remember``), and so does corral; each is logged at debug level.
    """
    ignored: list[str] = []
    for name in names:
        if operation.arg(name) is None and name not in ignored:
            _log.debug("%s %s: ignoring the unknown query argument %r (accepted: %s)",
                       method, path, name, ", ".join(a.name for a in operation.args) or "none")
            ignored.append(name)
    return ignored


def parse_args(operation: Operation, pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Read query arguments by the kinds ``operation`` declares.

    Arguments the operation does not take are skipped (see :func:`ignored_args`).
    Blank values count as absent (as Ganeti's parsing drops them); a repeated
    argument that is not a list keeps its first value; flags are integers (``0``
    false, any other true), as Ganeti reads them. A known argument with a bad value,
    or a required one missing, is refused with a message naming what is accepted.
    """
    values: dict[str, Any] = {}
    for name, text in pairs:
        arg = operation.arg(name)
        if arg is None:
            continue
        if text == "":
            continue
        if arg.kind == "texts":
            values.setdefault(name, []).append(text)
        elif name in values:
            continue
        elif arg.kind in ("flag", "int"):
            try:
                number = int(text)
            except ValueError:
                what = ("an integer: 0 for false, any other for true" if arg.kind == "flag"
                        else "an integer")
                raise ParameterError(f"Invalid value for the '{name}' parameter: it must be "
                                     f"{what}, got {text!r}") from None
            values[name] = number != 0 if arg.kind == "flag" else number
        elif arg.choices is not None and text not in arg.choices:
            raise ParameterError(f"Invalid value for the '{name}' parameter: it must be one "
                                 f"of {', '.join(arg.choices)}, got {text!r}")
        else:
            values[name] = text
    for arg in operation.args:
        if arg.required and arg.name not in values:
            raise ParameterError(f"missing the query argument {arg.name!r}: {arg.doc}")
        values.setdefault(arg.name, [] if arg.kind == "texts" else arg.default)
    return values


class RapiRequest:
    """A matched, authorised request with its arguments and body decoded."""

    def __init__(self, *, route: Route, operation: Operation, method: str, path: str,
                 path_args: Mapping[str, str], args: Mapping[str, Any], body: Any,
                 user: RapiUser | None, luxi: LuxiPool) -> None:
        self.route = route
        self.operation = operation
        self.method = method
        self.path = path
        self.path_args = dict(path_args)
        self.args = dict(args)
        self.body = body
        self.user = user
        self.luxi = luxi
        #: Per opcode built by :meth:`opcode` (by identity): the body key of each
        #: parameter whose key differs, to name it in errors the master reports.
        self._client_names: dict[int, dict[str, str]] = {}

    # -- arguments --------------------------------------------------------------------

    def item(self, name: str) -> str:
        """The path argument ``name`` (``instance_name``, ``job_id``, ...)."""
        return self.path_args[name]

    def _arg(self, name: str) -> Any:
        if self.operation.arg(name) is None:
            raise InternalError(f"{self.method} {self.route.path} reads query argument "
                                f"{name!r}, which its route does not declare")
        return self.args[name]

    def flag(self, name: str) -> bool:
        """A boolean query argument (false when absent unless declared otherwise)."""
        return bool(self._arg(name))

    def integer(self, name: str) -> int | None:
        """An integer query argument, or its default."""
        value = self._arg(name)
        return None if value is None else int(value)

    def text(self, name: str) -> str | None:
        """A string query argument, or its default."""
        value = self._arg(name)
        return None if value is None else str(value)

    def texts(self, name: str) -> list[str]:
        """A repeatable query argument: every value given, in order."""
        return list(self._arg(name))

    def body_dict(self) -> dict[str, Any]:
        """The body as parameters: an object, or nothing (``{}``)."""
        if self.body is None:
            return {}
        if not isinstance(self.body, dict):
            raise ParameterError(f"the body must be a JSON object, got {type(self.body).__name__}")
        return dict(self.body)

    # -- opcodes and jobs -------------------------------------------------------------

    def reason_trail(self) -> list[list[Any]]:
        """The trail RAPI gives its opcodes: the caller's ``reason=`` text as a ``user``
        entry, then RAPI's own entries naming the resource's operation
        (``gnt:client:rapi:<operation>``, ``gnt:library:rlib2:<operation>``)."""
        trail: list[list[Any]] = []
        reason = self.text("reason")
        if reason:
            trail.append(list(user_entry(reason)))
        trail.extend(list(entry) for entry in rapi_entries(self.route.name))
        return trail

    def opcode(self, op_id: str, fixed: Mapping[str, Any], *, from_body: bool = True,
               rename: Mapping[str, str] | None = None,
               body: Mapping[str, Any] | None = None,
               names: Mapping[str, str] | None = None) -> dict[str, Any]:
        """An opcode in dict form: body parameters (renamed), then ``fixed`` ones.

        ``fixed`` parameters come from the path and query arguments; the body may not
        set them. Without ``from_body`` only the body's ``depends`` is used; ``body``
        stands in for the request body when the handler has taken keys out of it. The
        opcode is checked here, types and shapes down to ``disks[0].size``, so a bad
        body is refused before anything is queued; errors name parameters by their
        body keys (``rename`` inverted for the keys the body used, plus ``names``:
        opcode parameter -> body key, for fixed parameters a handler took from the body).
        """
        if body is not None:
            params = dict(body)
        elif from_body:
            params = self.body_dict()
        else:
            body = self.body if isinstance(self.body, dict) else {}
            params = {k: v for k, v in body.items() if k == "depends"}
        client_names = dict(names or {})
        for old, new in (rename or {}).items():
            if old in params and new in params:
                raise ParameterError(f"body parameter {old!r} is another name for {new!r}; "
                                     "give only one of them")
            if old in params:
                params[new] = params.pop(old)
                client_names[new] = old
        clash = sorted(set(params) & {*fixed, "reason"})
        if clash:
            raise ParameterError(
                f"the body may not set {', '.join(repr(c) for c in clash)}: "
                f"{'it comes' if len(clash) == 1 else 'they come'} from the URL, the query "
                "arguments or RAPI itself")
        op = {"OP_ID": op_id, **params, **fixed, "reason": self.reason_trail()}
        op_from_dict(op, where="body", names=client_names)
        self._client_names[id(op)] = client_names
        return op

    async def call(self, method: str, *args: Any) -> Any:
        """Call a luxi method on the master daemon."""
        return await self.luxi.call(method, *args)

    async def _submit(self, ops: tuple[dict[str, Any], ...]) -> int:
        """``SubmitJob``; a refusal naming an opcode parameter names it as the body does.

        The master checks what the opcodes name (nodes, groups, OSes) against its
        configuration and refuses the job before queueing it; its message says
        ``job, opcode N: OP_...: parameter 'os_type': ...``.
        """
        try:
            return int(await self.call("SubmitJob", list(ops)))
        except ParameterError as err:
            match = _SUBMIT_ERROR_RE.match(err.message)
            if match is None or int(match.group("index")) >= len(ops):
                raise
            names = self._client_names.get(id(ops[int(match.group("index"))]), {})
            param = match.group("param")
            raise type(err)(f"body: parameter '{names.get(param, param)}'"
                            f"{err.message[match.end():]}") from None

    async def submit(self, *ops: dict[str, Any]) -> int:
        """Submit one job of ``ops``; its id, a JSON number as Ganeti 3.0's RAPI answers."""
        return await self._submit(ops)

    async def run(self, *ops: dict[str, Any]) -> list[Any]:
        """Submit one job, wait for it to end and return its opcode results, or raise
        the error of the opcode that failed."""
        job_id = await self._submit(ops)
        follower = JobFollower(job_id)
        while not follower.finished:
            follower.update(await self.call("WaitForJobChange",
                                            *follower.request(WAIT_TIMEOUT)))
        return job_results(job_id, await self.call("QueryJobs", [job_id],
                                                   list(JOB_RESULT_FIELDS)))


