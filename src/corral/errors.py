"""The one error hierarchy of corral.

Every error a user can see is a :class:`CorralError`. Each class carries a stable
machine-readable ``code`` (what RAPI puts in error bodies and luxi sends over the
wire), the ``exit_code`` a command-line tool returns and the ``http_status`` RAPI
answers with. Exit codes follow Ganeti's (1 failure, 5 not a cluster, 13 a declined
question about a list, 14 unknown field) so that shell scripts keep working. A gnt-*
command run on a node that is not the master exits 1, as Ganeti's tools do (Ganeti's
11, "not master", is only what its daemons exit with).

    CorralError                      code "error"              exit 1   HTTP 500
    ├── ParameterError               "parameter-error"         exit 1   HTTP 400
    │   ├── UnknownParameterError    "unknown-parameter"       exit 1   HTTP 400
    │   └── UnknownFieldError        "unknown-field"           exit 14  HTTP 400
    ├── NotFoundError                "not-found"               exit 1   HTTP 404
    ├── AlreadyExistsError           "already-exists"          exit 1   HTTP 409
    │   └── ClusterExistsError       "cluster-exists"          exit 1   HTTP 409
    ├── ConfigurationError           "config-invariant"        exit 1   HTTP 409
    │   └── SerialConflictError      "serial-conflict"         exit 1   HTTP 409
    ├── ConfigStoreError             "config-store"            exit 1   HTTP 500
    ├── NotClusterError              "not-cluster"             exit 5   HTTP 500
    ├── NotMasterError               "not-master"              exit 1   HTTP 502
    ├── MasterUnreachableError       "master-unreachable"      exit 1   HTTP 502
    ├── ProtocolError                "protocol-error"          exit 1   HTTP 502
    ├── ConfirmationRequiredError    "confirmation-required"   exit 1   HTTP 400
    ├── JobCanceledError             "job-canceled"            exit 1   HTTP 409
    ├── DaemonError                  "daemon-error"            exit 1   HTTP 500
    ├── LockError                    "lock-error"              exit 1   HTTP 500
    │   └── LockDeletedError         "lock-deleted"            exit 1   HTTP 409
    ├── RpcError                     "rpc-error"               exit 1   HTTP 502
    │   └── NodeUnreachableError     "node-unreachable"        exit 1   HTTP 502
    ├── HypervisorError              "hypervisor-error"        exit 1   HTTP 500
    ├── BlockDeviceError             "blockdev-error"          exit 1   HTTP 500
    ├── OsError                      "os-error"                exit 1   HTTP 400
    │   ├── OsNotFoundError          "os-not-found"            exit 1   HTTP 404
    │   └── OsScriptError            "os-script-failed"        exit 1   HTTP 500
    ├── JoinError                    "join-error"              exit 1   HTTP 403
    ├── AccessDeniedError            "access-denied"           exit 1   HTTP 403
    ├── PlacementError               "placement-error"         exit 1   HTTP 400
    │   ├── PlacementNotFoundError   "placement-not-found"     exit 1   HTTP 404
    │   └── PlacementConflictError   "placement-conflict"      exit 1   HTTP 409
    │       └── PlacementConcurrentUpdateError
    │                                "placement-concurrent-update" exit 1 HTTP 409
    └── InternalError                "internal-error"          exit 1   HTTP 500

A command-line tool prints an error as Ganeti's tools print the Ganeti error it
stands for (:func:`failure_text`): ``Failure: prerequisites not met for this
operation:`` with ``error type: KIND, error details:``, ``Failure: command execution
error:`` ..., then corral's message.

Errors cross the luxi socket as ``{"code", "message"}`` and are rebuilt on the other
side by :func:`from_wire`, so a client catches the same class the server raised.

Each class also says whether repeating the request later can help (``retryable``):
true for :class:`SerialConflictError` (re-read first),
:class:`NotMasterError`, :class:`MasterUnreachableError`,
:class:`NodeUnreachableError` and :class:`JobQueueDrainedError`; false for the rest.

An exception that is not a :class:`CorralError` is a bug; no daemon answers its text
to a client. :func:`unexpected` logs its traceback under a short incident id and gives
the :class:`InternalError` to answer instead, which names the id and the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import logging

__all__ = [
    "AccessDeniedError",
    "AlreadyExistsError",
    "BlockDeviceError",
    "ClusterExistsError",
    "ConfigStoreError",
    "ConfigurationError",
    "ConfirmationRequiredError",
    "CorralError",
    "DaemonError",
    "HypervisorError",
    "InternalError",
    "JobCanceledError",
    "JobQueueDrainedError",
    "JoinError",
    "LockDeletedError",
    "LockError",
    "MasterUnreachableError",
    "NodeUnreachableError",
    "NotClusterError",
    "NotFoundError",
    "NotMasterError",
    "NothingToChangeError",
    "OpExecError",
    "OpPrereqError",
    "OsError",
    "OsNotFoundError",
    "OsScriptError",
    "ParameterError",
    "PlacementConcurrentUpdateError",
    "PlacementConflictError",
    "PlacementError",
    "PlacementNotFoundError",
    "ProtocolError",
    "QueryFilterError",
    "RpcError",
    "SerialConflictError",
    "TagError",
    "UnknownFieldError",
    "UnknownParameterError",
    "did_you_mean",
    "failure_text",
    "from_ganeti",
    "from_wire",
    "to_ganeti",
    "to_wire",
    "unexpected",
]


class CorralError(Exception):
    """Base of every error corral reports to a user."""

    code: ClassVar[str] = "error"
    exit_code: ClassVar[int] = 1
    http_status: ClassVar[int] = 500
    #: Whether repeating the request later can help (the cause may pass by itself).
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, ecode: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Ganeti's error code (``ECODE_*`` word such as ``insufficient_resources``)
        #: when it is more precise than the class's (see :func:`to_ganeti`); kept
        #: when a failed job's error is rebuilt.
        self.ecode = ecode

    def __str__(self) -> str:
        return self.message


class ParameterError(CorralError):
    """A value given by the user is malformed or out of range."""

    code = "parameter-error"
    http_status = 400


class NothingToChangeError(ParameterError):
    """A change command was given nothing to change. A gnt-* tool prints the message
    alone (Ganeti's tools print their one line, e.g. ``Please give at least one of
    the parameters.``, without the ``Failure:`` heading) and exits 1."""

    code = "nothing-to-change"


class TagError(ParameterError):
    """A tag is empty, too long or has characters a tag may not have. Ganeti's tools
    head the message with ``Failure: invalid tag(s) given:``."""

    code = "tag-error"


class UnknownParameterError(ParameterError):
    """A parameter name is not one corral knows; the message lists the valid ones."""

    code = "unknown-parameter"


class UnknownFieldError(ParameterError):
    """An output or filter field does not exist for the resource."""

    code = "unknown-field"
    exit_code = 14


class NotFoundError(CorralError):
    """The named object (node, instance, job, ...) does not exist."""

    code = "not-found"
    http_status = 404


class AlreadyExistsError(CorralError):
    """An object with this name or identity is already there."""

    code = "already-exists"
    http_status = 409


class ClusterExistsError(AlreadyExistsError):
    """``gnt-cluster init`` found an initialised cluster; nothing was touched."""

    code = "cluster-exists"


class ConfigurationError(CorralError):
    """A configuration change would break an invariant; it was not committed."""

    code = "config-invariant"
    http_status = 409


class SerialConflictError(ConfigurationError):
    """An object changed since it was read; re-read and retry."""

    code = "serial-conflict"
    retryable = True


class ConfigStoreError(CorralError):
    """The configuration store cannot be read, is corrupt or has a newer schema."""

    code = "config-store"


class NotClusterError(CorralError):
    """This machine is not part of an initialised cluster."""

    code = "not-cluster"
    exit_code = 5


class NotMasterError(CorralError):
    """The request needs the master node and this is not it; the message names the
    master. Exit status 1, as Ganeti's gnt-* tools (Ganeti's daemons exit 11)."""

    code = "not-master"
    retryable = True
    http_status = 502


class MasterUnreachableError(CorralError):
    """The master daemon does not answer on its socket."""

    code = "master-unreachable"
    retryable = True
    http_status = 502


class ProtocolError(CorralError):
    """A peer sent a message that does not follow the protocol."""

    code = "protocol-error"
    http_status = 502


class ConfirmationRequiredError(CorralError):
    """A destructive command was not confirmed (for example ``--yes-do-it``); printed
    alone and exit status 1, as Ganeti's tools (their 13 is for a declined question
    about a list of jobs or instances, see :data:`corral.cli.jobs.EXIT_CONFIRMATION`)."""

    code = "confirmation-required"
    http_status = 400


class DaemonError(CorralError):
    """A daemon could not be started, stopped or queried."""

    code = "daemon-error"


class LockError(CorralError):
    """A lock was used against its rules: released without being owned, acquired twice,
    or acquired out of level order. Always a bug in the caller, never the user's input."""

    code = "lock-error"


