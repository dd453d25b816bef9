"""Who a qemu process runs as, and where (design 2.2, KVM security).

Three hypervisor parameters decide it, with Ganeti's names and values:

``security_model``
    ``none``: qemu keeps running as root. ``user``: qemu drops to the user named by
    ``security_domain`` (``-runas``). ``pool``: qemu drops to a uid of the cluster's
    user-id pool that no other process uses, so that guests cannot reach each other.
``security_domain``
    The user for ``security_model=user``; must be empty with the other models.
``use_chroot``
    qemu changes its root (``-chroot``) into an empty per-instance directory
    (:func:`chroot_dir`), so that a broken-into qemu sees no host file.

qemu opens everything its command line names (disks, taps, sockets, the serial log)
as root and drops privileges only just before the guest runs. Its control sockets
stay owned by root in a directory only root may enter (mode 0700), so neither the
unprivileged qemu nor another user can reach them by path.

The pool: the node reads it from the file every node keeps
(:attr:`corral.paths.Paths.uid_pool`), takes a uid with
:func:`corral.uidpool.request_unused_uid` (lock files in
:attr:`corral.paths.Paths.uid_pool_lock_dir`), holds the lock until qemu runs with the
uid (:meth:`SecuritySetup.started`) and gives the uid back (:func:`release_security`)
once the qemu process is gone: after a stop, after a failed start, or when the
process is found dead. qemu 7.2 takes ``-runas uid:gid`` as well as a user name: a
pool uid that names a user runs as that user (with its groups, as Ganeti does); one
that does not runs with the group id equal to the uid, which no other pool uid shares.

The parameter checks mirror Ganeti's kvm checks: :func:`check_security_params` (on
the master, on the filled parameters, when an instance or the cluster changes) and
:func:`validate_security_params` (on a node, where the user must exist).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import pwd
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from corral import uidpool
from corral.errors import CorralError, HypervisorError, ParameterError
from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord, kvm_dir
from corral.objects.specs import InstanceSpec
from corral.paths import Paths

__all__ = [
    "SECURITY_MODELS",
    "SecuritySetup",
    "check_security_params",
    "chroot_dir",
    "prepare_security",
    "quarantine_dir",
    "release_security",
    "validate_security_params",
]

log = logging.getLogger(__name__)

#: The accepted values of ``security_model``.
SECURITY_MODELS: Final[tuple[str, ...]] = ("none", "user", "pool")

_SET_POOL = "set one with 'gnt-cluster modify --uid-pool 40000-40099' (uids and ranges)"


def _model(hvparams: Mapping[str, Any]) -> str:
    return str(hvparams.get("security_model") or "none")


def _domain(hvparams: Mapping[str, Any]) -> str:
    return str(hvparams.get("security_domain") or "")


# -- parameter checks ------------------------------------------------------------------


def check_security_params(hvparams: Mapping[str, Any]) -> None:
    """Refuse combinations that cannot work, as Ganeti's kvm syntax check does:
    ``security_model=user`` needs a ``security_domain``, the other models take none.
    ``hvparams`` are the filled parameters (cluster, OS, group and instance).

    :raises ParameterError: naming the parameters and what is accepted.
    """
    model, domain = _model(hvparams), _domain(hvparams)
    if model not in SECURITY_MODELS:
        raise ParameterError(
            f"invalid security_model {model!r}; accepted: {', '.join(SECURITY_MODELS)}")
    if model == "user" and not domain:
        raise ParameterError(
            "security_model=user needs security_domain, the name of the user qemu runs as"
            " (for example -H kvm:security_model=user,security_domain=qemu)")
    if model != "user" and domain:
        raise ParameterError(
            f"security_domain ({domain!r}) is only used with security_model=user; with"
            f" security_model={model} leave it empty (security_domain=default)")


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise HypervisorError(
            f"security domain user {name!r} does not exist on this node; create the"
            " user or name an existing one in security_domain") from None


def validate_security_params(hvparams: Mapping[str, Any]) -> None:
    """What a node checks, as Ganeti's kvm parameter validation: the syntax, and with
    ``security_model=user`` that the ``security_domain`` user exists here.

    :raises ParameterError: for a bad combination (see :func:`check_security_params`).
    :raises HypervisorError: naming a missing user.
    """
    check_security_params(hvparams)
    if _model(hvparams) == "user":
        _user(_domain(hvparams))


# -- places ----------------------------------------------------------------------------


def chroot_dir(paths: Paths, name: str) -> Path:
    """The empty directory instance ``name``'s qemu is confined to (``use_chroot``):
    made at start (owned by root, mode 0700: the confined qemu can neither read nor
    write in it) and removed once the qemu process is gone. Beside the instances'
    directories under a dot name, which is no instance's."""
    return kvm_dir(paths) / ".chroot" / name


def quarantine_dir(paths: Paths) -> Path:
    """Where a chroot directory found not empty after its qemu is gone goes, untouched,
    for an administrator to look at: a confined qemu that behaves writes nothing."""
    return kvm_dir(paths) / ".chroot-quarantine"


# -- start and stop --------------------------------------------------------------------


