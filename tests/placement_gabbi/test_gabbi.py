"""OpenStack Placement's own gabbi API tests against corral's /placement/ on a testbed.

The YAML comes from the ``openstack-placement`` 16.x wheel at test time (downloaded
once into ``~/.cache/corral-placement-ref``, see :mod:`tests.placement_gabbi.runner`);
one test per file of :data:`~tests.placement_gabbi.runner.CORRAL_PASSING`, all on the
module's shared testbed, each file starting from a server the runner empties over REST.
A per-file summary (tests passed, failed, seconds) is printed at the end of the run.
The same runner proves the fixtures on Placement itself:
``python -m tests.placement_gabbi.runner --reference`` (every chosen file passes there).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.masterd.placement_sync import ENABLE_ENV
from tests.conftest import TestbedHandle
from tests.placement_gabbi import fixtures
from tests.placement_gabbi.runner import (
    CHOSEN,
    CORRAL_PASSING,
    FileResult,
    corral_tokens,
    gabbits_dir,
    run_file,
)

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

#: What each file did, for the summary tests/placement_gabbi/conftest.py prints.
RESULTS: list[FileResult] = []


@pytest.fixture(scope="module", autouse=True)
def _outside_data_only() -> Iterator[None]:
    """The module's testbed is started with the cluster left out of /placement/: the
    files expect a server holding only what their fixtures make (its daemons inherit
    this process's environment while it starts)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENABLE_ENV, "off")
        yield


@pytest.fixture(scope="module")
def placement(_module_testbed: TestbedHandle) -> Iterator[fixtures.PlacementClient]:
    """The testbed's /placement/ with the YAML's tokens valid; emptied at the end."""
    gabbits_dir()
    with corral_tokens(_module_testbed.dir) as client:
        yield client
        fixtures.clean(client)


def test_passing_files_are_chosen_files() -> None:
    """The corral list is a subset of the chosen files and names files of the wheel."""
    assert set(CORRAL_PASSING) <= set(CHOSEN)
    present = {path.name for path in gabbits_dir().glob("*.yaml")}
    assert set(CHOSEN) <= present, sorted(set(CHOSEN) - present)


@pytest.mark.parametrize("name", CORRAL_PASSING)
def test_placement_gabbi_file(name: str, testbed: TestbedHandle,
                              placement: fixtures.PlacementClient) -> None:
    result = run_file(gabbits_dir() / name, placement)
    RESULTS.append(result)
    details = "\n".join(f"{test}\n{message[-3000:]}" for test, message in result.failures)
    assert result.ok, f"{result.line()}\n{details}"