class LockDeletedError(LockError):
    """The lock was deleted (its object removed) before or while it was being acquired.

    Callers see this when a concurrent operation removed the instance, node or group
    they were about to lock; retrying with the same name cannot help.
    """

    code = "lock-deleted"
    http_status = 409


class QueryFilterError(ParameterError):
    """A query filter (list or text form) or a job-filter predicate is malformed;
    the message names the offending part and what is accepted there."""

    code = "query-filter"


class OpPrereqError(CorralError):
    """An opcode's prerequisites do not hold (e.g. the object is in the wrong state)."""

    code = "prereq-error"
    http_status = 400


class OpExecError(CorralError):
    """An opcode failed while executing."""

    code = "exec-error"


class JobQueueDrainedError(CorralError):
    """The job queue is drained: no new jobs are accepted until it is undrained."""

    code = "queue-drained"
    retryable = True
    http_status = 503


class JobCanceledError(CorralError):
    """The job that was followed ended canceled (by ``gnt-job cancel`` or a job
    filter's REJECT); the message says which job and, when known, why."""

    code = "job-canceled"
    http_status = 409


class RpcError(CorralError):
    """A node daemon answered with an error or not at all; the message names the node."""

    code = "rpc-error"
    http_status = 502


class NodeUnreachableError(RpcError):
    """A node daemon could not be reached (down, offline, timed out)."""

    code = "node-unreachable"
    retryable = True


