"""``python -m corral.rapi.tokens USER``: a token added to the RAPI users file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from corral.errors import ParameterError
from corral.rapi.tokens import add_token
from corral.rapi.users import parse_rapi_users_file


def test_the_file_keeps_its_owner_group_and_mode(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("# operators\nadmin secret write\nviewer pw\n")
    os.chmod(users, 0o640)
    group = 65534 if os.geteuid() == 0 else os.getegid()  # another group when root
    os.chown(users, -1, group)
    token = add_token(users, "admin")
    after = users.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_gid) == (0o640, group)
    text = users.read_text()
    assert text.startswith("# operators\n")
    assert token not in text  # only its hash is kept
    parsed = parse_rapi_users_file(text)
    assert set(parsed) == {"admin", "viewer"}
    assert "placement-token={SHA256}" in next(line for line in text.splitlines()
                                               if line.startswith("admin "))
    assert not list(tmp_path.glob(".users*"))  # no temporary file left


def test_an_unknown_user_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("admin secret write\n")
    with pytest.raises(ParameterError, match="no user 'ghost'"):
        add_token(users, "ghost")
    assert users.read_text() == "admin secret write\n"


def test_the_command_prints_only_the_token_and_says_what_comes_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from corral.paths import Paths
    from corral.rapi import tokens

    users = tmp_path / "users"
    users.write_text("admin secret write\n")
    monkeypatch.setattr(Paths, "from_env", classmethod(lambda cls: _Paths(users)))
    assert tokens.main(["admin"]) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert "\n" not in token and token  # stdout is the token alone, for scripts
    assert "SIGHUP" in err and "gnt-cluster redist-conf" in err
    assert tokens.main(["ghost"]) == 1
    assert "no user 'ghost'" in capsys.readouterr().err


class _Paths:
    def __init__(self, users: Path) -> None:
        self.rapi_users = users
