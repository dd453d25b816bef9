"""Parsing ``GET /allocation_candidates`` query strings, microversion by microversion.

The input is the query string as ``(key, value)`` pairs in their order (repeated keys
kept, blank values kept) and the requested microversion; the output an
:class:`AllocationCandidatesRequest`, or a :class:`~corral.errors.PlacementError` whose
message is OpenStack Placement's own text for the same mistake (16.0.0, up to 1.39), in
the order Placement checks:

1. the query-string schema of the microversion (unknown or not-yet-allowed keys,
   ``limit``, ``group_policy``); these errors carry no Placement code
   (``schema_error``), as Placement's JSON-schema errors have none;
2. request-wide parameters (``root_required``, ``same_subtree``);
3. each group's parameters in query-string order (``resources``, ``required``,
   ``member_of``, ``in_tree``);
4. the checks across groups (orphans before 1.36, resourceless groups from 1.36,
   conflicting traits, ``group_policy`` needed for several numbered groups).

What needs the store (unknown resource classes and traits) is checked when the request is
answered (:mod:`corral.placement.candidates`).
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from corral.errors import PlacementError

__all__ = ["AllocationCandidatesRequest", "RequestGroup", "Version", "is_uuid_like",
           "parse_allocation_candidates", "parse_member_of", "parse_required",
           "parse_resources", "schema_error"]

Version = tuple[int, int]

_KINDS = ("resources", "required", "member_of", "in_tree")
_NUMBERED = "[1-9][0-9]*"
_NAMED = "[a-zA-Z0-9_-]{1,64}"
_GROUP_KEY = re.compile(rf"^({'|'.join(_KINDS)})({_NUMBERED})?$")
_GROUP_KEY_1_33 = re.compile(rf"^({'|'.join(_KINDS)})({_NAMED})?$")
_LIMIT = "^[1-9][0-9]*$"

MISSING_VALUE = "placement.query.missing_value"
BAD_VALUE = "placement.query.bad_value"
DUPLICATE = "placement.query.duplicate_key"


def is_uuid_like(value: str) -> bool:
    """Whether ``value`` passes the UUID check Placement uses (oslo's
    ``is_uuid_like``): any case, with or without dashes, braces or ``urn:uuid:``."""
    try:
        canonical = str(uuidlib.UUID(value)).replace("-", "")
    except (TypeError, ValueError, AttributeError):
        return False
    bare = value.replace("urn:", "").replace("uuid:", "").strip("{}").replace("-", "")
    return canonical == bare.lower()


@dataclass(frozen=True)
class RequestGroup:
    """One request group: the unsuffixed one (``suffix == ""``, which may be spread over
    a tree and sharing providers) or a suffixed one (``resources1``, ``resources_X``:
    one provider supplies all of it)."""

    suffix: str
    resources: dict[str, int] = field(default_factory=dict)
    #: AND of any-of sets of trait names
    required_traits: tuple[frozenset[str], ...] = ()
    forbidden_traits: frozenset[str] = frozenset()
    #: AND of any-of sets of aggregate uuids
    member_of: tuple[frozenset[str], ...] = ()
    forbidden_aggs: frozenset[str] = frozenset()
    in_tree: str | None = None

    @property
    def use_same_provider(self) -> bool:
        """Whether one provider must supply the whole group (every suffixed group)."""
        return bool(self.suffix)


@dataclass(frozen=True)
class AllocationCandidatesRequest:
    """A parsed ``GET /allocation_candidates`` request."""

    version: Version
    #: groups by suffix, in the order their first key appeared
    groups: dict[str, RequestGroup]
    limit: int | None = None
    group_policy: str | None = None
    root_required: frozenset[str] = frozenset()
    root_forbidden: frozenset[str] = frozenset()
    same_subtrees: tuple[frozenset[str], ...] = ()


def _bad(message: str, code: str | None = None) -> PlacementError:
    return PlacementError(message, placement_code=code)


def schema_error(message: str) -> PlacementError:
    """An error Placement reports from its JSON-schema check of a query string (no
    Placement code)."""
    return PlacementError(f"Invalid query string parameters: {message}", schema_error=True)


# ----- 1. the schema -----

def _schema_check(params: Sequence[tuple[str, str]], version: Version) -> None:
    last: dict[str, str] = {}
    for key, value in params:
        last[key] = value  # as Placement's schema sees it: the last value of each key
    order = list(dict.fromkeys(k for k, _ in params))
    props = {"resources"}
    if version >= (1, 16):
        props.add("limit")
    if version >= (1, 17):
        props.add("required")
    if version >= (1, 21):
        props.add("member_of")
    if version < (1, 25):
        if "resources" not in last:
            raise schema_error("'resources' is a required property")
        extras = [k for k in order if k not in props]
        if extras:
            listed = ", ".join(repr(k) for k in extras)
            verb = "was" if len(extras) == 1 else "were"
            raise schema_error(
                f"Additional properties are not allowed ({listed} {verb} unexpected)")
    else:
        props = {"limit", "group_policy"}
        kinds = ["resources", "required", "member_of"]
        if version >= (1, 31):
            kinds.append("in_tree")
        if version >= (1, 35):
            props.add("root_required")
        if version >= (1, 36):
            props.add("same_subtree")
        group = _NAMED if version >= (1, 33) else _NUMBERED
        patterns = sorted(f"^{kind}({group})?$" for kind in kinds)
        compiled = [re.compile(p) for p in patterns]
        extras = [k for k in order if k not in props
                  and not any(c.match(k) for c in compiled)]
        if extras:
            listed = ", ".join(repr(k) for k in sorted(extras))
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in patterns)
            raise schema_error(f"{listed} {verb} not match any of the regexes: {regexes}")
    if "limit" in last and not re.match(_LIMIT, last["limit"]):
        raise schema_error(f"{last['limit']!r} does not match {_LIMIT!r}")
    if "group_policy" in last and last["group_policy"] not in ("none", "isolate"):
        raise schema_error(f"{last['group_policy']!r} is not one of ['none', 'isolate']")


# ----- 3. values -----

def parse_resources(value: str) -> dict[str, int]:
    """Parse a ``resources`` value (``VCPU:2,MEMORY_MB:1024``) into amounts by class."""
    expected = ("Badly formed resources parameter. Expected resources query string "
                "parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: ")
    if value.strip() == "":
        raise _bad(expected + "empty string.")
    out: dict[str, int] = {}
    for item in value.split(","):
        parts = item.split(":")
        if len(parts) != 2:
            raise _bad(f"{expected}{item}.")
        name, raw = parts
        try:
            amount = int(raw)
        except ValueError:
            raise _bad(f"Requested resource {name} expected positive integer amount. "
                       f"Got: {raw}.") from None
        if amount < 1:
            raise _bad(f"Requested resource {name} requires amount >= 1. Got: {amount}.")
        out[name] = amount
    return out


def _parse_traits(value: str, allow_forbidden: bool, allow_any: bool,
                  ) -> tuple[list[frozenset[str]], set[str]]:
    prefix = "Invalid query string parameters: "
    if value.startswith("in:"):
        if not allow_any:
            raise _bad(f"{prefix}The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only "
                       f"supported since microversion 1.39. Got: {value}")
        any_of = {item.strip() for item in value[3:].split(",")}
        if not all(any_of):
            raise _bad(f"{prefix}Expected 'required' parameter value of the form: "
                       f"in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: {value}")
        if any(t.startswith("!") for t in any_of):
            raise _bad(f"{prefix}The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not "
                       f"support forbidden traits. Got: {value}")
        return [frozenset(any_of)], set()
    names = [item.strip() for item in value.split(",")]
    forbidden = {n.lstrip("!") for n in names if n.startswith("!")}
    if not all(names) or not all(forbidden):
        form = "HW_CPU_X86_VMX,!CUSTOM_MAGIC" if allow_forbidden else "HW_CPU_X86_VMX,CUSTOM_MAGIC"
        raise _bad(f"{prefix}Expected 'required' parameter value of the form: {form}. "
                   f"Got an empty trait in: {value}")
    if forbidden and not allow_forbidden:
        raise _bad(f"{prefix}Expected 'required' parameter value of the form: "
                   f"HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}")
    return [frozenset({n}) for n in names if not n.startswith("!")], forbidden


def _member_of_value(value: str) -> tuple[set[str], set[str]]:
    if "," in value and not (value.startswith("in:") or value.startswith("!in:")):
        raise _bad("Multiple values for 'member_of' must be prefixed with the 'in:' or "
                   f"'!in:' keyword using the valid microversion. Got: {value}")
    required: set[str] = set()
    forbidden: set[str] = set()
    if value.startswith("!in:"):
        forbidden = set(value[4:].split(","))
    elif value.startswith("!"):
        forbidden = {value[1:]}
    elif value.startswith("in:"):
        required = set(value[3:].split(","))
    else:
        required = {value}
    for item in sorted(required | forbidden):
        if not is_uuid_like(item):
            raise _bad("Invalid query string parameters: Expected 'member_of' parameter "
                       f"to contain valid UUID(s). Got: {item}")
    return required, forbidden


def parse_member_of(values: Sequence[str], version: Version, suffix: str = "",
                    ) -> tuple[tuple[frozenset[str], ...], frozenset[str]]:
    """Parse every ``member_of<suffix>`` value of a request (for
    ``/allocation_candidates`` and ``/resource_providers`` alike): the AND of any-of
    sets of required aggregates, and the union of the forbidden ones.

    Repeating the parameter needs 1.24, ``!`` and ``!in:`` need 1.32."""
    if version < (1, 24) and len(values) > 1:
        raise _bad(f"Multiple member_of{suffix} parameters are not supported")
    required: list[frozenset[str]] = []
    forbidden: set[str] = set()
    for value in values:
        wanted, excluded = _member_of_value(value)
        if wanted:
            required.append(frozenset(wanted))
        if excluded:
            if version < (1, 32):
                raise _bad(f"Forbidden member_of{suffix} parameters are not supported in "
                           "the specified microversion")
            forbidden |= excluded
    return tuple(required), frozenset(forbidden)


def parse_required(params: Sequence[tuple[str, str]], key: str, version: Version,
                   ) -> tuple[tuple[frozenset[str], ...], frozenset[str]]:
    """Parse every ``key`` (``required<suffix>``) value: the AND of any-of trait sets
    and the forbidden traits (``!T`` from 1.22; ``in:`` and repeats from 1.39, before
    which only the last value counts)."""
    values = [v for k, v in params if k == key]
    if version < (1, 39):
        values = values[-1:]
    required: list[frozenset[str]] = []
    forbidden: set[str] = set()
    for value in values:
        wanted, excluded = _parse_traits(value, version >= (1, 22), version >= (1, 39))
        required += wanted
        forbidden |= excluded
    return tuple(required), frozenset(forbidden)


def _in_tree(value: str) -> str:
    stripped = value.strip()
    if not is_uuid_like(stripped):
        raise _bad("Invalid query string parameters: Expected 'in_tree' parameter to be "
                   f"a format of uuid. Got: {value}")
    return stripped


def _groups(params: Sequence[tuple[str, str]], version: Version) -> dict[str, RequestGroup]:
    pattern = _GROUP_KEY_1_33 if version >= (1, 33) else _GROUP_KEY
    fields: dict[str, dict[str, object]] = {}
    for key, value in params:
        match = pattern.match(key)
        if match is None:
            continue
        kind, suffix = match.group(1), match.group(2) or ""
        group = fields.setdefault(suffix, {})
        if kind == "resources":
            group["resources"] = parse_resources(value)
        elif kind == "required":
            group["required_traits"], group["forbidden_traits"] = parse_required(
                params, key, version)
        elif kind == "member_of":
            group["member_of"], group["forbidden_aggs"] = parse_member_of(
                [v for k, v in params if k == key], version, suffix)
        else:
            group["in_tree"] = _in_tree(value)
    return {suffix: RequestGroup(suffix, **values)  # type: ignore[arg-type]
            for suffix, values in fields.items()}


# ----- 2. and 4. request-wide parameters and checks across groups -----

def _root_required(values: list[str]) -> tuple[frozenset[str], frozenset[str]]:
    if not values:
        return frozenset(), frozenset()
    if len(values) > 1:
        raise _bad("Query parameter 'root_required' may be specified only once.", DUPLICATE)
    wanted, excluded = _parse_traits(values[0], True, False)
    required = {name for group in wanted for name in group}
    conflicts = required & excluded
    if conflicts:
        raise _bad("Conflicting required and forbidden traits found in root_required: "
                   f"{', '.join(sorted(conflicts))}", BAD_VALUE)
    return frozenset(required), frozenset(excluded)


def _same_subtrees(values: Iterable[str]) -> tuple[frozenset[str], ...]:
    out = []
    for value in values:
        suffixes = frozenset(item.strip() for item in value.split(","))
        if "" in suffixes:
            raise _bad("Empty string (unsuffixed group) can not be specified in "
                       "`same_subtree` ", BAD_VALUE)
        out.append(suffixes)
    return tuple(out)


def _check_groups(groups: dict[str, RequestGroup], version: Version,
                  same_subtrees: tuple[frozenset[str], ...]) -> None:
    if version >= (1, 36):
        resourceless = [s for s, g in groups.items() if not g.resources]
        if len(resourceless) == len(groups):
            raise _bad("There must be at least one resources or resources[$S] parameter.",
                       MISSING_VALUE)
        in_subtrees = set().union(*same_subtrees)
        bad = [s for s in resourceless if s not in in_subtrees]
        if bad:
            raise _bad("Resourceless suffixed group request should be specified in "
                       f"`same_subtree` query param: bad group(s) - {bad}.", BAD_VALUE)
        unknown = [s for s in in_subtrees if s not in groups]
        if unknown:
            raise _bad(f"Real suffixes should be specified in `same_subtree`: {unknown} "
                       f"not found in {list(groups)}.", BAD_VALUE)
    else:
        orphans = [f"required{s}" for s, g in groups.items()
                   if g.required_traits and not g.resources]
        if orphans:
            raise _bad("All traits parameters must be associated with resources.  Found "
                       f"the following orphaned traits keys: {', '.join(orphans)}")
        orphans = [f"member_of{s}" for s, g in groups.items()
                   if not g.resources and (g.member_of or g.forbidden_aggs)]
        if orphans:
            raise _bad("All member_of parameters must be associated with resources. Found "
                       f"the following orphaned member_of keys: {', '.join(orphans)}")
        if not all(g.resources for g in groups.values()):
            raise _bad("All request groups must specify resources.")
        if not groups:
            raise _bad("At least one request group (`resources` or `resources{$S}`) is "
                       "required.")
    if version >= (1, 22):
        conflicts = sorted(
            f"required{s}: ({', '.join(sorted(any_of))})"
            for s, g in groups.items() for any_of in g.required_traits
            if all(t in g.forbidden_traits for t in any_of))
        if conflicts:
            raise _bad("Conflicting required and forbidden traits found in the following "
                       f"traits keys: {', '.join(conflicts)}")


def parse_allocation_candidates(params: Sequence[tuple[str, str]], version: Version,
                                ) -> AllocationCandidatesRequest:
    """Parse a ``GET /allocation_candidates`` query string (``(key, value)`` pairs in
    order) at microversion ``version`` (1.10 or later, where the endpoint exists)."""
    _schema_check(params, version)

    def all_of(key: str) -> list[str]:
        return [v for k, v in params if k == key]

    limits = all_of("limit")
    policies = all_of("group_policy")
    root_required, root_forbidden = _root_required(all_of("root_required"))
    same_subtrees = _same_subtrees(all_of("same_subtree"))
    groups = _groups(params, version)
    _check_groups(groups, version, same_subtrees)
    group_policy = policies[0] if policies else None
    if group_policy is None and sum(1 for g in groups.values() if g.use_same_provider) > 1:
        raise _bad('The "group_policy" parameter is required when specifying more than '
                   'one "resources{N}" parameter.')
    return AllocationCandidatesRequest(
        version, groups, int(limits[0]) if limits else None, group_policy,
        root_required, root_forbidden, same_subtrees)