class HypervisorError(CorralError):
    """The hypervisor refused or failed an operation on an instance."""

    code = "hypervisor-error"


class BlockDeviceError(CorralError):
    """Creating, removing, growing or activating a disk failed on a node."""

    code = "blockdev-error"


class OsError(CorralError):
    """An OS definition is missing, invalid, hidden or blacklisted for this use."""

    code = "os-error"
    http_status = 400


class OsNotFoundError(OsError):
    """No OS definition of that name is on a node's OS search path."""

    code = "os-not-found"
    http_status = 404


class OsScriptError(OsError):
    """An OS definition's script failed; the message quotes its last output lines."""

    code = "os-script-failed"
    http_status = 500


class JoinError(CorralError):
    """A node could not join the cluster (wrong token, already joined, bad bundle)."""

    code = "join-error"
    http_status = 403


class AccessDeniedError(CorralError):
    """The caller's identity may not do this (a node daemon procedure that changes the
    node, called without the master's client certificate)."""

    code = "access-denied"
    http_status = 403


class PlacementError(CorralError):
    """A placement request (``corral.placement``) is malformed: the message is
    OpenStack Placement's own text for the same mistake, ``placement_code`` its
    error code (``placement.undefined_code`` unless Placement names a finer one;
    ``None`` for what Placement reports as a JSON-schema error, which has no code)."""

    code = "placement-error"
    http_status = 400
    #: Placement's error code for this class when the instance does not give one.
    default_placement_code: ClassVar[str | None] = "placement.undefined_code"

    def __init__(self, message: str, *, placement_code: str | None = None,
                 schema_error: bool = False) -> None:
        super().__init__(message)
        #: Placement's ``code`` in its error body (``None``: the body has no code, as
        #: for Placement's JSON-schema errors, ``schema_error``).
        self.placement_code: str | None = (
            None if schema_error else placement_code or self.default_placement_code)


class PlacementNotFoundError(PlacementError):
    """A placement object (resource provider, resource class, trait, consumer) does
    not exist."""

    code = "placement-not-found"
    http_status = 404


class PlacementConflictError(PlacementError):
    """A placement change contradicts the stored state (inventory in use, capacity
    exceeded, a name already taken, a parent with children)."""

    code = "placement-conflict"
    http_status = 409


class PlacementConcurrentUpdateError(PlacementConflictError):
    """The generation a placement change was based on is no longer current (a resource
    provider's or a consumer's): someone else changed it first. Re-read and retry."""

    code = "placement-concurrent-update"
    default_placement_code = "placement.concurrent_update"
    retryable = True


