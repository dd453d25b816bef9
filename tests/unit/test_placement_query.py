"""Parsing allocation-candidate query strings: every rule and 400 of MEMBER_OF_SPEC.md
(OpenStack Placement 16), microversion by microversion."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from corral.errors import PlacementError
from corral.placement.query import is_uuid_like, parse_allocation_candidates

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"
C = "cccccccc-0000-0000-0000-000000000003"
R = "resources=VCPU:1"
UUID_MSG = ("Invalid query string parameters: Expected 'member_of' parameter to contain "
            "valid UUID(s). Got: ")
MULTI_MSG = ("Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' "
             "keyword using the valid microversion. Got: ")
FORBIDDEN_MSG = "Forbidden member_of parameters are not supported in the specified microversion"


def _parse(query: str, version: tuple[int, int] = (1, 39)):  # type: ignore[no-untyped-def]
    return parse_allocation_candidates(parse_qsl(query, keep_blank_values=True), version)


# (query, microversion, exact message, Placement code or None for a schema error)
ERRORS = [
    # §1 microversion gates
    (f"{R}&member_of={A}", (1, 20),
     "Invalid query string parameters: Additional properties are not allowed "
     "('member_of' was unexpected)", None),
    (f"{R}&member_of={A}&member_of={B}", (1, 23),
     "Multiple member_of parameters are not supported", "placement.undefined_code"),
    (f"{R}&member_of=!{A}", (1, 31), FORBIDDEN_MSG, "placement.undefined_code"),
    (f"{R}&member_of=!in:{A},{B}", (1, 31), FORBIDDEN_MSG, "placement.undefined_code"),
    (f"{R}&resources1=VCPU:1&member_of1=!{A}", (1, 31),
     "Forbidden member_of1 parameters are not supported in the specified microversion",
     "placement.undefined_code"),
    (f"{R}&resources1=VCPU:1&member_of1={A}&member_of1={B}", (1, 23),
     "Invalid query string parameters: Additional properties are not allowed "
     "('resources1', 'member_of1' were unexpected)", None),
    (f"member_of3={A}&resources3=VCPU:1", (1, 24),
     "Invalid query string parameters: 'resources' is a required property", None),
    (f"{R}&member_of3={A}", (1, 24),
     "Invalid query string parameters: Additional properties are not allowed "
     "('member_of3' was unexpected)", None),
    (f"resources_x=VCPU:1&member_of_x={A}", (1, 32),
     "Invalid query string parameters: 'member_of_x', 'resources_x' do not match any of "
     "the regexes: '^in_tree([1-9][0-9]*)?$', '^member_of([1-9][0-9]*)?$', "
     "'^required([1-9][0-9]*)?$', '^resources([1-9][0-9]*)?$'", None),
    # §2 one value
    (f"{R}&member_of={A},{B}", (1, 39), MULTI_MSG + f"{A},{B}", "placement.undefined_code"),
    (f"{R}&member_of=!{A},{B}", (1, 39), MULTI_MSG + f"!{A},{B}", "placement.undefined_code"),
    (f"{R}&member_of=INVALID", (1, 39), UUID_MSG + "INVALID", "placement.undefined_code"),
    (f"{R}&member_of=in:", (1, 39), UUID_MSG, "placement.undefined_code"),
    (f"{R}&member_of=!in:", (1, 39), UUID_MSG, "placement.undefined_code"),
    (f"{R}&member_of=", (1, 39), UUID_MSG, "placement.undefined_code"),
    (f"{R}&member_of=!", (1, 39), UUID_MSG, "placement.undefined_code"),
    (f"{R}&member_of=in:{A},", (1, 39), UUID_MSG, "placement.undefined_code"),
    (f"{R}&member_of=in:{A},!{B}", (1, 39), UUID_MSG + f"!{B}", "placement.undefined_code"),
    (f"{R}&member_of=!in:{A},!{B}", (1, 39), UUID_MSG + f"!{B}", "placement.undefined_code"),
    (f"{R}&member_of=!!{A}", (1, 39), UUID_MSG + f"!{A}", "placement.undefined_code"),
    (f"{R}&member_of=IN:{A}", (1, 39), UUID_MSG + f"IN:{A}", "placement.undefined_code"),
    (f"{R}&member_of=%20{A}", (1, 39), UUID_MSG + f" {A}", "placement.undefined_code"),
    # §3 order of checks: an invalid UUID wins over the forbidden-microversion error,
    # the multiple-params check comes before any value is parsed
    (f"{R}&member_of=!INVALID", (1, 31), UUID_MSG + "INVALID", "placement.undefined_code"),
    (f"{R}&member_of=INVALID&member_of={A}", (1, 23),
     "Multiple member_of parameters are not supported", "placement.undefined_code"),
    # §4 where member_of may appear
    (f"member_of=!{A}", (1, 32),
     "All member_of parameters must be associated with resources. Found the following "
     "orphaned member_of keys: member_of", "placement.undefined_code"),
    (f"resources1=VCPU:1&member_of=!{A}", (1, 32),
     "All member_of parameters must be associated with resources. Found the following "
     "orphaned member_of keys: member_of", "placement.undefined_code"),
    (f"resources1=VCPU:1&member_of={A}&member_of3={A}", (1, 35),
     "All member_of parameters must be associated with resources. Found the following "
     "orphaned member_of keys: member_of, member_of3", "placement.undefined_code"),
    (f"resources1=VCPU:1&required=HW_CPU_X86_AVX&member_of={A}", (1, 35),
     "All traits parameters must be associated with resources.  Found the following "
     "orphaned traits keys: required", "placement.undefined_code"),
    (f"member_of={A}", (1, 36),
     "There must be at least one resources or resources[$S] parameter.",
     "placement.query.missing_value"),
    (f"resources1=VCPU:1&member_of={A}", (1, 36),
     "Resourceless suffixed group request should be specified in `same_subtree` query "
     "param: bad group(s) - [''].", "placement.query.bad_value"),
    (f"{R}&member_of2={A}", (1, 36),
     "Resourceless suffixed group request should be specified in `same_subtree` query "
     "param: bad group(s) - ['2'].", "placement.query.bad_value"),
    (f"{R}&member_of2=INVALID", (1, 36), UUID_MSG + "INVALID", "placement.undefined_code"),
    # other parameters
    ("resources=VCPU", (1, 39),
     "Badly formed resources parameter. Expected resources query string parameter in "
     "form: ?resources=VCPU:2,MEMORY_MB:1024. Got: VCPU.", "placement.undefined_code"),
    ("resources=VCPU:0", (1, 39), "Requested resource VCPU requires amount >= 1. Got: 0.",
     "placement.undefined_code"),
    ("resources=VCPU:x", (1, 39),
     "Requested resource VCPU expected positive integer amount. Got: x.",
     "placement.undefined_code"),
    (f"{R}&limit=0", (1, 39),
     "Invalid query string parameters: '0' does not match '^[1-9][0-9]*$'", None),
    (f"{R}&group_policy=some", (1, 39),
     "Invalid query string parameters: 'some' is not one of ['none', 'isolate']", None),
    (f"{R}&in_tree=nope", (1, 39),
     "Invalid query string parameters: Expected 'in_tree' parameter to be a format of "
     "uuid. Got: nope", "placement.undefined_code"),
    (f"{R}&required=in:A,B", (1, 38),
     "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only "
     "supported since microversion 1.39. Got: in:A,B", "placement.undefined_code"),
    (f"{R}&required=A,!A", (1, 39),
     "Conflicting required and forbidden traits found in the following traits keys: "
     "required: (A)", "placement.undefined_code"),
    (f"{R}&required=!A", (1, 21),
     "Invalid query string parameters: Expected 'required' parameter value of the form: "
     "HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: !A", "placement.undefined_code"),
    ("resources1=VCPU:1&resources2=VCPU:1", (1, 39),
     'The "group_policy" parameter is required when specifying more than one '
     '"resources{N}" parameter.', "placement.undefined_code"),
    (f"{R}&root_required=A&root_required=B", (1, 39),
     "Query parameter 'root_required' may be specified only once.",
     "placement.query.duplicate_key"),
    (f"{R}&same_subtree=,1", (1, 39),
     "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
     "placement.query.bad_value"),
]


@pytest.mark.parametrize(("query", "version", "message", "code"), ERRORS)
def test_bad_queries_give_placement_messages(query: str, version: tuple[int, int],
                                             message: str, code: str | None) -> None:
    with pytest.raises(PlacementError) as caught:
        _parse(query, version)
    assert caught.value.message == message
    assert caught.value.placement_code == code
    assert caught.value.http_status == 400


def test_forms_of_member_of() -> None:
    group = _parse(f"{R}&member_of={A}&member_of=in:{B},{C},{C}&member_of=!{A}"
                   f"&member_of=!in:{B},{C}").groups[""]
    assert group.member_of == (frozenset({A}), frozenset({B, C}))
    assert group.forbidden_aggs == frozenset({A, B, C})
    single = _parse(f"{R}&member_of=in:{A}&member_of=!in:{B}").groups[""]
    assert single.member_of == (frozenset({A}),) and single.forbidden_aggs == {B}


def test_suffixed_and_named_groups() -> None:
    request = _parse(f"{R}&resources1=VCPU:2&member_of1=!{A}&resources_NET=SRIOV_NET_VF:1"
                     f"&member_of_NET=in:{A},{B}&group_policy=isolate&limit=5")
    assert list(request.groups) == ["", "1", "_NET"]
    assert request.groups["1"].forbidden_aggs == {A} and request.groups["1"].use_same_provider
    assert request.groups["_NET"].member_of == (frozenset({A, B}),)
    assert not request.groups[""].use_same_provider
    assert (request.group_policy, request.limit) == ("isolate", 5)


def test_resourceless_group_in_same_subtree_from_1_36() -> None:
    request = _parse(f"resources_C=VCPU:1&member_of_N={A}&same_subtree=_C,_N"
                     "&group_policy=none")
    assert request.groups["_N"].resources == {} and request.same_subtrees == ({"_C", "_N"},)


def test_traits_any_of_forbidden_and_root_required() -> None:
    request = _parse(f"{R}&required=in:T1,T2&required=T3,!T4&root_required=R1,!R2")
    group = request.groups[""]
    assert group.required_traits == (frozenset({"T1", "T2"}), frozenset({"T3"}))
    assert group.forbidden_traits == {"T4"}
    assert (request.root_required, request.root_forbidden) == ({"R1"}, {"R2"})
    # before 1.39 only the last required counts
    assert _parse(f"{R}&required=T1&required=T2", (1, 38)).groups[""].required_traits == (
        frozenset({"T2"}),)


@pytest.mark.parametrize(("value", "like"), [
    (A, True), (A.upper(), True), (A.replace("-", ""), True), ("{" + A + "}", True),
    ("urn:uuid:" + A, True), ("INVALID", False), ("", False), (" " + A, False)])
def test_uuid_like_is_oslos(value: str, like: bool) -> None:
    assert is_uuid_like(value) is like