@dataclass
class SecuritySetup:
    """What :func:`prepare_security` decided and took for one start.

    After qemu runs, call :meth:`started`; if the start failed, :meth:`abandon`
    undoes everything (or :func:`release_security` with the record, which does the
    same from what was recorded).
    """

    args: list[str] = field(default_factory=list)
    """Extra qemu arguments (``-chroot DIR``, ``-runas USER``)."""
    uid: int | None = None
    """The uid qemu will run as (recorded; ``None``: root)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Kept in the runtime record's ``extra["security"]``: ``model`` and ``chroot``
    (the directory or ``None``)."""
    reservation: uidpool.UidReservation | None = None
    """The locked pool uid (``security_model=pool``) until :meth:`started`."""
    paths: Paths | None = None

    def started(self) -> None:
        """qemu runs with the uid: drop the lock and keep the lock file, which marks the
        uid taken until :func:`release_security`."""
        if self.reservation is not None:
            self.reservation.unlock()

    def abandon(self) -> None:
        """The start failed: give the pool uid back and remove the chroot directory."""
        if self.reservation is not None:
            self.reservation.release()
        chroot = self.extra.get("chroot")
        if chroot:
            _remove_chroot(Path(chroot), self.paths)


def _pool_user(paths: Paths, name: str) -> tuple[str, uidpool.UidReservation]:
    why = f"cannot start instance {name} with security_model=pool"
    try:
        pool = uidpool.read_uid_pool_file(paths.uid_pool)
    except (CorralError, OSError) as err:
        raise HypervisorError(f"{why}: cannot read the user-id pool ({paths.uid_pool}):"
                              f" {err}") from err
    if not pool:
        raise HypervisorError(f"{why}: the cluster's user-id pool is empty; {_SET_POOL}")
    try:
        reservation = uidpool.request_unused_uid(pool, paths.uid_pool_lock_dir)
    except CorralError as err:
        raise HypervisorError(f"{why}: {err}") from err
    uid = reservation.uid
    try:
        return pwd.getpwuid(uid).pw_name, reservation
    except KeyError:
        return f"{uid}:{uid}", reservation


def _prepare(paths: Paths, spec: InstanceSpec, socket_dir: Path) -> SecuritySetup:
    hvparams = spec.hvparams
    try:
        check_security_params(hvparams)
    except ParameterError as err:
        raise HypervisorError(f"cannot start instance {spec.name}: {err}") from err
    model = _model(hvparams)
    setup = SecuritySetup(paths=paths, extra={"model": model, "chroot": None})
    user: str | None = None
    if model == "user":
        domain = _domain(hvparams)
        try:
            setup.uid = _user(domain).pw_uid
        except HypervisorError as err:
            raise HypervisorError(f"cannot start instance {spec.name}: {err}") from None
        user = domain
    elif model == "pool":
        user, setup.reservation = _pool_user(paths, spec.name)
        setup.uid = setup.reservation.uid
    try:
        if model != "none":
            # The sockets qemu listens on are root's: qemu, once it is another
            # user, must not reach its own monitor by path (nor may anyone else).
            os.chmod(socket_dir, 0o700)
        if hvparams.get("use_chroot"):
            directory = chroot_dir(paths, spec.name)
            directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _remove_chroot(directory, paths)  # one left by a qemu that died unseen
            directory.mkdir(mode=0o700)
            setup.extra["chroot"] = str(directory)
            setup.args += ["-chroot", str(directory)]
    except (OSError, HypervisorError) as err:
        setup.abandon()
        raise HypervisorError(
            f"cannot start instance {spec.name}: cannot prepare its confinement: {err}"
        ) from err
    if user is not None:
        setup.args += ["-runas", user]
    return setup


async def prepare_security(spec: InstanceSpec, runtime: InstanceRuntime) -> SecuritySetup:
    """Choose who (and where) ``spec``'s qemu runs as: look the ``security_domain`` user
    up, or take an unused uid of the pool (locked until :meth:`SecuritySetup.started`),
    and make the empty chroot directory. Call it after the runtime directories exist.

    :raises HypervisorError: naming what is wrong (a missing user, an empty or used-up
        pool); nothing stays taken or made then.
    """
    return await asyncio.to_thread(_prepare, runtime.paths, spec, runtime.socket_dir)


def _remove_chroot(directory: Path, paths: Paths | None) -> None:
    try:
        directory.rmdir()
    except FileNotFoundError:
        return
    except OSError as err:
        if err.errno != errno.ENOTEMPTY or paths is None:
            raise HypervisorError(f"cannot remove the chroot directory {directory}: {err}"
                                  ) from err
        target = quarantine_dir(paths)
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        moved = Path(tempfile.mkdtemp(prefix=f"{directory.name}-{stamp}-", dir=target))
        os.replace(directory, moved / "root")
        log.warning("the chroot directory of instance %s was not empty once its qemu had"
                    " stopped; it is kept in %s: look at what is inside, then remove it",
                    directory.name, moved)


def _release(paths: Paths, record: RuntimeRecord) -> None:
    extra = record.extra.get("security") or {}
    if extra.get("model") == "pool" and record.uid is not None:
        try:
            uidpool.release_uid(record.uid, paths.uid_pool_lock_dir)
        except CorralError as err:
            log.warning("instance %s: %s", record.name, err)
    chroot = extra.get("chroot")
    if chroot:
        try:
            _remove_chroot(Path(chroot), paths)
        except HypervisorError as err:
            log.warning("instance %s: %s", record.name, err)


async def release_security(runtime: InstanceRuntime, record: RuntimeRecord) -> None:
    """Give back what :func:`prepare_security` took, from what ``record`` says, once the
    qemu process is gone: the pool uid goes back to the pool, the chroot directory is
    removed (one that is not empty goes to :func:`quarantine_dir`). Never fails for
    what is already gone; safe to call again."""
    await asyncio.to_thread(_release, runtime.paths, record)
