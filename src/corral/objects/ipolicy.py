"""Instance policies (Ganeti's ``ipolicy``): what instances a cluster or node group
accepts, and the standard size capacity planning counts with.

A policy is a plain dict with Ganeti's keys, so that it travels unchanged through
RAPI, the iallocator protocol and the htools:

- ``minmax``: a list of ``{"min": spec, "max": spec}`` pairs; an instance must fit
  one of them (every value between that pair's min and max);
- ``std``: the standard instance (cluster level only);
- ``disk-templates``: the disk templates instances may use;
- ``vcpu-ratio``: how many virtual CPUs a node's physical CPU may carry;
- ``spindle-ratio``: how many spindle uses a node's spindle may carry.

A spec has the six :data:`SPEC_PARAMETERS` (``memory-size`` and ``disk-size`` in MiB).
The cluster keeps a complete policy; a node group keeps only what it overrides
(``custom_ipolicy``), and :func:`group_policy` fills the rest from the cluster's, key
by key. The texts of refusals are Ganeti's, so scripts that read them keep working.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from corral.errors import OpPrereqError, ParameterError
from corral.objects.params import DISK_TEMPLATES, VALUE_DEFAULT

__all__ = [
    "DEFAULT_MINMAX",
    "DEFAULT_RATIOS",
    "DEFAULT_STD",
    "LENIENT_MIN",
    "MINMAX_KEYS",
    "POLICY_KEYS",
    "RATIO_KEYS",
    "SPEC_PARAMETERS",
    "check_policy",
    "default_policy",
    "disk_templates_not_enabled",
    "group_policy",
    "instance_violations",
    "lenient_bounds",
    "number",
    "spec_violations",
    "updated_policy",
]

#: The parameters of an instance specification, in Ganeti's (sorted) order.
SPEC_PARAMETERS: Final = ("cpu-count", "disk-count", "disk-size", "memory-size",
                          "nic-count", "spindle-use")
#: The two ends of a ``minmax`` entry.
MINMAX_KEYS: Final = ("min", "max")
#: The numeric (float) settings of a policy.
RATIO_KEYS: Final = ("spindle-ratio", "vcpu-ratio")
#: Every key a policy may have.
POLICY_KEYS: Final = ("minmax", "std", "disk-templates", *RATIO_KEYS)

#: Ganeti's built-in bounds.
DEFAULT_MINMAX: Final[Mapping[str, Mapping[str, int]]] = {
    "min": {"cpu-count": 1, "disk-count": 1, "disk-size": 1024, "memory-size": 128,
            "nic-count": 1, "spindle-use": 1},
    "max": {"cpu-count": 8, "disk-count": 16, "disk-size": 1048576, "memory-size": 32768,
            "nic-count": 8, "spindle-use": 12},
}
#: Ganeti's built-in standard instance.
DEFAULT_STD: Final[Mapping[str, int]] = {
    "cpu-count": 1, "disk-count": 1, "disk-size": 1024, "memory-size": 128,
    "nic-count": 1, "spindle-use": 1}
#: Ganeti's built-in ratios.
DEFAULT_RATIOS: Final[Mapping[str, int]] = {"spindle-ratio": 32, "vcpu-ratio": 4}


#: Lower bounds that let small instances in (1 MiB disks and memory, no NIC): the
#: bounds of the testbed's clusters, whose instances are tiny (Ganeti's defaults
#: refuse disks under 1 GiB).
LENIENT_MIN: Final[Mapping[str, int]] = {
    "cpu-count": 1, "disk-count": 1, "disk-size": 1, "memory-size": 1, "nic-count": 0,
    "spindle-use": 0}


def lenient_bounds() -> list[dict[str, dict[str, int]]]:
    """A ``minmax`` of :data:`LENIENT_MIN` and Ganeti's default maximums."""
    return [{"min": dict(LENIENT_MIN), "max": dict(DEFAULT_MINMAX["max"])}]


def number(value: float) -> float | int:
    """A ratio as Ganeti shows it: a whole number without its ``.0`` (``4``, ``2.5``)."""
    return int(value) if float(value).is_integer() else float(value)


def default_policy(disk_templates: Iterable[str]) -> dict[str, Any]:
    """The policy of a new cluster: Ganeti's defaults, allowing ``disk_templates``
    (the enabled ones, as Ganeti's ``init`` restricts them)."""
    return {
        "minmax": [{key: dict(DEFAULT_MINMAX[key]) for key in MINMAX_KEYS}],
        "std": dict(DEFAULT_STD),
        "disk-templates": list(disk_templates),
        **DEFAULT_RATIOS,
    }


def group_policy(cluster: Mapping[str, Any], custom: Mapping[str, Any]) -> dict[str, Any]:
    """The effective policy of a group: its own keys, the cluster's for the others
    (``std`` is merged parameter by parameter; a group never sets it)."""
    result = copy.deepcopy(dict(custom))
    for key, value in cluster.items():
        if key not in result:
            result[key] = copy.deepcopy(value)
        elif key == "std":
            result[key] = {**value, **result[key]}
    return result


