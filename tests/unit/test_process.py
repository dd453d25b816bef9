"""Pid files, readiness handshake and stopping daemons by pid."""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
import textwrap
from pathlib import Path

import pytest

from corral.errors import DaemonError
from corral.utils.process import (
    PidFile,
    drop_privileges,
    running_pid,
    start_daemon,
    stop_daemon,
)


def test_pid_file_is_exclusive_and_stale_files_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "d.pid"
    pid_file = PidFile(path)
    assert running_pid(path) == os.getpid()
    with pytest.raises(DaemonError, match=f"already running with pid {os.getpid()}"):
        PidFile(path)
    pid_file.remove()
    assert running_pid(path) is None
    # A leftover pid file naming a live process (pid 1) is stale: nobody holds its lock.
    path.write_text("1\n")
    assert running_pid(path) is None
    assert stop_daemon(path) is None


def _script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "daemon.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def test_start_waits_for_ready_and_stop_terminates(tmp_path: Path) -> None:
    pid_path = tmp_path / "d.pid"
    argv = _script(tmp_path, f"""
        import signal, sys, time
        sys.path.insert(0, {str(Path(__file__).parents[2] / "src")!r})
        from corral.utils.process import PidFile, notify_ready
        pid = PidFile(__import__("pathlib").Path({str(pid_path)!r}))
        signal.signal(signal.SIGTERM, lambda *a: (pid.remove(), sys.exit(0)))
        notify_ready()
        while True:
            time.sleep(1)
    """)
    pid = start_daemon("test", argv, log_file=tmp_path / "d.log", timeout=20)
    assert running_pid(pid_path) == pid
    assert stop_daemon(pid_path) == pid
    assert running_pid(pid_path) is None


def test_start_reports_the_daemons_own_reason(tmp_path: Path) -> None:
    argv = _script(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[2] / "src")!r})
        from corral.utils.process import notify_failed
        notify_failed("the store /x/config.db is corrupt")
        sys.exit(1)
    """)
    with pytest.raises(DaemonError, match=r"the store /x/config\.db is corrupt"):
        start_daemon("test", argv, log_file=tmp_path / "d.log", timeout=20)


def test_start_reports_a_silent_exit(tmp_path: Path) -> None:
    argv = _script(tmp_path, "import sys; print('oops'); sys.exit(3)")
    with pytest.raises(DaemonError, match="exited with status 3"):
        start_daemon("test", argv, log_file=tmp_path / "d.log", timeout=20)
    assert "oops" in (tmp_path / "d.log").read_text()


def _ids_after_drop(user: str | None, group: str | None) -> dict[str, object]:
    """Call drop_privileges in a forked child; what the child then runs as (or the
    error it refused with)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's exit hooks
        try:
            os.close(read_fd)
            try:
                drop_privileges(user, group, daemon="test")
                result: dict[str, object] = {}
            except DaemonError as err:
                result = {"error": err.message}
            result.update(uid=os.getresuid(), gid=os.getresgid(),
                          groups=sorted(os.getgroups()))
            os.write(write_fd, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    answer: dict[str, object] = json.loads(data)
    return answer


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@needs_root
def test_group_alone_is_refused_rather_than_staying_root() -> None:
    nogroup = grp.getgrnam("nogroup").gr_gid
    ids = _ids_after_drop(None, "nogroup")
    assert "without --user would leave corral-test running as root" in str(ids["error"])
    # Nothing was half-done: still root in every id.
    assert ids["uid"] == [0, 0, 0] and ids["gid"] == [0, 0, 0]
    assert nogroup not in ids["groups"]  # type: ignore[operator]


@needs_root
def test_user_alone_takes_the_users_group_and_cannot_regain_root() -> None:
    nobody = pwd.getpwnam("nobody")
    ids = _ids_after_drop("nobody", None)
    assert "error" not in ids
    assert ids["uid"] == [nobody.pw_uid] * 3
    assert ids["gid"] == [nobody.pw_gid] * 3
    assert ids["groups"] == sorted({nobody.pw_gid, *(
        g.gr_gid for g in grp.getgrall() if "nobody" in g.gr_mem)})


@needs_root
def test_user_and_group_by_number() -> None:
    nobody = pwd.getpwnam("nobody")
    daemon_gid = grp.getgrnam("daemon").gr_gid
    ids = _ids_after_drop(str(nobody.pw_uid), str(daemon_gid))
    assert "error" not in ids
    assert ids["uid"] == [nobody.pw_uid] * 3
    assert ids["gid"] == [daemon_gid] * 3
    assert daemon_gid in ids["groups"] and 0 not in ids["groups"]  # type: ignore[operator]


def test_unknown_user_or_group_is_refused() -> None:
    with pytest.raises(DaemonError, match="unknown user 'no-such-user-x'"):
        drop_privileges("no-such-user-x", None, daemon="test")
    with pytest.raises(DaemonError, match="unknown group 'no-such-group-x'"):
        drop_privileges("nobody", "no-such-group-x", daemon="test")


@pytest.mark.parametrize(("soft", "hard"), [(256, 8192), (256, 512), (8192, 8192)])
def test_a_daemon_raises_its_open_file_limit_for_its_clients(soft: int, hard: int) -> None:
    """A daemon started under the usual soft limit raises it to what 1000 clients need
    (to the hard limit, or, as root, past a lower hard limit); a higher one stays."""
    import resource
    import subprocess
    import sys

    from corral.utils.process import NOFILE_WANTED

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    code = ("import resource; from corral.utils.process import raise_open_file_limit as r; "
            "print(r(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    proc = subprocess.run([sys.executable, "-c", code], preexec_fn=limit,
                          capture_output=True, text=True, check=True)
    returned, now = map(int, proc.stdout.split())
    expected = max(soft, NOFILE_WANTED)
    if hard < NOFILE_WANTED:
        # Raising a hard limit needs CAP_SYS_RESOURCE, which root in a container may lack.
        probe = subprocess.run([sys.executable, "-c", (
            "import resource as r; "
            f"r.setrlimit(r.RLIMIT_NOFILE, ({NOFILE_WANTED}, {NOFILE_WANTED}))")],
            preexec_fn=limit, capture_output=True)
        if probe.returncode != 0:
            expected = hard
            assert "below the 4096 this daemon wants" in proc.stderr
    assert returned == now == expected, proc.stderr
