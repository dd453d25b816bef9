"""Privilege separation: which user and groups each corral daemon runs as, the
accounts behind them, and the owner and mode of every file the daemons share.

Only the node daemon runs as root (it runs hypervisors, disks and OS scripts). The
master daemon, the Remote API daemon, confd, the monitoring daemon and the watcher
each run as a user of their own, named from two prefixes the way Ganeti's build
names them (its ``--with-user-prefix`` and ``--with-group-prefix``; Debian builds
Ganeti with ``gnt-``, corral's default is ``corral-``):

====================  ===============  ===============  ==============================
daemon                user             primary group    supplementary groups
====================  ===============  ===============  ==============================
corral-masterd        <u>masterd       <g>masterd       <g>confd, <g>admin, <g>daemons
corral-rapi           <u>rapi          <g>rapi          <g>admin, <g>daemons
corral-confd          <u>confd         <g>confd         <g>daemons
corral-mond           <u>mond          <g>mond          <g>daemons
corral-watcher        <u>watcher       <g>watcher       <g>admin, <g>daemons
corral-noded          root             root
====================  ===============  ===============  ==============================

``<g>admin`` may use the master daemon's luxi socket (the ``gnt-*`` tools: add an
administrator to it); ``<g>daemons`` may create pid files in the run directory (which
is sticky, so none removes another's) and open the log directory; ``<g>confd`` reads
the configuration store and the confd key.

Where a node runs its daemons as users is node-local: ``daemon-users.json`` in the
data directory holds the two prefixes (``gnt-cluster init`` writes it, a joining node
gets the master's); without it every daemon runs as whoever starts it, as a testbed
in a temporary directory does. :func:`ensure_accounts` creates missing accounts
(``groupadd``/``useradd --system``) and :func:`ensure_modes` sets the owner and mode
of every file in :func:`file_modes`; both are idempotent and run before each start.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from corral.errors import DaemonError, ParameterError
from corral.paths import Paths
from corral.utils.files import write_public

__all__ = [
    "DAEMON_UMASK", "DEFAULT_GROUP_PREFIX", "DEFAULT_USER_PREFIX", "SEPARATED_DAEMONS",
    "Credentials", "DaemonUsers", "FileMode", "check_interpreter", "credentials", "ensure_accounts",
    "ensure_modes", "file_modes", "prepare_start", "read_daemon_users", "refresh_modes",
    "write_daemon_users",
]

#: Ganeti's build leaves the prefixes empty (everything as root); Debian's package
#: uses ``gnt-``. corral's own prefix keeps its accounts apart from Ganeti's on a
#: machine that has both.
DEFAULT_USER_PREFIX: Final = "corral-"
DEFAULT_GROUP_PREFIX: Final = "corral-"

#: The daemons that run as users of their own (noded stays root).
SEPARATED_DAEMONS: Final = ("masterd", "rapi", "confd", "mond", "watcher")

_SUPPLEMENTARY: Final[dict[str, tuple[str, ...]]] = {
    "masterd": ("confd", "admin", "daemons"),
    "rapi": ("admin", "daemons"),
    "confd": ("daemons",),
    "mond": ("daemons",),
    "watcher": ("admin", "daemons"),
}
#: The umask a separated daemon starts with: what it creates (the job queue, say)
#: its group may read, nobody else.
DAEMON_UMASK: Final = 0o027
#: Every group, in the order they are created.
_GROUPS: Final = ("daemons", "admin", "masterd", "rapi", "confd", "mond", "watcher")
#: What ``useradd``/``groupadd`` accept (shadow-utils' default NAME_REGEX, 32 bytes).
_NAME_RE: Final = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class DaemonUsers:
    """The account names of one node's daemons, from a user and a group prefix."""

    user_prefix: str = DEFAULT_USER_PREFIX
    group_prefix: str = DEFAULT_GROUP_PREFIX

    def __post_init__(self) -> None:
        for what, prefix in (("user", self.user_prefix), ("group", self.group_prefix)):
            longest = f"{prefix}{'masterd' if what == 'user' else 'daemons'}"
            if not prefix or not _NAME_RE.match(longest):
                raise ParameterError(
                    f"invalid {what} prefix {prefix!r}: use lower-case letters, digits, '_' "
                    f"and '-', starting with a letter or '_', so that names such as "
                    f"{longest!r} stay within 32 characters")

    def user(self, daemon: str) -> str:
        """The user ``daemon`` (one of :data:`SEPARATED_DAEMONS`) runs as."""
        return f"{self.user_prefix}{daemon}"

    def group(self, role: str) -> str:
        """The group ``role`` (a daemon's name, ``admin`` or ``daemons``)."""
        return f"{self.group_prefix}{role}"

    @property
    def admin_group(self) -> str:
        """Members may use the master daemon's luxi socket."""
        return self.group("admin")

    @property
    def daemons_group(self) -> str:
        """Every daemon user; may create pid files in the run directory."""
        return self.group("daemons")

    def groups(self) -> list[str]:
        """Every group, in creation order."""
        return [self.group(role) for role in _GROUPS]

    def supplementary(self, daemon: str) -> list[str]:
        """The supplementary groups of ``daemon``'s user."""
        return [self.group(role) for role in _SUPPLEMENTARY[daemon]]

    def to_json(self) -> str:
        """The content of ``daemon-users.json``."""
        return json.dumps({"user_prefix": self.user_prefix,
                           "group_prefix": self.group_prefix}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> DaemonUsers:
        """Read what :meth:`to_json` wrote; ``where`` names the source in errors."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or set(data) != {"user_prefix", "group_prefix"} \
                    or not all(isinstance(v, str) for v in data.values()):
                raise ValueError("expected {\"user_prefix\": TEXT, \"group_prefix\": TEXT}")
        except ValueError as err:
            raise DaemonError(f"{where}: {err}") from None
        return cls(data["user_prefix"], data["group_prefix"])


def read_daemon_users(paths: Paths) -> DaemonUsers | None:
    """This node's daemon accounts, or None when its daemons run as their starter."""
    try:
        text = paths.daemon_users.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise DaemonError(f"cannot read {paths.daemon_users}: {err.strerror}") from None
    return DaemonUsers.from_json(text, str(paths.daemon_users))


def write_daemon_users(paths: Paths, users: DaemonUsers | None) -> None:
    """Record (or, with None, remove) how this node runs its daemons."""
    if users is None:
        paths.daemon_users.unlink(missing_ok=True)
        return
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    write_public(paths.daemon_users, users.to_json())


# -- accounts ---------------------------------------------------------------------------
def _nologin() -> str:
    for shell in ("/usr/sbin/nologin", "/sbin/nologin"):
        if os.path.exists(shell):
            return shell
    return "/bin/false"


#: Tries of an account command that found the account files locked by another.
_LOCKED_TRIES = 10


def _run(argv: list[str]) -> None:
    for attempt in range(_LOCKED_TRIES):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise DaemonError(f"cannot run {argv[0]}: {err}") from None
        # another useradd/groupadd holds /etc/passwd's or /etc/group's lock: a moment
        if proc.returncode == 0 or "lock" not in proc.stderr or attempt + 1 == _LOCKED_TRIES:
            break
        time.sleep(0.2 * (attempt + 1))
    if proc.returncode != 0:
        raise DaemonError(f"{' '.join(argv)} failed (status {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()}")


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def ensure_accounts(users: DaemonUsers, paths: Paths) -> list[str]:
    """Create the groups and users that are missing (system accounts without a home
    or a login shell) and add missing group memberships; return what was created or
    changed. Existing accounts are otherwise left as they are."""
    if os.geteuid() != 0:
        raise DaemonError("creating the daemons' users and groups needs root")
    done: list[str] = []
    for name in users.groups():
        if not _group_exists(name):
            _run(["groupadd", "--system", name])
            done.append(f"group {name}")
    for daemon in SEPARATED_DAEMONS:
        name = users.user(daemon)
        wanted = users.supplementary(daemon)
        try:
            pwd.getpwnam(name)
        except KeyError:
            _run(["useradd", "--system", "--no-create-home", "--home-dir",
                  str(paths.data_dir), "--shell", _nologin(), "--gid", users.group(daemon),
                  "--groups", ",".join(wanted), name])
            done.append(f"user {name}")
            continue
        missing = [g for g in wanted if name not in grp.getgrnam(g).gr_mem]
        if missing:
            _run(["usermod", "--append", "--groups", ",".join(missing), name])
            done.append(f"user {name} joined {', '.join(missing)}")
    return done


@dataclass(frozen=True)
class Credentials:
    """What a daemon's process runs with."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]


def credentials(users: DaemonUsers, daemon: str) -> Credentials:
    """The uid, primary gid and supplementary gids of ``daemon``'s account."""
    try:
        entry = pwd.getpwnam(users.user(daemon))
        gid = grp.getgrnam(users.group(daemon)).gr_gid
        groups = tuple(grp.getgrnam(g).gr_gid for g in users.supplementary(daemon))
    except KeyError as err:
        raise DaemonError(f"the account {err.args[0]} of corral-{daemon} does not exist; "
                          "'corral-daemons start' as root creates it") from None
    return Credentials(entry.pw_name, entry.pw_uid, gid, groups)


# -- files ------------------------------------------------------------------------------
Kind = Literal["dir", "file"]


@dataclass(frozen=True)
class FileMode:
    """The owner, group and mode one file or directory gets (a name, ``root``, or a
    daemon's user or group through :class:`DaemonUsers`)."""

    path: Path
    kind: Kind
    owner: str
    group: str
    mode: int


def _sqlite(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def file_modes(paths: Paths, users: DaemonUsers) -> list[FileMode]:
    """Every place the daemons share, with the owner and mode it gets: each daemon
    may read what it needs and no more. Directories come before what they hold."""
    u, g = users.user, users.group
    table: list[FileMode] = [
        # The master daemon writes its stores and their WAL files here, as Ganeti's
        # data directory belongs to gnt-masterd; the other daemons only traverse it.
        FileMode(paths.data_dir, "dir", u("masterd"), g("masterd"), 0o755),
        FileMode(paths.rapi_users.parent, "dir", u("rapi"), g("masterd"), 0o750),
        FileMode(paths.watcher_dir, "dir", u("watcher"), g("watcher"), 0o700),
        FileMode(paths.run_dir, "dir", "root", g("daemons"), 0o1775),
        FileMode(paths.log_dir, "dir", "root", g("daemons"), 0o750),
    ]
    # What the monitoring daemon reads of what noded writes: set-group-id
    # directories, so that what noded creates in them (mode 0640 or wider) goes to
    # the monitoring group.
    table += [FileMode(d, "dir", "root", g("mond"), 0o2750) for d in (
        paths.instance_status_dir, paths.instance_reason_dir, paths.node_reports_dir,
        paths.hypervisor_state_dir,
        paths.hypervisor_state_dir / "fake", paths.hypervisor_state_dir / "kvm")]
    table += [FileMode(p, "file", u("masterd"), g("confd"), 0o640)
              for p in _sqlite(paths.config_db)]
    table += [FileMode(p, "file", u("masterd"), g("masterd"), 0o600)
              for p in _sqlite(paths.jobs_db)]
    table += [FileMode(p, "file", "root", g("confd"), 0o640)
              for p in _sqlite(paths.config_replica)]
    table += [FileMode(p, "file", "root", "root", 0o600) for p in _sqlite(paths.jobs_replica)]
    table += [
        FileMode(paths.ca_key, "file", u("masterd"), g("masterd"), 0o400),
        FileMode(paths.master_client_cert, "file", u("masterd"), g("masterd"), 0o400),
        FileMode(paths.cluster_domain_secret, "file", u("masterd"), g("masterd"), 0o400),
        FileMode(paths.node_key, "file", "root", "root", 0o400),
        FileMode(paths.join_token, "file", "root", "root", 0o400),
        # Ganeti's modes: the confd key for confd and the master (which hands it to
        # new candidates), the users file for RAPI and the master.
        FileMode(paths.confd_hmac_key, "file", u("confd"), g("masterd"), 0o440),
        FileMode(paths.rapi_users, "file", u("rapi"), g("masterd"), 0o640),
        FileMode(paths.rapi_key, "file", u("rapi"), g("rapi"), 0o400),
        FileMode(paths.rapi_admin_password, "file", "root", "root", 0o400),
        FileMode(paths.watcher_state_file, "file", u("watcher"), g("watcher"), 0o600),
    ]
    for daemon in SEPARATED_DAEMONS:
        table.append(FileMode(paths.log_file(daemon), "file", u(daemon), g(daemon), 0o600))
    # confd's counters (SIGUSR1): a file left by a confd run as root would stay
    # another's in the sticky run directory
    table.append(FileMode(paths.run_dir / "confd.stats.json", "file", u("confd"),
                          g("confd"), 0o644))
    return table


def _ids(owner: str, group: str) -> tuple[int, int]:
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError as err:
        raise DaemonError(f"the account {err.args[0]} does not exist; 'corral-daemons "
                          "start' as root creates it") from None


def _set(path: Path, uid: int, gid: int, mode: int) -> bool:
    """Give an existing ``path`` owner and mode; whether it changed. Done on a file
    descriptor opened without following a symbolic link: a daemon that may write the
    directory (the master's data directory) cannot have root change another file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as err:
        if os.path.islink(path):
            raise DaemonError(f"{path} is a symbolic link; refusing to change its owner "
                              "and mode") from None
        raise DaemonError(f"cannot open {path} to set its owner and mode: "
                          f"{err.strerror}") from None
    try:
        st = os.fstat(fd)
        changed = False
        if (st.st_uid, st.st_gid) != (uid, gid):
            os.fchown(fd, uid, gid)
            changed = True
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
            changed = True
        return changed
    finally:
        os.close(fd)


def ensure_modes(paths: Paths, users: DaemonUsers) -> list[Path]:
    """Create the directories of :func:`file_modes` and give them and every existing
    file its owner and mode (root only); return what changed."""
    changed: list[Path] = []
    paths.ensure_dirs()
    for entry in file_modes(paths, users):
        uid, gid = _ids(entry.owner, entry.group)
        if entry.kind == "dir":
            entry.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if _set(entry.path, uid, gid, entry.mode):
            changed.append(entry.path)
    return changed


def refresh_modes(paths: Paths) -> None:
    """After root wrote shared files (a join, redistributed or renewed keys): give
    them their owners and modes again, when this node separates its daemons."""
    users = read_daemon_users(paths)
    if users is not None and os.geteuid() == 0:
        ensure_modes(paths, users)


def prepare_start(paths: Paths, users: DaemonUsers, daemon: str) -> Credentials:
    """Before ``daemon`` starts as its user: its log file exists and is its own, and a
    pid file a previous run left (as another owner) is its own too."""
    cred = credentials(users, daemon)
    log_file = paths.log_file(daemon)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchown(fd, cred.uid, cred.gid)
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        pid_file = paths.pid_file(daemon)
        if os.lstat(pid_file).st_uid != cred.uid:
            pid_file.unlink()
    return cred


def _parents(path: Path) -> Iterator[Path]:
    yield path
    yield from path.parents


def check_interpreter(cred: Credentials, daemon: str) -> None:
    """Refuse, saying why, when ``daemon``'s user could not run this Python: every
    directory above the interpreter must be searchable by it (a Python installed in
    root's home, as pyenv does, is not)."""
    executable = Path(sys.executable)
    for place in (executable, Path(os.path.realpath(executable))):
        for parent in list(_parents(place.parent)):
            try:
                st = os.stat(parent)
            except OSError:
                continue
            if st.st_uid == cred.uid:
                allowed = bool(st.st_mode & stat.S_IXUSR)
            elif st.st_gid == cred.gid or st.st_gid in cred.groups:
                allowed = bool(st.st_mode & stat.S_IXGRP)
            else:
                allowed = bool(st.st_mode & stat.S_IXOTH)
            if not allowed:
                raise DaemonError(
                    f"corral-{daemon} runs as user {cred.user}, which cannot run "
                    f"{executable}: it may not enter {parent}; install corral where "
                    "its daemon users can read it (or start the cluster with "
                    "'gnt-cluster init --daemons-as-root')")
