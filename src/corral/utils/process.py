"""Daemon processes: pid files, start with a readiness handshake, stop by pid,
dropping root's privileges after start, and the open-file limit a server needs.

A daemon holds an exclusive ``flock`` on its pid file for its whole life. A pid file
whose lock nobody holds is stale, whatever pid it names, so :func:`running_pid` never
reports (and :func:`stop_daemon` never signals) a process that merely reused the pid.

Starting is a handshake, not polling: the starter passes the write end of a pipe in
``CORRAL_READY_FD``; the daemon writes ``READY`` once it serves, or the reason it
cannot start, and the starter reports that reason verbatim.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import logging
import os
import pwd
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from corral.errors import DaemonError

__all__ = [
    "NOFILE_WANTED",
    "READY_FD_ENV",
    "PidFile",
    "drop_privileges",
    "lookup_group",
    "lookup_user",
    "notify_failed",
    "notify_ready",
    "process_alive",
    "raise_open_file_limit",
    "refuse_start",
    "running_pid",
    "start_daemon",
    "stop_daemon",
]

log = logging.getLogger(__name__)

#: Environment variable naming the readiness pipe's file descriptor.
READY_FD_ENV = "CORRAL_READY_FD"
_READY = b"READY\n"


class PidFile:
    """The locked pid file of a running daemon; release with :meth:`remove`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise DaemonError(
                f"already running with pid {other or '?'} (pid file {path} is locked)"
            ) from None
        os.fchmod(fd, 0o644)  # whatever the umask: anyone may see which pid runs
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._fd: int | None = fd

    def chown(self, uid: int, gid: int) -> None:
        """Hand the (held) pid file to another owner, one this process is about to
        become, so that it may still remove it afterwards."""
        if self._fd is not None:
            os.fchown(self._fd, uid, gid)

    def remove(self) -> None:
        """Delete the pid file and drop the lock."""
        if self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            os.close(self._fd)
            self._fd = None


def running_pid(path: Path) -> int | None:
    """The pid of the live daemon holding ``path``, or ``None`` if none does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # stale: nobody holds the lock
    finally:
        os.close(fd)


def notify_ready() -> None:
    """Tell the starter (if any) that this daemon serves now."""
    _notify(_READY)


def notify_failed(reason: str) -> None:
    """Tell the starter (if any) why this daemon cannot start."""
    _notify(reason.encode() + b"\n")


def refuse_start(daemon: str, reason: object, logger: logging.Logger, *,
                 exit_code: int = 1, log_it: bool = True) -> int:
    """A daemon that cannot start says why (in its log unless ``log_it`` is false, on
    standard error, and to its starter) and gets the exit code to return."""
    message = f"{daemon}: refusing to start: {reason}"
    if log_it:
        logger.error("%s", message)
    print(message, file=sys.stderr)
    notify_failed(message)
    return exit_code


def _notify(message: bytes) -> None:
    fd_text = os.environ.pop(READY_FD_ENV, None)
    if not fd_text:
        return
    try:
        fd = int(fd_text)
        os.write(fd, message)
        os.close(fd)
    except (ValueError, OSError):
        pass  # the starter is gone; nothing to tell


def start_daemon(
    name: str,
    argv: Sequence[str],
    *,
    log_file: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    uid: int | None = None,
    gid: int | None = None,
    groups: Sequence[int] | None = None,
    umask: int = -1,
) -> int:
    """Start ``argv`` detached, wait until it reports ready, return its pid.

    Output goes to ``log_file``. If the daemon reports a failure, exits, or stays
    silent past ``timeout``, :class:`DaemonError` says why (its own words when it
    gave them) and a silent daemon is stopped. ``uid``, ``gid`` and ``groups`` (needs
    root) make the daemon run as that user, group and supplementary groups from its
    first instruction on: they are set in the child before it executes ``argv``,
    as is ``umask`` when given.
    """
    read_fd, write_fd = os.pipe()
    child_env = dict(os.environ if env is None else env)
    child_env[READY_FD_ENV] = str(write_fd)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                pass_fds=(write_fd,),
                start_new_session=True,
                user=uid,
                group=gid,
                extra_groups=groups,
                umask=umask,
            )
    except OSError as err:
        os.close(read_fd)
        os.close(write_fd)
        raise DaemonError(f"cannot start {name}: {err}") from None
    os.close(write_fd)
    try:
        message = _read_ready(read_fd, timeout)
    finally:
        os.close(read_fd)
    if message == _READY:
        return proc.pid
    if not message:
        try:
            code = proc.wait(timeout=0.5 if message is None else 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise DaemonError(
                f"{name} did not report ready within {timeout:g}s; see {log_file}"
            ) from None
        raise DaemonError(f"{name} exited with status {code} before it was ready; see {log_file}")
    proc.wait(timeout=10)
    raise DaemonError(f"{name} could not start: {message.decode(errors='replace').strip()}")


def _read_ready(fd: int, timeout: float) -> bytes | None:
    """Everything the daemon wrote before closing the pipe; ``None`` on timeout."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return data
        data += chunk
        if data == _READY:
            return data


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split(" ", 1)[0] != "Z"


