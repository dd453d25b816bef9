"""Tables and info output, compared with what Ganeti's own functions print.

Every expected string here was produced once by Ganeti 3.0's ``cli.FormatTable``,
``cli._SerializeGenericInfo`` (as ``PrintGenericInfo`` prints it) or
``utils.FormatUnit`` on the same input.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.cli.output import (
    effective_units,
    format_bool,
    format_info,
    format_table,
    format_unit,
)
from corral.objects.params import parse_size

# -- tables ------------------------------------------------------------------------

HEADERS = ["Node", "DTotal", "Pinst"]
ROWS = [["node1.example.com", 102400, 3], ["n2", 5, 12]]


def test_table_aligns_and_right_aligns_numbers() -> None:
    assert format_table(HEADERS, ROWS, numeric_columns={1, 2}) == [
        "Node              DTotal Pinst",
        "node1.example.com 102400     3",
        "n2                     5    12",
    ]


def test_table_last_left_aligned_column_is_not_padded() -> None:
    assert format_table(["Count", "Name"], [[1, "a"], [100, "longer"]], numeric_columns=[0]) == [
        "Count Name",
        "    1 a",
        "  100 longer",
    ]


def test_table_without_headers() -> None:
    assert format_table(HEADERS, ROWS, no_headers=True) == [
        "node1.example.com 102400 3",
        "n2                5      12",
    ]


def test_table_with_separator_is_not_padded() -> None:
    assert format_table(HEADERS, ROWS, separator="|", numeric_columns={1}) == [
        "Node|DTotal|Pinst",
        "node1.example.com|102400|3",
        "n2|5|12",
    ]
    assert format_table(HEADERS, ROWS, separator=":", no_headers=True) == [
        "node1.example.com:102400:3",
        "n2:5:12",
    ]


def test_table_empty() -> None:
    assert format_table(HEADERS, []) == ["Node DTotal Pinst"]
    assert format_table(HEADERS, [], no_headers=True) == []


def test_table_header_wider_than_cells() -> None:
    assert format_table(["Instance", "OS"], [["a", "debootstrap+default"]]) == [
        "Instance OS",
        "a        debootstrap+default",
    ]


def test_table_refuses_ragged_rows() -> None:
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        format_table(HEADERS, [["a", 1]])


def test_units() -> None:
    cases = {
        0: ("0M", "0", "0.0", "0.0"),
        512: ("512M", "512", "0.5", "0.0"),
        1023: ("1023M", "1023", "1.0", "0.0"),
        1024: ("1.0G", "1024", "1.0", "0.0"),
        1536: ("1.5G", "1536", "1.5", "0.0"),
        2047.9: ("2.0G", "2048", "2.0", "0.0"),
        1048575: ("1024.0G", "1048575", "1024.0", "1.0"),
        1048576: ("1.0T", "1048576", "1024.0", "1.0"),
        5242881: ("5.0T", "5242881", "5120.0", "5.0"),
    }
    for value, expected in cases.items():
        assert tuple(format_unit(value, u) for u in "hmgt") == expected, value
    with pytest.raises(ValueError):
        format_unit(1, "k")


def test_effective_units() -> None:
    assert effective_units(None, None) == "h"
    assert effective_units(None, "|") == "m"
    assert effective_units("g", "|") == "g"


def test_format_bool() -> None:
    assert (format_bool(True), format_bool(False)) == ("Y", "N")


# -- info --------------------------------------------------------------------------


def test_info_like_gnt_cluster_info() -> None:
    data = [
        ("Cluster name", "cluster.example.com"),
        ("Tags", "(none)"),
        ("Hypervisor parameters", {"kvm": {"kernel_path": "", "acpi": "True"}, "fake": {}}),
        (
            "Cluster parameters",
            [
                ("candidate pool size", "10"),
                ("uid pool", "1000-1999, 3000"),
                ("default instance allocator parameters", {}),
            ],
        ),
        ("Enabled hypervisors", ["kvm", "fake"]),
        ("Empty list", []),
    ]
    # Ganeti leaves a space after every "key:" that opens a block, and so do we.
    assert format_info(data) == "\n".join(
        [
            "Cluster name: cluster.example.com",
            "Tags: (none)",
            "Hypervisor parameters: ",
            "  fake: ",
            "  kvm: ",
            "    acpi: True",
            "    kernel_path: ",
            "Cluster parameters: ",
            "  candidate pool size: 10",
            "  uid pool: 1000-1999, 3000",
            "  default instance allocator parameters: ",
            "Enabled hypervisors: ",
            "  - kvm",
            "  - fake",
            "Empty list: ",
        ]
    )


def test_info_alignment_groups_and_inline_tuples() -> None:
    data = [
        ("Node", "node1", "a"),
        ("primary ip", "192.0.2.1", "a"),
        ("secondary ip", "198.51.100.1", "a"),
        ("Other", ("x", 1, None)),
    ]
    assert format_info(data) == "\n".join(
        [
            "Node:         node1",
            "primary ip:   192.0.2.1",
            "secondary ip: 198.51.100.1",
            "Other: [x, 1, None]",
        ]
    )


def test_info_lists_of_structures() -> None:
    data = [
        (
            "Disks",
            [
                [("disk/0", "plain, size 1.0G"), ("access mode", "rw")],
                {"name": "disk1", "size": 2048},
            ],
        ),
        ("NICs", [("a", "b"), ("c", [1, 2])]),
    ]
    assert format_info(data) == "\n".join(
        [
            "Disks: ",
            "  - disk/0: plain, size 1.0G",
            "    access mode: rw",
            "  - name: disk1",
            "    size: 2048",
            "NICs: ",
            "  a: b",
            "  c: ",
            "    - 1",
            "    - 2",
        ]
    )


def test_info_top_level_dict_is_sorted() -> None:
    data = {"b": "2", "a": ["x", {"k": "v"}], "c": (["nested"],)}
    assert format_info(data) == "\n".join(
        ["a: ", "  - x", "  - k: v", "b: 2", "c: ", "  - - nested"]
    )


def test_info_plain_values() -> None:
    assert format_info("text") == "text"
    assert format_info(42) == "42"
    assert format_info({}) == ""


@pytest.mark.parametrize(
    ("mib", "unit", "text"),
    [
        (512, "h", "512M"), (1024, "h", "1.0G"), (1536, "h", "1.5G"),
        (1024 * 1024, "h", "1.0T"), (0, "h", "0M"), (1536, "m", "1536"),
        (1536, "g", "1.5"), (1024 * 1024 * 2, "t", "2.0"),
    ],
)
def test_format_unit_cases(mib: int, unit: str, text: str) -> None:
    assert format_unit(mib, unit) == text


@given(st.integers(min_value=0, max_value=1 << 40))
def test_format_then_parse_never_shrinks_much(mib: int) -> None:
    # Human formatting rounds to one decimal; parsing it back stays within 5%.
    back = parse_size(format_unit(mib, "h"))
    assert abs(back - mib) <= max(1, mib * 0.05)