class InternalError(CorralError):
    """A bug: something that should not happen did. The message says what."""

    code = "internal-error"


#: Up to this many known names, a message lists them all; beyond, the nearest few.
LIST_ALL_UP_TO = 8
#: How many near names a message suggests at most.
NEAREST = 3


def did_you_mean(names: str | Iterable[str], known: Iterable[str], *,
                 listing: str | None = None, noun: str = "valid ones") -> str:
    """The end of an "unknown NAME" message: every known name when there are few, else
    the nearest few to what was given ("did you mean 'maxmem'?") and the command
    that lists them all (``listing``), so that a typo does not bury the answer under
    a hundred names. ``noun`` says what the known names are ("known fields"); they are
    shown in the order given."""
    wanted = [names] if isinstance(names, str) else list(names)
    candidates = list(dict.fromkeys(known))
    if len(candidates) <= LIST_ALL_UP_TO:
        return f"{noun}: {', '.join(candidates) or '(none)'}"
    import difflib  # only a typo needs it; the command line starts without it

    near: list[str] = []
    for name in wanted:
        near += [n for n in difflib.get_close_matches(name, candidates, n=NEAREST, cutoff=0.6)
                 if n not in near]
    if listing:
        where = f"'{listing}' lists all {len(candidates)} {noun}"
    else:
        where = f"{len(candidates)} {noun}, for example {', '.join(candidates[:5])}, ..."
    if not near:
        return where
    return f"did you mean {' or '.join(repr(n) for n in near[:NEAREST])}? ({where})"


def _registry() -> dict[str, type[CorralError]]:
    found: dict[str, type[CorralError]] = {}
    pending: list[type[CorralError]] = [CorralError]
    while pending:
        cls = pending.pop()
        found[cls.code] = cls
        pending.extend(cls.__subclasses__())
    return found


#: How Ganeti names an error in a failed opcode's result (``opresult``): its exception
#: class and, for ``OpPrereqError``, its error code (Ganeti's ``ECODE_*`` values), so
#: that Ganeti's clients and scripts recognise what failed. Looked up along the class
#: hierarchy.
_GANETI: dict[type[CorralError], tuple[str, str | None]] = {
    CorralError: ("OpExecError", None),
    ParameterError: ("OpPrereqError", "wrong_input"),
    TagError: ("TagError", None),
    NotFoundError: ("OpPrereqError", "unknown_entity"),
    AlreadyExistsError: ("OpPrereqError", "already_exists"),
    OpPrereqError: ("OpPrereqError", "wrong_state"),
    OsError: ("OpPrereqError", "environment_error"),
    OsNotFoundError: ("OpPrereqError", "unknown_entity"),
    OsScriptError: ("OpExecError", None),
    OpExecError: ("OpExecError", None),
    ConfigurationError: ("ConfigurationError", None),
    ConfigStoreError: ("ConfigurationError", None),
    LockError: ("LockError", None),
    JobQueueDrainedError: ("JobQueueDrainError", None),
    HypervisorError: ("HypervisorError", None),
    BlockDeviceError: ("BlockDeviceError", None),
}


#: The corral class a Ganeti-encoded error comes back as (one per name and code).
_FROM_GANETI: dict[tuple[str, str | None], type[CorralError]] = {
    ("OpPrereqError", "wrong_input"): ParameterError,
    ("TagError", None): TagError,
    ("OpPrereqError", "unknown_entity"): NotFoundError,
    ("OpPrereqError", "already_exists"): AlreadyExistsError,
    ("OpPrereqError", "wrong_state"): OpPrereqError,
    ("OpPrereqError", "environment_error"): OsError,
    ("OpExecError", None): OpExecError,
    ("ConfigurationError", None): ConfigurationError,
    ("LockError", None): LockError,
    ("JobQueueDrainError", None): JobQueueDrainedError,
    ("HypervisorError", None): HypervisorError,
    ("BlockDeviceError", None): BlockDeviceError,
}


def to_ganeti(err: BaseException) -> list[Any]:
    """An opcode's error as Ganeti encodes it: ``[class name, [message]]``, or
    ``["OpPrereqError", [message, error code]]``; errors that are not corral's are
    reported as ``OpExecError``."""
    if not isinstance(err, CorralError):
        return ["OpExecError", [str(err)]]
    cls: type[CorralError] = type(err)
    while cls not in _GANETI:
        cls = cls.__bases__[0]
    name, ecode = _GANETI[cls]
    if name == "OpPrereqError" and err.ecode:
        ecode = err.ecode
    return [name, [err.message] if ecode is None else [err.message, ecode]]