def _wait_exit(pidfd: int, timeout: float) -> bool:
    """Wait until the process behind ``pidfd`` exits; ``False`` on timeout."""
    ready, _, _ = select.select([pidfd], [], [], max(timeout, 0))
    return bool(ready)


def stop_daemon(pid_file: Path, *, timeout: float = 15.0) -> int | None:
    """Stop the daemon holding ``pid_file``: SIGTERM, then SIGKILL after ``timeout``.

    Returns once the process has exited: the pid that was stopped, or ``None`` when
    no daemon held the file. The process is pinned with a pidfd while its pid file
    lock is confirmed, so the signals reach that process even if its pid were
    reused meanwhile, and its exit is awaited without polling.
    """
    pid = running_pid(pid_file)
    if pid is None:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return pid
    try:
        if running_pid(pid_file) != pid:
            return pid  # it exited (and maybe another took its place) meanwhile
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        if not _wait_exit(pidfd, timeout):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            if not _wait_exit(pidfd, 5):
                raise DaemonError(f"process {pid} did not exit after SIGKILL")
    finally:
        os.close(pidfd)
    return pid


# -- privileges ----------------------------------------------------------------------
def lookup_user(name: str) -> pwd.struct_passwd:
    """The password entry of user ``name`` (a name or a uid)."""
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        raise DaemonError(f"unknown user {name!r} (--user)") from None


def lookup_group(name: str) -> int:
    """The gid of group ``name`` (a name or a gid)."""
    try:
        return grp.getgrgid(int(name)).gr_gid if name.isdigit() else grp.getgrnam(name).gr_gid
    except (KeyError, OverflowError):
        raise DaemonError(f"unknown group {name!r} (--group)") from None


def drop_privileges(user: str | None, group: str | None, *, daemon: str) -> None:
    """Run as ``user`` and ``group`` (names or ids) from now on, for good.

    A daemon drops privileges as a user *and* a group, as Ganeti's daemons run:

    - ``user`` alone: the user's primary group, and the user's supplementary
      groups (``initgroups``);
    - ``user`` and ``group``: that group as primary, with the user's supplementary
      groups;
    - ``group`` alone is refused: the user would stay root, and root can take any
      group (or any file) back, so switching only the group protects nothing;
    - neither: nothing changes (a warning when that leaves the daemon root).

    Asking for the ids the process already has is a no-op, so a daemon started by an
    unprivileged user (tests, the testbed) may name itself.

    :raises DaemonError: unknown user or group, ``group`` without ``user``, not root,
        or root could be regained after the switch.
    """
    if user is None:
        if group is not None:
            raise DaemonError(
                f"--group {group} without --user would leave corral-{daemon} running as "
                "root, which can regain any group; give --user as well (and --group only "
                "to run with another group than the user's own)")
        if os.geteuid() == 0:
            log.warning("corral-%s runs as root: give --user (and --group) to drop "
                        "privileges after start", daemon)
        return
    entry = lookup_user(user)
    gid = lookup_group(group) if group is not None else entry.pw_gid
    if (entry.pw_uid, gid) == (os.geteuid(), os.getegid()) and entry.pw_uid != 0:
        return
    if os.geteuid() != 0:
        raise DaemonError(f"--user/--group need corral-{daemon} to start as root; it runs "
                          f"as uid {os.geteuid()}")
    try:
        os.initgroups(entry.pw_name, gid)
        os.setgid(gid)
        os.setuid(entry.pw_uid)
    except OSError as err:
        raise DaemonError(f"cannot switch corral-{daemon} to user {user} group "
                          f"{group or gid}: {err}") from None
    if entry.pw_uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise DaemonError(f"dropping the privileges of corral-{daemon} failed: root "
                              "could be regained")
    log.info("running as uid %d, gid %d, groups %s", os.getuid(), os.getgid(),
             ",".join(map(str, os.getgroups())))


#: Open files a daemon that serves clients wants: 1000 connections held at once (design
#: 2.2's idle and slow clients: 500 of luxi and 500 of RAPI in corral's benchmark) plus
#: its own files, sockets and threads, with room to spare. Linux's usual soft limit
#: (1024) would refuse the thousandth connection.
NOFILE_WANTED = 4096


def raise_open_file_limit(wanted: int = NOFILE_WANTED) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to ``wanted`` (root also raises the
    hard limit if it is lower; others go up to the hard limit); never lowers it.
    Returns the soft limit now in force, and logs a warning when it stays below
    ``wanted``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft
    unlimited = hard == resource.RLIM_INFINITY
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (wanted, hard if unlimited or hard >= wanted else wanted))
    except (ValueError, OSError):  # not root, and the hard limit is below what we want
        if hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("open-file limit %d is below the %d this daemon wants for its "
                     "clients (raise the hard limit, e.g. LimitNOFILE= or ulimit -Hn)",
                     soft, wanted)
    return soft