def _spec(where: str, spec: Any, *, complete: bool) -> dict[str, int]:
    """A spec's values as integers; ``complete``: all six parameters needed."""
    if not isinstance(spec, Mapping):
        raise ParameterError(f"Invalid instance policy: {where} must be an object of "
                             f"{', '.join(SPEC_PARAMETERS)}, got {spec!r}")
    result: dict[str, int] = {}
    for name, value in spec.items():
        if name not in SPEC_PARAMETERS:
            raise ParameterError(f"Invalid instance policy: unknown parameter {name!r} in "
                                 f"{where}; valid: {', '.join(SPEC_PARAMETERS)}")
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(str(value))
            except ValueError:
                raise ParameterError(f"Invalid instance policy: {where} {name} must be a "
                                     f"whole number, got {value!r}") from None
        if value < 0:
            raise ParameterError(f"Invalid instance policy: {where} {name} must not be "
                                 f"negative, got {value}")
        result[name] = value
    missing = [name for name in SPEC_PARAMETERS if name not in result]
    if complete and missing:
        raise ParameterError(f"Invalid instance policy: Missing instance specs parameters "
                             f"for {where}: {', '.join(missing)}")
    return result


def _ratio(name: str, value: Any) -> float | int:
    if isinstance(value, bool):
        raise ParameterError(f"Invalid value for attribute '{name}': '{value}', error: "
                             "expected a number, not a boolean")
    try:
        result = float(value)
    except (TypeError, ValueError) as err:
        raise ParameterError(f"Invalid value for attribute '{name}': '{value}', error: "
                             f"{err}") from None
    if result <= 0:
        raise ParameterError(f"Invalid value for attribute '{name}': '{value}', error: "
                             "the ratio must be above 0")
    return number(result)


def _templates(value: Any, known: Sequence[str]) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ParameterError("Invalid instance policy: Instance policy must contain at least "
                             "one disk template")
    wrong = sorted({str(t) for t in value} - set(known))
    if wrong:
        raise ParameterError(f"Invalid instance policy: Invalid disk template(s) "
                             f"{', '.join(wrong)}\nknown disk templates: {', '.join(known)}")
    return [str(t) for t in value]


def check_policy(policy: Mapping[str, Any], *, cluster: bool,
                 known_templates: Sequence[str] = DISK_TEMPLATES) -> dict[str, Any]:
    """``policy`` checked and normalised (integers in specs, ratios as numbers).

    A cluster policy must be complete and its ``std`` inside one ``minmax`` pair; a
    group policy may leave keys out and may not have ``std``.

    :raises ParameterError: in Ganeti's words (``Invalid instance policy: ...``).
    """
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise ParameterError(f"Invalid instance policy: Invalid keys in ipolicy: "
                             f"{', '.join(unknown)}\nvalid keys: {', '.join(POLICY_KEYS)}")
    if cluster:
        missing = [key for key in POLICY_KEYS if key not in policy]
        if missing:
            raise ParameterError(f"Invalid instance policy: Missing key in ipolicy: "
                                 f"{', '.join(missing)}")
    elif "std" in policy:
        raise ParameterError("std cannot appear in group instance specs")
    result: dict[str, Any] = {}
    if "minmax" in policy:
        pairs = policy["minmax"]
        if not isinstance(pairs, list) or not pairs:
            raise ParameterError("Invalid instance policy: Empty minmax specifications")
        result["minmax"] = [_minmax(pair) for pair in pairs]
    if "std" in policy:
        result["std"] = _spec("std", policy["std"], complete=True)
    if "disk-templates" in policy:
        result["disk-templates"] = _templates(policy["disk-templates"], known_templates)
    for key in RATIO_KEYS:
        if key in policy:
            result[key] = _ratio(key, policy[key])
    if cluster and not any(_std_fits(pair, result["std"]) for pair in result["minmax"]):
        raise ParameterError("Invalid instance policy: Invalid std specifications\nthe std "
                             "values must lie between the min and max of one bounds pair")
    return result


def _minmax(pair: Any) -> dict[str, dict[str, int]]:
    if not isinstance(pair, Mapping):
        raise ParameterError(f"Invalid instance policy: a minmax entry must be an object "
                             f"with min and max, got {pair!r}")
    extra = sorted(set(pair) - set(MINMAX_KEYS))
    if extra:
        raise ParameterError(f"Invalid key in bounds instance specifications: "
                             f"{', '.join(extra)}")
    missing = [key for key in MINMAX_KEYS if key not in pair]
    if missing:
        raise ParameterError(f"Invalid instance policy: Missing instance specification: "
                             f"{', '.join(missing)}")
    low = _spec("min", pair["min"], complete=True)
    high = _spec("max", pair["max"], complete=True)
    for name in SPEC_PARAMETERS:
        if low[name] > high[name]:
            raise ParameterError(f"Invalid instance policy: Invalid specification of min/max "
                                 f"values for {name}: {low[name]}/{high[name]}")
    return {"min": low, "max": high}


def _std_fits(pair: Mapping[str, Mapping[str, int]], std: Mapping[str, int]) -> bool:
    return all(pair["min"][name] <= std.get(name, pair["min"][name]) <= pair["max"][name]
               for name in SPEC_PARAMETERS)


