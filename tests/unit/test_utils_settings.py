"""The one settings loader of the daemons: command line over file over defaults."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from corral.confd import daemon as confd_daemon
from corral.errors import ParameterError
from corral.noded import daemon as noded_daemon
from corral.paths import Paths
from corral.rapi import daemon as rapi_daemon
from corral.utils.settings import check_bind, check_port, read_settings


class Example(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    bind: str = "0.0.0.0"
    port: int = 7
    verbose: bool = False

    def __post_init__(self) -> None:
        self.bind = check_bind(self.bind)
        check_port(self.port)


def test_command_line_over_file_over_defaults(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert read_settings(path, Example) == Example()
    assert read_settings(path, Example, defaults={"port": 9}).port == 9
    path.write_text(json.dumps({"port": 8, "verbose": True}))
    assert read_settings(path, Example, {"port": None}, defaults={"port": 9}) == Example(
        port=8, verbose=True)
    assert read_settings(path, Example, {"port": 10, "bind": "::1"}) == Example(
        bind="::1", port=10, verbose=True)


def test_errors_say_where_the_bad_value_came_from(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"verbose": "yes"}))
    with pytest.raises(ParameterError, match=r"x\.json: verbose: Expected `bool`"):
        read_settings(path, Example)
    path.write_text("{}")
    with pytest.raises(ParameterError, match="--port: port: Expected `int`"):
        read_settings(path, Example, {"port": "many"})
    with pytest.raises(ParameterError, match="bind address 'here' is not an IP address"):
        read_settings(path, Example, {"bind": "here"})
    with pytest.raises(ParameterError, match=r"port 70000 is not a port number \(1-65535\)"):
        read_settings(path, Example, {"port": 70000})
    path.write_text(json.dumps({"colour": 1}))
    with pytest.raises(ParameterError, match=r"unknown setting\(s\) colour; known: bind, port, "
                                             "verbose"):
        read_settings(path, Example)
    path.write_text("[1]")
    with pytest.raises(ParameterError, match="must hold a JSON object"):
        read_settings(path, Example)


@pytest.mark.parametrize("reader", [noded_daemon.read_settings, confd_daemon.read_settings,
                                    rapi_daemon.read_settings])
def test_every_daemon_refuses_the_same_way(tmp_path: Path, reader: object) -> None:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    for name in ("noded", "confd", "rapi"):
        (paths.data_dir / f"{name}.json").write_text(json.dumps({"bind": "localhost"}))
    with pytest.raises(ParameterError, match="bind address 'localhost' is not an IP address"):
        reader(paths)  # type: ignore[operator]
