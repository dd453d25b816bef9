"""``corral.daemons.start`` when another starter wins the race for a daemon's pid file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from corral import daemons
from corral.errors import DaemonError
from corral.paths import Paths
from corral.utils.process import PidFile


def test_a_daemon_another_starter_brought_up_meanwhile_counts_as_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # noded starts confd on a new candidate, the watcher restarts dead daemons: either
    # may take the pid file between corral-daemons' check and its own daemon's start.
    paths = Paths(tmp_path)
    paths.config_replica.parent.mkdir(parents=True, exist_ok=True)
    paths.config_replica.touch()  # a master candidate: it runs confd
    held: list[PidFile] = []

    def lose_the_race(name: str, argv: Any, **_: Any) -> int:
        held.append(PidFile(paths.pid_file("confd")))
        raise DaemonError(f"{name} could not start: refusing to start: already running")

    monkeypatch.setattr(daemons, "start_daemon", lose_the_race)
    try:
        assert daemons.start(paths, only={"confd"}) == {"confd": os.getpid()}
    finally:
        for pid_file in held:
            pid_file.remove()


def test_a_daemon_that_cannot_start_is_still_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = Paths(tmp_path)

    def fail(name: str, argv: Any, **_: Any) -> int:
        raise DaemonError(f"{name} could not start: port in use")

    monkeypatch.setattr(daemons, "start_daemon", fail)
    with pytest.raises(DaemonError, match="port in use"):
        daemons.start(paths, only={"noded"})