def from_ganeti(result: Any) -> CorralError | None:
    """The error a failed opcode's result encodes (see :func:`to_ganeti`; also
    corral's own class names, as jobs stored before kept them), or None when the
    result is not in that form."""
    if not (isinstance(result, list | tuple) and len(result) == 2
            and isinstance(result[0], str) and isinstance(result[1], list | tuple)
            and result[1]):
        return None
    name, args = result
    message = str(args[0])
    ecode = args[1] if len(args) > 1 and isinstance(args[1], str) else None
    cls = _FROM_GANETI.get((name, ecode))
    if cls is None:
        cls = next((c for c in _registry().values() if c.__name__ == name), None)
    if cls is None:
        cls = OpPrereqError if name == "OpPrereqError" else OpExecError
    return cls(message, ecode=ecode)


#: Ganeti's first line for a job queue that refuses new jobs.
_DRAINED = "Failure: the job queue is marked for drain and doesn't accept new requests"
#: Ganeti's lines when its tools cannot reach the master daemon.
_NO_MASTER = ("Cannot communicate with the master daemon.\n"
              "Is the process running and listening for connections?")


def failure_text(err: CorralError) -> str:
    """What a gnt-* tool prints on stderr for ``err``: the lines Ganeti's tools print
    for the Ganeti error it stands for, which scripts look for, then corral's message
    (the detail, and any hint, follow Ganeti's first lines)::

        Failure: prerequisites not met for this operation:
        error type: unknown_entity, error details:
        Instance 'web1' not known
    """
    message = err.message
    if isinstance(err, NotMasterError | NotClusterError):
        # Ganeti's client raises these as OpPrereqError(..., ECODE_INVAL)
        return ("Failure: prerequisites not met for this operation:\n"
                f"error type: wrong_input, error details:\n{message}")
    if isinstance(err, MasterUnreachableError):
        return f"{_NO_MASTER}\n{message}"
    if isinstance(err, JobCanceledError):
        return f"Unhandled Ganeti error: Job was canceled\n{message}"
    if isinstance(err, ConfirmationRequiredError | NothingToChangeError):
        return message
    if isinstance(err, TagError):
        return f"Failure: invalid tag(s) given:\n{message}"
    if isinstance(err, QueryFilterError):
        return f"Error while parsing query filter: {message}"
    name, args = to_ganeti(err)
    if name == "OpPrereqError":
        return ("Failure: prerequisites not met for this operation:\n"
                f"error type: {args[1]}, error details:\n{message}")
    if name == "JobQueueDrainError":
        return f"{_DRAINED}\n{message}"
    # a hypervisor, disk or lock failure included: Ganeti's logical units report
    # such failures as OpExecError
    return f"Failure: command execution error:\n{message}"


def to_wire(err: CorralError) -> dict[str, Any]:
    """Encode an error for a luxi or RAPI answer."""
    return {"code": err.code, "message": err.message}


def from_wire(data: Any) -> CorralError:
    """Rebuild the error a peer sent; unknown codes become a plain :class:`CorralError`."""
    if not isinstance(data, dict) or not isinstance(data.get("message"), str):
        return ProtocolError(f"malformed error from peer: {data!r}")
    cls = _registry().get(str(data.get("code")), CorralError)
    return cls(data["message"])


def unexpected(err: BaseException, log: logging.Logger, what: str, daemon: str) -> InternalError:
    """The error to answer instead of ``err``, which is not a :class:`CorralError`.

    ``err``'s text may carry paths, values or secrets and helps no client, so it
    stays in the log: ``log`` gets the traceback with ``what`` failed and a fresh
    incident id, and the client gets an :class:`InternalError` naming that id and
    ``daemon`` (whose log to search).
    """
    import secrets  # only daemons report incidents; the command line starts without it

    incident = secrets.token_hex(4)
    log.error("%s failed unexpectedly (incident %s)", what, incident,
              exc_info=(type(err), err, err.__traceback__))
    return InternalError(f"internal error in {daemon}; its log has the details "
                         f"under incident {incident}")
