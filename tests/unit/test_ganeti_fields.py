"""Every query field Ganeti 3.0 has, corral has too, with Ganeti's kind and title
(recorded from a real Ganeti in tests/data/ganeti-fields/), so that scripts asking
``gnt-X list -o FIELD`` or ``/2/query/X?fields=`` for them keep working."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.cli.jobs import FIELD_KIND_NAMES
from corral.cmdlib.group import GROUP_FIELDS
from corral.cmdlib.instance_query import INSTANCE_FIELDS
from corral.cmdlib.node_query import NODE_FIELDS
from corral.cmdlib.query import FILTER_FIELDS
from corral.jobs.fields import JOB_QUERY_FIELDS
from corral.qlang import FieldRegistry

DATA = Path(__file__).parent.parent / "data" / "ganeti-fields"

#: Ganeti's fields corral leaves out, and why.
NOT_HERE: set[tuple[str, str]] = set()

REGISTRIES: dict[str, FieldRegistry[Any, Any]] = {
    "instance": INSTANCE_FIELDS, "node": NODE_FIELDS, "group": GROUP_FIELDS,
    "job": JOB_QUERY_FIELDS, "filter": FILTER_FIELDS,
}


def _ganeti(resource: str) -> list[tuple[str, str, str]]:
    lines = (DATA / f"{resource}.txt").read_text().splitlines()
    return [(name, kind, title) for name, kind, title in (line.split("|") for line in lines)]


@pytest.mark.parametrize("resource", sorted(REGISTRIES))
def test_every_ganeti_field_with_its_kind_and_title(resource: str) -> None:
    registry = REGISTRIES[resource]
    ours = {d.name: d for d in registry.definitions()}
    missing, different = [], []
    for name, kind, title in _ganeti(resource):
        if (resource, name) in NOT_HERE:
            assert name not in ours, f"{name} is here now: drop it from NOT_HERE"
            continue
        if name not in ours:
            missing.append(name)
            continue
        mine = ours[name]
        shown = FIELD_KIND_NAMES.get(mine.kind, mine.kind)
        if (shown, mine.title) != (kind, title):
            different.append((name, (kind, title), (shown, mine.title)))
    assert missing == [] and different == []


def test_fields_of_features_corral_lacks_are_never_available() -> None:
    """Such fields give what Ganeti gives when the feature is unused."""
    assert INSTANCE_FIELDS.definitions(["hv/cpu_cap"])[0].kind == "number"
    answer = NODE_FIELDS.query([object()], ["disk_state", "hv_state", "spfree", "sptotal"],
                               None, None)
    assert answer["data"] == [[[3, None], [3, None], [2, None], [2, None]]]
