"""A plugin's answer, checked: ``{"success", "info", "result"}`` with the result shape
the request type demands (Ganeti's rules and words).

- ``allocate``: the list of chosen node names, as many as the request needs;
- ``relocate``: a list of node names, in the groups of the instance's nodes;
- ``multi-allocate``: ``[[[name, [nodes]], ...], [failed names]]``;
- ``node-evacuate`` and ``change-group``: ``[moved, failed, jobs]``, with ``moved``
  ``[[name, group, [nodes]], ...]``, ``failed`` ``[[name, reason], ...]`` and
  ``jobs`` lists of opcodes (failover, migrate or replace-disks) in dict form.

An old plugin's ``nodes`` key is read as ``result``. Whatever does not parse or has
the wrong shape is an :class:`~corral.errors.OpExecError` naming what was wrong; a
well-formed answer with ``success: false`` is returned as it is (the caller words
the failure for its operation).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from corral.errors import OpExecError

__all__ = ["JOB_OPCODES", "Answer", "parse_answer"]

#: The opcodes an evacuation or group change may return.
JOB_OPCODES: Final = ("OP_INSTANCE_FAILOVER", "OP_INSTANCE_MIGRATE",
                      "OP_INSTANCE_REPLACE_DISKS")


@dataclass(frozen=True, slots=True)
class Answer:
    """A checked answer."""

    success: bool
    info: str
    result: Any


def parse_answer(text: str | bytes, data: Mapping[str, Any]) -> Answer:
    """Parse and check a plugin's answer to the input ``data`` (its ``request``)."""
    try:
        answer = json.loads(text)
    except ValueError as err:
        raise OpExecError(f"Can't parse iallocator results: {err}") from None
    if not isinstance(answer, dict):
        raise OpExecError("Can't parse iallocator results: not a dict")
    if "nodes" in answer and "result" not in answer:
        answer["result"] = answer.pop("nodes")
    for key in ("success", "info", "result"):
        if key not in answer:
            raise OpExecError(f"Can't parse iallocator results: missing key '{key}'")
    result = Answer(success=bool(answer["success"]), info=str(answer["info"]),
                    result=answer["result"])
    if result.success:
        _check_result(data, result.result)
    return result


def _invalid(expected: str, got: Any) -> OpExecError:
    return OpExecError(f"iallocator returned invalid result, expected {expected}, got {got!r}")


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _check_result(data: Mapping[str, Any], result: Any) -> None:
    request = data.get("request", {})
    mode = request.get("type")
    if mode == "allocate":
        if not _names(result):
            raise _invalid("a list of node names", result)
        needed = request.get("required_nodes", 1)
        if len(result) != needed:
            raise OpExecError(f"iallocator returned invalid number of nodes ({len(result)}), "
                              f"required {needed}")
    elif mode == "relocate":
        if not _names(result):
            raise _invalid("a list of node names", result)
        _check_relocation_groups(data, request, result)
    elif mode == "multi-allocate":
        if not (isinstance(result, list) and len(result) == 2
                and isinstance(result[0], list)
                and all(isinstance(item, list) and len(item) == 2
                        and isinstance(item[0], str) and item[0] and _names(item[1])
                        for item in result[0])
                and _names(result[1])):
            raise _invalid("[[[instance, [nodes]], ...], [failed instances]]", result)
    elif mode in ("node-evacuate", "change-group"):
        _check_evacuation(result)


def _check_evacuation(result: Any) -> None:
    shape = "[[[instance, group, [nodes]], ...], [[instance, reason], ...], [[opcode, ...], ...]]"
    if not (isinstance(result, list) and len(result) == 3):
        raise _invalid(shape, result)
    moved, failed, jobs = result
    if not (isinstance(moved, list)
            and all(isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and m[0]
                    and isinstance(m[1], str) and m[1] and _names(m[2]) for m in moved)):
        raise _invalid(shape, result)
    if not (isinstance(failed, list)
            and all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and f[0]
                    and (f[1] is None or isinstance(f[1], str)) for f in failed)):
        raise _invalid(shape, result)
    if not (isinstance(jobs, list) and all(isinstance(job, list) for job in jobs)):
        raise _invalid(shape, result)
    for job in jobs:
        for op in job:
            if not isinstance(op, dict) or op.get("OP_ID") not in JOB_OPCODES:
                raise _invalid(f"jobs of opcodes {', '.join(JOB_OPCODES)}", result)


def _check_relocation_groups(data: Mapping[str, Any], request: Mapping[str, Any],
                             result: Sequence[str]) -> None:
    """A relocation must stay within the groups of the instance's nodes."""
    nodes = data.get("nodes", {})
    groups = data.get("nodegroups", {})
    instance = data.get("instances", {}).get(request.get("name"), {})
    primary = list(instance.get("nodes", [])[:1])

    def group_names(names: Sequence[str]) -> list[str]:
        found: set[str] = set()
        for name in names:
            uuid = nodes.get(name, {}).get("group")
            if uuid is not None:
                found.add(groups.get(uuid, {}).get("name", uuid))
        return sorted(found)

    wanted = group_names([*request.get("relocate_from", []), *primary])
    got = group_names([*result, *primary])
    if not set(got) <= set(wanted):
        raise OpExecError(f"Groups of nodes returned by iallocator ({', '.join(got)}) differ "
                          f"from original groups ({', '.join(wanted)})")
