"""corral.qlang.FieldRegistry: Ganeti's QueryResponse / QueryFieldsResponse shapes,
per-value statuses and filters over registered fields."""

from __future__ import annotations

from typing import Any

import pytest

import corral.qlang
from corral.errors import QueryFilterError, UnknownFieldError
from corral.qlang import Field, FieldDef, FieldRegistry, ResultStatus

Ctx = dict[str, Any]
Item = dict[str, Any]


def make_registry() -> FieldRegistry[Ctx, Item]:
    reg: FieldRegistry[Ctx, Item] = FieldRegistry("node")
    reg.add("name", "Node", "text", "Node name", lambda ctx, n: n["name"])
    reg.add("offline", "Offline", "bool", "Whether offline", lambda ctx, n: n["offline"])
    reg.add(
        "mfree", "MFree", "unit", "Free memory",
        lambda ctx, n: ResultStatus.OFFLINE if n["offline"] else n["mfree"],
    )
    reg.add("tags", "Tags", "other", "Tags", lambda ctx, n: n["tags"])
    reg.add("site", "Site", "text", "From the context", lambda ctx, n: ctx["site"])
    reg.add("ctime", "CTime", "timestamp", "Creation", lambda ctx, n: n["ctime"],
            split_timestamp=True)
    reg.register(Field(FieldDef("disk/10", "D10", "number", "Disk 10"), lambda c, n: 10))
    reg.register(Field(FieldDef("disk/2", "D2", "number", "Disk 2"), lambda c, n: 2))
    return reg


NODES: list[Item] = [
    {"name": "n1", "offline": False, "mfree": 512, "tags": ["a"], "ctime": [100, 500000]},
    {"name": "n2", "offline": True, "mfree": 1024, "tags": [], "ctime": [200, 0]},
    {"name": "n3", "offline": False, "mfree": 2048, "tags": ["a", "b"], "ctime": [300, 0]},
]
CTX: Ctx = {"site": "lab"}


def test_public_names() -> None:
    assert set(corral.qlang.__all__) == {
        "KINDS", "MAX_LEVELS", "OPERATORS", "Field", "FieldDef", "FieldKind",
        "FieldRegistry", "FilterEvaluationError", "ResultStatus", "ValueCheck",
        "compile_filter", "format_filter", "glob_to_regexp", "make_filter",
        "make_simple_filter", "parse_filter", "pick_items", "requested_names",
    }


def test_result_status_values_are_ganetis() -> None:
    assert [int(s) for s in ResultStatus] == [0, 1, 2, 3, 4]
    assert ResultStatus.UNAVAIL == 3 and ResultStatus.OFFLINE == 4


def test_query_response_shape_with_statuses_and_unknown_field() -> None:
    answer = make_registry().query(NODES, ["name", "mfree", "bogus", "site"], None, CTX)
    assert answer == {
        "fields": [
            {"name": "name", "title": "Node", "kind": "text", "doc": "Node name"},
            {"name": "mfree", "title": "MFree", "kind": "unit", "doc": "Free memory"},
            {"name": "bogus", "title": "bogus", "kind": "unknown",
             "doc": "Unknown field 'bogus'"},
            {"name": "site", "title": "Site", "kind": "text", "doc": "From the context"},
        ],
        "data": [
            [[0, "n1"], [0, 512], [1, None], [0, "lab"]],
            [[0, "n2"], [4, None], [1, None], [0, "lab"]],
            [[0, "n3"], [0, 2048], [1, None], [0, "lab"]],
        ],
    }


def test_query_filters_and_keeps_item_order() -> None:
    reg = make_registry()
    answer = reg.query(NODES, ["name"], ["|", ["==", "name", "n3"], ["==", "name", "n1"]], CTX)
    assert answer["data"] == [[[0, "n1"]], [[0, "n3"]]]
    assert reg.query(NODES, ["name"], ["=[]", "tags", "b"], CTX)["data"] == [[[0, "n3"]]]
    assert reg.query(NODES, ["name"], ["!", ["?", "offline"]], CTX)["data"] == [
        [[0, "n1"]], [[0, "n3"]]
    ]


