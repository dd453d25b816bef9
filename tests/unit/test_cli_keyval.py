"""Ganeti's key=val and ident:key=val option syntaxes."""

from __future__ import annotations

import pytest

from corral.cli.keyval import (
    IdentValue,
    merge_ident_keyvals,
    parse_ident_keyval,
    parse_keyval,
    parse_multilist_ident_keyval,
    unescape_and_split,
)
from corral.errors import ParameterError


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("a,b", ["a", "b"]),
        ("", [""]),
        ("a,", ["a", ""]),
        (r"a\,b,c", ["a,b", "c"]),
        ("a\\\\,b", ["a\\", "b"]),
        ("a\\\\\\,b", ["a\\,b"]),
        (r"a\b", ["ab"]),
        ("trailing\\", ["trailing\\"]),
    ],
)
def test_unescape_and_split(text: str, items: list[str]) -> None:
    # Expected values checked against Ganeti's utils.UnescapeAndSplit.
    assert unescape_and_split(text) == items


def test_keyval_values_and_prefixes() -> None:
    assert parse_keyval("-B", "maxmem=1024,vcpus=2,no_auto_balance,-minmem,always") == {
        "maxmem": "1024",
        "vcpus": "2",
        "auto_balance": False,
        "minmem": None,
        "always": True,
    }


def test_keyval_edge_cases() -> None:
    assert parse_keyval("-B", "") == {}
    assert parse_keyval("-B", "a=") == {"a": ""}
    assert parse_keyval("-B", "a=b=c") == {"a": "b=c"}
    assert parse_keyval("-B", r"a=x\,y,b=z") == {"a": "x,y", "b": "z"}
    assert parse_keyval("-B", "-a=1") == {"-a": "1"}, "prefixes only apply to bare items"
    assert parse_keyval("-B", "no_a=1") == {"no_a": "1"}


def test_keyval_duplicate_names_option_and_key() -> None:
    with pytest.raises(ParameterError) as info:
        parse_keyval("-B", "vcpus=1,vcpus=2")
    assert "-B" in str(info.value)
    assert "'vcpus'" in str(info.value)


def test_keyval_duplicate_through_prefix() -> None:
    with pytest.raises(ParameterError, match="'acpi'"):
        parse_keyval("-H", "acpi=true,no_acpi")


@pytest.mark.parametrize("text", ["a=1,,b=2", "a=1,", "=1", "no_", "-"])
def test_keyval_empty_keys_are_refused(text: str) -> None:
    with pytest.raises(ParameterError, match="--node-parameters"):
        parse_keyval("--node-parameters", text)


def test_keyval_without_prefixes_needs_values() -> None:
    with pytest.raises(ParameterError, match=r"-X.*'flag'"):
        parse_keyval("-X", "a=1,flag", parse_prefixes=False)


def test_ident_keyval() -> None:
    assert parse_ident_keyval("-H", "kvm:kernel_path=,acpi=true") == (
        "kvm",
        {"kernel_path": "", "acpi": "true"},
    )
    assert parse_ident_keyval("-H", "kvm") == ("kvm", {})
    assert parse_ident_keyval("-H", "kvm:") == ("kvm", {})
    assert parse_ident_keyval("-H", "no_kvm") == ("kvm", False)
    assert parse_ident_keyval("-H", "-kvm") == ("kvm", None)
    assert parse_ident_keyval("--disk", "-1:size=10") == ("-1", {"size": "10"})
    assert parse_ident_keyval("-D", "plain:a=b:c") == ("plain", {"a": "b:c"})


def test_ident_removal_takes_no_parameters() -> None:
    with pytest.raises(ParameterError, match=r"-H.*'no_kvm'"):
        parse_ident_keyval("-H", "no_kvm:acpi=true")
    with pytest.raises(ParameterError, match=r"-H.*'-kvm'"):
        parse_ident_keyval("-H", "-kvm:acpi=true")


@pytest.mark.parametrize("text", [":a=b", "no_", "-"])
def test_ident_must_be_named(text: str) -> None:
    with pytest.raises(ParameterError, match="-H"):
        parse_ident_keyval("-H", text)


def test_ident_keyval_errors_in_values_name_the_option() -> None:
    with pytest.raises(ParameterError, match=r"-H.*duplicate key 'a'"):
        parse_ident_keyval("-H", "kvm:a=1,a=2")


def test_merge() -> None:
    items: list[tuple[str, IdentValue]] = [
        ("kvm", {"acpi": "true"}),
        ("fake", None),
        ("xen", False),
    ]
    assert merge_ident_keyvals("-H", items) == {"kvm": {"acpi": "true"}, "fake": None, "xen": False}
    with pytest.raises(ParameterError, match=r"-H.*'kvm'"):
        merge_ident_keyvals("-H", [("kvm", {}), ("kvm", {"a": "b"})])


def test_multilist() -> None:
    assert parse_multilist_ident_keyval(
        "--ipolicy-bounds-specs", "min:cpu-count=1,memory-size=128/max:cpu-count=8//min:cpu-count=2"
    ) == [
        {"min": {"cpu-count": "1", "memory-size": "128"}, "max": {"cpu-count": "8"}},
        {"min": {"cpu-count": "2"}},
    ]
    with pytest.raises(ParameterError, match="empty section"):
        parse_multilist_ident_keyval("--ipolicy-bounds-specs", "min:a=1//")
    with pytest.raises(ParameterError, match="'min' given twice"):
        parse_multilist_ident_keyval("--ipolicy-bounds-specs", "min:a=1/min:a=2")
    with pytest.raises(ParameterError, match="missing value"):
        parse_multilist_ident_keyval("--ipolicy-bounds-specs", "min:flag")
