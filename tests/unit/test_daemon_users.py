"""Privilege separation's rules without daemons: account names, what each daemon's
account may read by the modes corral gives files, the interpreter check, init's
default, and a reader without write access to a store's directory."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import bootstrap, daemon_users, daemons
from corral.cli import gnt_cluster
from corral.config import ConfigStore
from corral.config.readonly import load_readonly
from corral.daemon_users import (
    SEPARATED_DAEMONS,
    Credentials,
    DaemonUsers,
    check_interpreter,
    file_modes,
    read_daemon_users,
    write_daemon_users,
)
from corral.errors import DaemonError, ParameterError
from corral.objects import Cluster, Node, NodeGroup
from corral.paths import Paths

USERS = DaemonUsers("gnt-", "gnt-")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary directory other users may enter (pytest's own is closed to them)."""
    path = Path(tempfile.mkdtemp(prefix="corral-unit-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_names_follow_ganetis_prefix_scheme() -> None:
    assert [USERS.user(d) for d in SEPARATED_DAEMONS] == [
        "gnt-masterd", "gnt-rapi", "gnt-confd", "gnt-mond", "gnt-watcher"]
    assert USERS.admin_group == "gnt-admin" and USERS.daemons_group == "gnt-daemons"
    # who reaches the luxi socket: the master, RAPI and the watcher, not confd or mond
    admins = [d for d in SEPARATED_DAEMONS if USERS.admin_group in USERS.supplementary(d)]
    assert admins == ["masterd", "rapi", "watcher"]
    assert all(USERS.daemons_group in USERS.supplementary(d) for d in SEPARATED_DAEMONS)


@pytest.mark.parametrize("prefix", ["", "Gnt-", "1x", "a b", "x" * 26])
def test_bad_prefixes_are_refused_saying_what_is_accepted(prefix: str) -> None:
    with pytest.raises(ParameterError, match="lower-case letters, digits"):
        DaemonUsers(prefix, "corral-")


def test_the_node_file_round_trips_and_bad_content_is_named(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    assert read_daemon_users(paths) is None
    write_daemon_users(paths, USERS)
    assert read_daemon_users(paths) == USERS
    paths.daemon_users.write_text(json.dumps({"user_prefix": "gnt-"}))
    with pytest.raises(DaemonError, match=r"daemon-users\.json: expected"):
        read_daemon_users(paths)
    write_daemon_users(paths, None)
    assert not paths.daemon_users.exists()


def _readable(paths: Paths, daemon: str) -> set[str]:
    """The files of the table ``daemon``'s account may read, by owner, group and mode
    (directories ignored, every daemon may enter them; and files anyone may read)."""
    mine = {USERS.group(daemon), *USERS.supplementary(daemon)}
    found = set()
    for entry in file_modes(paths, USERS):
        if entry.kind != "file" or entry.mode & 0o004:
            continue
        if entry.owner == USERS.user(daemon):
            allowed = entry.mode & 0o400
        elif entry.group in mine:
            allowed = entry.mode & 0o040
        else:
            allowed = entry.mode & 0o004
        if allowed:
            found.add(entry.path.name)
    return found


def test_each_daemon_may_read_what_it_needs_and_no_private_key(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    sqlite = {"", "-wal", "-shm"}
    assert _readable(paths, "confd") == (
        {f"config.db{s}" for s in sqlite} | {f"config-replica.db{s}" for s in sqlite}
        | {"confd.key", "confd.log"})
    assert _readable(paths, "rapi") == {"users", "rapi-key.pem", "rapi.log"}
    assert _readable(paths, "mond") == {"mond.log"}
    assert _readable(paths, "watcher") == {"state.json", "watcher.log"}
    masterd = _readable(paths, "masterd")
    assert {"config.db", "jobs.db", "ca-key.pem", "master-client.pem", "confd.key",
            "users"} <= masterd
    assert not masterd & {"server-key.pem", "rapi-key.pem", "admin-password", "join-token"}
    # the master daemon reads the replica as a member of confd's group
    assert "config-replica.db" in masterd


def test_an_interpreter_its_user_cannot_reach_is_refused_naming_the_place(
        open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = open_tmp / "home"
    (closed / "bin").mkdir(parents=True)
    closed.chmod(0o700)
    monkeypatch.setattr(sys, "executable", str(closed / "bin" / "python3"))
    nobody = Credentials("nobody", 65534, 65534, ())
    with pytest.raises(DaemonError, match=f"may not enter {closed}"):
        check_interpreter(nobody, "confd")
    closed.chmod(0o755)
    check_interpreter(nobody, "confd")


@pytest.mark.parametrize(("euid", "root", "given", "as_root", "expected"), [
    (0, "/", (None, None), False, DaemonUsers("corral-", "corral-")),
    (0, "/", ("gnt-", None), False, DaemonUsers("gnt-", "corral-")),
    (0, "/", (None, None), True, None),
    (0, "/tmp/c1", (None, None), False, None),       # a testbed-like node
    (0, "/tmp/c1", ("t-", "t-"), False, DaemonUsers("t-", "t-")),
    (1000, "/", (None, None), False, None),          # not root: as the starter
])
def test_init_separates_by_default_on_a_root_node_at_slash(
        monkeypatch: pytest.MonkeyPatch, euid: int, root: str,
        given: tuple[str | None, str | None], as_root: bool,
        expected: DaemonUsers | None) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    assert gnt_cluster._daemon_users(Paths(Path(root)), *given, as_root) == expected


def test_init_refuses_contradicting_or_unprivileged_prefixes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ParameterError, match="not both"):
        gnt_cluster._daemon_users(Paths(Path("/")), "gnt-", None, True)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ParameterError, match="need root"):
        gnt_cluster._daemon_users(Paths(Path("/")), "gnt-", None, False)


def _load_as_nobody(path: Path) -> dict[str, object]:
    """load_readonly in a forked child running as nobody: the cluster name, or the
    error."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                result: dict[str, object] = {"name": load_readonly(path).cluster.name}
            except Exception as err:  # reported to the parent, whatever it is
                result = {"error": str(err)}
            os.write(write_fd, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    answer: dict[str, object] = json.loads(data)
    return answer


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root")
def test_a_reader_that_may_not_create_wal_files_reads_a_closed_store(open_tmp: Path) -> None:
    directory = open_tmp / "data"
    directory.mkdir()
    group = NodeGroup(name=bootstrap.DEFAULT_GROUP)
    node = Node(name="n1.test", primary_ip="127.0.0.1", group=group.uuid)
    ConfigStore.create(directory / "config.db", Cluster(name="c.test", master_node=node.uuid),
                       group, node).close()
    (directory / "config.db").chmod(0o644)
    directory.chmod(0o755)  # the reader may not create files in it
    assert not list(directory.glob("config.db-*"))  # nobody has it open
    assert _load_as_nobody(directory / "config.db") == {"name": "c.test"}
    assert not list(directory.glob("config.db-*"))  # and the reader wrote nothing


def test_a_separated_node_refuses_to_start_its_daemons_without_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = Paths(tmp_path)
    write_daemon_users(paths, USERS)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(DaemonError, match="start them as root"):
        daemons.start(paths)
    assert not paths.run_dir.exists() or not list(paths.run_dir.glob("*.pid"))


def test_owners_and_modes_are_never_set_through_a_symbolic_link(tmp_path: Path) -> None:
    """A daemon that may write its directory could put a link where a file was; root
    must not then give the link's target away."""
    target = tmp_path / "precious"
    target.write_text("secret\n")
    target.chmod(0o600)
    link = tmp_path / "ca-key.pem"
    link.symlink_to(target)
    with pytest.raises(DaemonError, match="is a symbolic link; refusing"):
        daemon_users._set(link, 65534, 65534, 0o644)
    st = target.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (os.getuid(), 0o600)
    assert daemon_users._set(target, os.getuid(), os.getgid(), 0o640) is True
    assert target.stat().st_mode & 0o777 == 0o640
    assert daemon_users._set(tmp_path / "absent", 0, 0, 0o600) is False