def _is_reset(value: Any) -> bool:
    return (value in (None, "", [], {}, VALUE_DEFAULT)
            or (isinstance(value, list) and value == [VALUE_DEFAULT]))


def updated_policy(old: Mapping[str, Any], changes: Mapping[str, Any], *, group: bool,
                   known_templates: Sequence[str] = DISK_TEMPLATES) -> dict[str, Any]:
    """``old`` with ``changes`` applied (Ganeti's ``ipolicy`` change semantics).

    A key whose value is empty or ``"default"`` is removed from a group's policy (the
    cluster's applies again); a cluster's keys cannot be removed. ``std`` changes
    are merged into the cluster's ``std``; the other keys are replaced whole.

    :raises ParameterError: for an unknown key, a bad value or an invalid result.
    """
    result = copy.deepcopy(dict(old))
    for key, value in changes.items():
        if key not in POLICY_KEYS:
            raise ParameterError(f"Invalid key in new ipolicy: {key}\nvalid keys: "
                                 f"{', '.join(POLICY_KEYS)}")
        if _is_reset(value):
            if not group:
                # Ganeti's text, its stray quote included
                raise ParameterError(f"Can't unset ipolicy attribute '{key}' on the cluster'")
            result.pop(key, None)
        elif key == "std":
            if group:
                raise ParameterError("std cannot appear in group instance specs")
            if not isinstance(value, Mapping):
                raise ParameterError(f"Invalid instance policy: std must be an object of "
                                     f"{', '.join(SPEC_PARAMETERS)}, got {value!r}")
            result[key] = {**result.get(key, {}), **_spec("std", value, complete=False)}
        else:
            result[key] = copy.deepcopy(value)
    return check_policy(result, cluster=not group, known_templates=known_templates)


def disk_templates_not_enabled(policy: Mapping[str, Any], enabled: Iterable[str]) -> None:
    """Refuse a policy allowing disk templates the cluster has not enabled."""
    missing = [t for t in policy.get("disk-templates", ()) if t not in set(enabled)]
    if missing:
        raise OpPrereqError(
            "The following disk templates are allowed by the ipolicy, but not enabled on the "
            f"cluster: {', '.join(missing)}", ecode="wrong_input")


def _out_of_range(name: str, qualifier: str, pair: Mapping[str, Mapping[str, int]],
                  value: int | None) -> str | None:
    if value is None:
        return None
    low, high = pair["min"].get(name, value), pair["max"].get(name, value)
    if low <= value <= high:
        return None
    where = f"{name}/{qualifier}" if qualifier else name
    return f"{where} value {value} is not in range [{low}, {high}]"


def spec_violations(policy: Mapping[str, Any], *, memory: int | None, cpus: int | None,
                    disk_sizes: Sequence[int], nic_count: int | None,
                    spindle_use: int | None, disk_templates: Sequence[str]) -> list[str]:
    """What an instance of these sizes breaks in ``policy`` (empty: it fits), in
    Ganeti's words: ``memory-size value 64 is not in range [128, 32768]``.

    A value of ``None`` is not checked. ``disk_templates`` has one entry per disk; an
    instance without disks needs ``diskless`` to be allowed. Of several ``minmax``
    pairs, the one the instance breaks least is reported.
    """
    allowed = list(policy.get("disk-templates", ()))
    problems: list[str] = []
    checks: list[tuple[str, str, int | None]] = [
        ("memory-size", "", memory), ("cpu-count", "", cpus), ("nic-count", "", nic_count),
        ("spindle-use", "", spindle_use),
        *(("disk-size", str(index), size) for index, size in enumerate(disk_sizes)),
    ]
    if disk_sizes:
        checks.append(("disk-count", "", len(disk_sizes)))
    elif "diskless" not in allowed:
        problems.append(f"Disk template diskless is not allowed (allowed templates "
                        f"{', '.join(allowed)})")
    forbidden = sorted(set(disk_templates) - set(allowed))
    if forbidden:
        problems.append(f"Disk template {', '.join(forbidden)} is not allowed (allowed "
                        f"templates: {', '.join(allowed)})")
    least: list[str] | None = None
    for pair in policy.get("minmax", ()):
        found = [text for text in (_out_of_range(name, qualifier, pair, value)
                                   for name, qualifier, value in checks) if text]
        if least is None or len(found) < len(least):
            least = found
    return problems + (least or [])


def instance_violations(policy: Mapping[str, Any], beparams: Mapping[str, Any],
                        disk_sizes: Sequence[int], disk_templates: Sequence[str],
                        nic_count: int, *, memory_key: str = "maxmem") -> list[str]:
    """:func:`spec_violations` of an instance given its filled backend parameters
    (``memory_key``: ``maxmem`` or ``minmem``), disks and NIC count."""
    return spec_violations(
        policy, memory=_int_or_none(beparams.get(memory_key)),
        cpus=_int_or_none(beparams.get("vcpus")), disk_sizes=list(disk_sizes),
        nic_count=nic_count, spindle_use=_int_or_none(beparams.get("spindle_use")),
        disk_templates=list(disk_templates))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