def test_filter_on_value_that_is_not_normal_accepts_the_item() -> None:
    # n2 is offline: its mfree has no data, and Ganeti lets such items through.
    reg = make_registry()
    assert reg.query(NODES, ["name"], [">", "mfree", 1000], CTX)["data"] == [
        [[0, "n2"]], [[0, "n3"]]
    ]
    assert reg.query(NODES, ["name"], ["!", [">", "mfree", 1000]], CTX)["data"] == [
        [[0, "n1"]]
    ]


def test_split_timestamps_compare_as_seconds() -> None:
    reg = make_registry()
    assert reg.query(NODES, ["name"], ["<", "ctime", 100.6], CTX)["data"] == [[[0, "n1"]]]
    assert reg.query(NODES, ["name"], [">=", "ctime", 200], CTX)["data"] == [
        [[0, "n2"]], [[0, "n3"]]
    ]
    assert reg.query(NODES, ["ctime"], None, CTX)["data"][0] == [[0, [100, 500000]]]


def test_unknown_field_in_filter() -> None:
    with pytest.raises(UnknownFieldError, match="unknown field 'bogus' in the query filter "
                       "for node; known fields: ctime, disk/2, disk/10, mfree"):
        make_registry().query(NODES, ["name"], ["?", "bogus"], CTX)


@pytest.mark.parametrize(
    ("qfilter", "message"),
    [
        (["==", "name", 1], r"field 'name' \(kind 'text'\) with 1 \(int\) using '=='; it "
         "compares with a string"),
        (["==", "offline", 0], "it compares with a boolean"),
        (["<", "mfree", "1G"], "it compares with an integer"),
        (["<", "mfree", 1.5], "it compares with an integer"),
        (["=~", "mfree", "1"], "cannot use '=~' on field 'mfree' of kind 'unit'"),
        (["==", "ctime", "x"], r"a number \(seconds since the epoch\)"),
    ],
)
def test_filter_value_of_the_wrong_kind(qfilter: Any, message: str) -> None:
    with pytest.raises(QueryFilterError, match=message):
        make_registry().query(NODES, ["name"], qfilter, CTX)


def test_query_fields_shapes() -> None:
    reg = make_registry()
    every = reg.query_fields(None)["fields"]
    assert [f["name"] for f in every] == [
        "ctime", "disk/2", "disk/10", "mfree", "name", "offline", "site", "tags"
    ]
    assert every[0] == {"name": "ctime", "title": "CTime", "kind": "timestamp",
                        "doc": "Creation"}
    assert reg.query_fields(["tags", "nope", "name"]) == {
        "fields": [
            {"name": "tags", "title": "Tags", "kind": "other", "doc": "Tags"},
            {"name": "nope", "title": "nope", "kind": "unknown", "doc": "Unknown field 'nope'"},
            {"name": "name", "title": "Node", "kind": "text", "doc": "Node name"},
        ]
    }


def test_values_are_plain_rows() -> None:
    reg = make_registry()
    assert reg.values(NODES, ["name", "mfree"], ["!=", "name", "n3"], CTX) == [
        ["n1", 512], ["n2", None]
    ]
    with pytest.raises(UnknownFieldError, match=r"unknown output field.*: bogus; known"):
        reg.values(NODES, ["name", "bogus"], None, CTX)


def test_registration_errors() -> None:
    reg = make_registry()
    assert "name" in reg and "bogus" not in reg
    with pytest.raises(ValueError, match="already registered"):
        reg.add("name", "N", "text", "Again", lambda c, n: None)
    with pytest.raises(ValueError, match="must match"):
        reg.add("Bad Name", "B", "text", "Bad", lambda c, n: None)
    with pytest.raises(ValueError, match="invalid kind"):
        reg.add("x", "X", "unknown", "X", lambda c, n: None)
