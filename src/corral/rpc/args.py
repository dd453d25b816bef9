"""The arguments of every node procedure, one msgspec Struct each: the master↔node contract.

The master sends a procedure's arguments as a JSON object; the node decodes it into
the procedure's Struct with :func:`decode_args` before anything runs, and the
master checks what it is about to send with the same Structs (:func:`check_args`),
so both sides read one definition. Decoding is strict: no unknown argument, no
``true`` for a number, no number for a string. A refusal is a
:class:`~corral.errors.ParameterError` naming the procedure and the argument.

Instances and disks travel as :class:`~corral.objects.specs.InstanceSpec` and
:class:`~corral.objects.specs.DiskSpec`; replication rows as the tuples below, and
uploaded files' contents as base64 strings. Every procedure a node runs has a Struct
in :data:`ARGS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from corral.errors import ParameterError
from corral.hypervisor.base import HotplugAction, HotplugTarget, RebootType
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.paths import Paths
from corral.rpc.protocol import DEFAULT_HANDOVER_WAIT

__all__ = [
    "ARGS",
    "DEFAULT_HANDOVER_WAIT",
    "DEFAULT_IMPEXP_PORTS",
    "MAX_DELAY",
    "PATH_NAMED_FILES",
    "ArchiveRow",
    "BlockdevCopyFromArgs",
    "BlockdevCreateArgs",
    "BlockdevGrowArgs",
    "BlockdevOpenArgs",
    "BlockdevRenameArgs",
    "BlockdevSetInfoArgs",
    "BlockdevSnapshotArgs",
    "ConfigReplicateArgs",
    "ConfigRow",
    "DevicesArgs",
    "DiskArgs",
    "DiskRename",
    "DisksArgs",
    "ExportArgs",
    "ExportFinalizeArgs",
    "ExportPrepareArgs",
    "ExtStorageDiagnoseArgs",
    "HotplugDeviceArgs",
    "HypervisorParamsArgs",
    "HypervisorsArgs",
    "ImpexpCleanupArgs",
    "ImpexpExportArgs",
    "ImpexpImportArgs",
    "ImpexpNamesArgs",
    "InstanceArgs",
    "InstanceInfoArgs",
    "InstanceOsAddArgs",
    "InstanceRebootArgs",
    "InstanceRunRenameArgs",
    "InstanceShutdownArgs",
    "InstanceStartArgs",
    "JobRow",
    "JobsReplicateArgs",
    "MasterDemoteArgs",
    "MetaRow",
    "MigrationAcceptArgs",
    "MigrationFinishArgs",
    "MigrationSendArgs",
    "MoveExportArgs",
    "MoveImportArgs",
    "NoArgs",
    "NodeInfoArgs",
    "NodeVerifyArgs",
    "OsArgs",
    "OsGetArgs",
    "OsValidateArgs",
    "ProcedureArgs",
    "ReasonTrail",
    "RenewCryptoArgs",
    "ReplicateArgs",
    "RestartDaemonsArgs",
    "RunCommandArgs",
    "StorageExecuteArgs",
    "StorageListArgs",
    "StorageModifyArgs",
    "StorageUnitArgs",
    "TestDelayArgs",
    "TransferEnd",
    "TransferTls",
    "UploadFile",
    "UploadFilesArgs",
    "VolumeGroupsArgs",
    "WatcherPauseArgs",
    "WriteFilePartArgs",
    "X509CertCreateArgs",
    "X509CertRemoveArgs",
    "check_args",
    "decode",
    "decode_args",
]

A = TypeVar("A", bound="ProcedureArgs")

Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]

#: A reason trail as it travels to a node (seed 001): ``[source, reason, timestamp_ns]``
#: entries. The node appends its own ``gnt:daemon:noded:<operation>`` entry and keeps
#: the trail of the last status change in the instance's reason file.
ReasonTrail = list[tuple[str, str, int]]


class ProcedureArgs(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Base of every procedure's arguments: keyword-only, immutable, and an argument
    the procedure does not take is refused rather than ignored."""


class NoArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A procedure without arguments (``version``, ``node_leave``, ``master_info``,
    ``master_takeover``, ``replica_dump``)."""


class NodeInfoArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``node_info``: the storage directories to measure (cluster-wide paths), the
    hypervisors to ask for memory (the first one answers; empty: every one here) and
    whether to report the LVM volume groups (``volume_groups``: their names; the
    answer then has every group's size and free space)."""

    storage_dirs: list[str] = msgspec.field(default_factory=list)
    hypervisors: list[str] = msgspec.field(default_factory=list)
    volume_groups: list[str] = msgspec.field(default_factory=list)


class StorageUnitArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """What every storage unit procedure names: the storage type (``lvm-pv``,
    ``lvm-vg``, ``file``, ``sharedfile``) and its arguments (the storage directories
    for the file types)."""

    su_type: str
    su_args: list[str] = msgspec.field(default_factory=list)


class StorageListArgs(StorageUnitArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``storage_list``: the ``fields`` of every unit, or of unit ``name``."""

    name: str | None = None
    fields: list[str]


class StorageModifyArgs(StorageUnitArgs, kw_only=True, frozen=True,
                        forbid_unknown_fields=True):
    """``storage_modify``: set ``changes`` (field: value) on unit ``name``."""

    name: str
    changes: dict[str, Any]


class StorageExecuteArgs(StorageUnitArgs, kw_only=True, frozen=True,
                         forbid_unknown_fields=True):
    """``storage_execute``: run ``operation`` (``fix-consistency``, ...) on unit ``name``."""

    name: str
    operation: str


class VolumeGroupsArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``lv_list``: the volume groups whose logical volumes to list (all when empty)."""

    volume_groups: list[str] = msgspec.field(default_factory=list)


class DevicesArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``bdev_sizes``: block device paths."""

    devices: list[str]


class NodeVerifyArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``node_verify``: what ``gnt-cluster verify`` wants to know of a node, gathered in
    one call. Each part is asked for by giving it; a part left empty is not looked at.

    ``hypervisors`` maps each enabled hypervisor to its filled cluster parameters (the
    node checks the hypervisor and lists its instances); ``memory_hypervisor`` is the
    one asked for the node's memory. ``files`` names the ancillary files to checksum
    (:data:`corral.noded.files.KNOWN_FILES` names, ``vnc_password_file:<path>`` and
    ``user:<path>`` entries). ``storage`` maps a disk template to the cluster-wide
    directory (or volume group) it uses here; ``volumes`` lists the templates whose
    disks to list. ``certificates`` names the certificate files to check for expiry
    (``ca_cert``, ``node_cert``, ``master_client_cert``, ``rapi_cert``); ``bridges``
    the bridges instances need; ``candidate`` whether the node is a master candidate
    (its confd must answer and its replica's serial is reported); ``os_search_path``
    where to list the OS definitions.
    """

    hypervisors: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    memory_hypervisor: str | None = None
    files: list[str] = msgspec.field(default_factory=list)
    storage: dict[str, str] = msgspec.field(default_factory=dict)
    volumes: list[str] = msgspec.field(default_factory=list)
    certificates: list[str] = msgspec.field(default_factory=list)
    bridges: list[str] = msgspec.field(default_factory=list)
    candidate: bool = False
    os_search_path: list[str] | None = None
    """Where to look for OS definitions (cluster-wide directories); None: not asked."""


class HypervisorsArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_list``, ``all_instances_info``: which hypervisors to ask
    (``None``: every hypervisor this node implements)."""

    hypervisors: list[str] | None = None


class HypervisorParamsArgs(ProcedureArgs, kw_only=True, frozen=True,
                           forbid_unknown_fields=True):
    """``hypervisor_validate_params``: filled parameters of one hypervisor to check."""

    hypervisor: str
    hvparams: dict[str, Any]


class InstanceInfoArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_info``: one instance, by name, under one hypervisor."""

    instance: str
    hypervisor: str


class InstanceArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A procedure about one instance (``instance_check_host``, ``migration_accept``,
    ``instance_console``)."""

    instance: InstanceSpec


class InstanceStartArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_start``; ``reason`` is the trail of the operation that starts it."""

    startup_paused: bool = False
    reason: ReasonTrail = msgspec.field(default_factory=list)


class InstanceShutdownArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_shutdown``: ``timeout`` is the guest's grace period in seconds;
    ``forget`` drops what the node keeps about the instance's status (it is removed
    or leaves this node)."""

    timeout: float = 120.0
    reason: ReasonTrail = msgspec.field(default_factory=list)
    forget: bool = False


class InstanceRebootArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_reboot``."""

    reboot_type: RebootType
    timeout: float = 120.0
    reason: ReasonTrail = msgspec.field(default_factory=list)


class MigrationAcceptArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``migration_accept``: on the target, the address to listen on and whether the
    disks' data comes along (local disks, created empty here beforehand)."""

    address: str = ""
    mirror_disks: bool = False
    devices: dict[str, Any] = msgspec.field(default_factory=dict)
    """The source's device layout, as its ``migration_info`` gave it (opaque here)."""


class MigrationSendArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``migration_send``: on the source, where to send the instance: the target's
    address and name (its certificate's), and its disk port when disks are mirrored."""

    target_ip: str
    live: bool = True
    target_name: str = ""
    nbd_port: int | None = None


class MigrationFinishArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``migration_finish`` (target) and ``migration_finish_source`` (source): whether
    the migration succeeded; ``reason``, the trail of the instance's last status
    change, which the target keeps from then on (the source forgets it)."""

    success: bool
    reason: ReasonTrail = msgspec.field(default_factory=list)


class HotplugDeviceArgs(InstanceArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One hotplug step on a running instance: ``disk`` for target ``disk``, ``nic``
    for target ``nic`` (the instance spec is the one that runs now)."""

    action: HotplugAction
    target: HotplugTarget
    disk: DiskSpec | None = None
    nic: NicSpec | None = None


class DiskArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A procedure about one disk (``blockdev_create``, ``blockdev_remove``)."""

    disk: DiskSpec


class BlockdevCreateArgs(DiskArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``blockdev_create``: ``info`` (Ganeti's ``originstname+<instance>``) becomes the
    new disk's metadata where its driver keeps some (an ExtStorage ``setinfo``)."""

    info: str = ""


class BlockdevSetInfoArgs(DiskArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``blockdev_setinfo``: new metadata for a disk (an instance renamed)."""

    info: str


class BlockdevOpenArgs(ProcedureArgs, kw_only=True, frozen=True,
                       forbid_unknown_fields=True):
    """``blockdev_open``: make assembled disks ready for I/O, ``exclusive`` unless the
    target of a migration opens them too."""

    disks: list[DiskSpec]
    exclusive: bool = True


class ExtStorageDiagnoseArgs(ProcedureArgs, kw_only=True, frozen=True,
                             forbid_unknown_fields=True):
    """``extstorage_diagnose``: the cluster-wide ExtStorage search path."""

    search_path: list[str] = msgspec.field(
        default_factory=lambda: list(Paths.DEFAULT_EXTSTORAGE_SEARCH_PATH))


class BlockdevGrowArgs(DiskArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``blockdev_grow``: by ``amount`` MiB; ``dryrun`` only checks."""

    amount: int
    dryrun: bool = False


class DisksArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``blockdev_assemble``, ``blockdev_shutdown``, ``blockdev_find``: an instance's
    disks in order."""

    disks: list[DiskSpec]


class DiskRename(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One disk of ``blockdev_rename`` and the logical id it gets."""

    disk: DiskSpec
    new_logical_id: list[str]


class BlockdevRenameArgs(ProcedureArgs, kw_only=True, frozen=True,
                         forbid_unknown_fields=True):
    """``blockdev_rename``: disks to give new logical ids, in order."""

    renames: list[DiskRename]


class BlockdevSnapshotArgs(DiskArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``blockdev_snapshot``: a snapshot of ``disk`` called ``name`` with room for
    ``size`` MiB of changes."""

    name: Annotated[str, msgspec.Meta(min_length=1)]
    size: Annotated[int, msgspec.Meta(ge=1)]


class BlockdevCopyFromArgs(DiskArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``blockdev_copy_from``: fill ``disk`` here from ``source_disk`` on the node
    daemon at ``source_ip``:``source_port``."""

    source_disk: DiskSpec
    source_ip: str
    source_port: Port


class OsArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """What every OS procedure takes: the cluster-wide OS search path and whether
    to accept a variant the OS does not declare (``os_diagnose`` takes only these)."""

    search_path: list[str] = msgspec.field(
        default_factory=lambda: list(Paths.DEFAULT_OS_SEARCH_PATH))
    force_variant: bool = False


class OsGetArgs(OsArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``os_get``: an OS name, possibly with ``+variant``."""

    name: str


class OsValidateArgs(OsGetArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``os_validate``: the OS parameters to check with the definition's script."""

    osparams: dict[str, Any] = msgspec.field(default_factory=dict)


class InstanceOsAddArgs(OsArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_os_add``: install the instance's OS (``reinstall`` over an old one)."""

    instance: InstanceSpec
    reinstall: bool = False
    debug: int = 0


class InstanceRunRenameArgs(OsArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``instance_run_rename``: run the OS rename script for a renamed instance."""

    instance: InstanceSpec
    old_name: str
    debug: int = 0


#: The longest ``test_delay`` a node accepts, in seconds (a week), so that a typo does
#: not park a request on a node for years.
MAX_DELAY: Final = 7 * 24 * 3600.0


class TestDelayArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``test_delay``: sleep ``duration`` seconds on the node (``gnt-debug delay -n``)."""

    duration: Annotated[float, msgspec.Meta(ge=0, le=MAX_DELAY)]


# -- replication (corral.noded.replication; parts: corral.rpc.chunks) ------------------
#: A configuration row: kind, UUID, serial, the object as JSON text.
ConfigRow = tuple[str, str, int, str]
#: A live job: its id and the job as JSON text.
JobRow = tuple[int, str]
#: An archived job: its id, when it ended (seconds, or null) and the job as JSON text.
ArchiveRow = tuple[int, int | None, str]
#: A job queue meta value (``last_job_id``, ``drained``, ``serial``): key, value.
MetaRow = tuple[str, int | float | str | None]


class ReplicateArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """What every replication update carries besides its rows: ``serial_only`` (only
    report the replica's serial), or a ``snapshot`` at ``serial``, or the delta from
    ``base`` to ``serial``; an update sent in parts also has ``session``, ``part``
    (0, 1, ...) and ``last``."""

    serial: int = 0
    base: int | None = None
    snapshot: bool = False
    serial_only: bool = False
    session: str | None = None
    part: Annotated[int, msgspec.Meta(ge=0)] = 0
    last: bool = True

    def __post_init__(self) -> None:
        """A delta says which serial it applies to."""
        if not self.serial_only and not self.snapshot and self.base is None:
            raise ValueError("a delta needs 'base' (the serial it applies to); or send a "
                             "snapshot")


class ConfigReplicateArgs(ReplicateArgs, kw_only=True, frozen=True,
                          forbid_unknown_fields=True):
    """``config_replicate``: configuration rows written and UUIDs deleted."""

    upserts: list[ConfigRow] = msgspec.field(default_factory=list)
    deletes: list[str] = msgspec.field(default_factory=list)


class JobsReplicateArgs(ReplicateArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``jobs_replicate``: live jobs written, jobs archived and meta values."""

    jobs: list[JobRow] = msgspec.field(default_factory=list)
    archive: list[ArchiveRow] = msgspec.field(default_factory=list)
    meta: list[MetaRow] = msgspec.field(default_factory=list)


# -- master role (corral.noded.master_role) -------------------------------------------


class MasterDemoteArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``master_demote``: in a planned failover, the node that takes over
    (``new_master``) and how long running opcodes may finish first."""

    new_master: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    handover_wait: Annotated[float, msgspec.Meta(ge=0)] = DEFAULT_HANDOVER_WAIT


# -- ancillary files (corral.noded.files) ---------------------------------------------
#: Known files ``upload_files`` writes at the path the master's configuration names
#: (a hypervisor parameter), so they travel with ``name`` and ``path``.
PATH_NAMED_FILES: Final = frozenset({"vnc_password_file"})


class UploadFile(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One file of ``upload_files``: a known file by ``name`` or a file of the user
    file list by ``path``, its contents (base64 on the wire) and, for a path, its
    permission bits."""

    name: str | None = None
    path: str | None = None
    data: bytes
    mode: Annotated[int, msgspec.Meta(ge=0, le=0o7777)] = 0o644

    def __post_init__(self) -> None:
        """Exactly one of ``name`` and ``path``, except for the known files that live
        where the configuration says (:data:`PATH_NAMED_FILES`), which carry both."""
        if self.name is None and self.path is None:
            raise ValueError("a file needs 'name' (a known file) or 'path' (a file of "
                             "the user file list)")
        if self.name in PATH_NAMED_FILES:
            if self.path is None:
                raise ValueError(f"a {self.name} needs the 'path' the configuration names")
            return
        if self.name is not None and self.path is not None:
            raise ValueError(f"a file has both 'name' ({self.name!r}) and 'path' "
                             f"({self.path!r}); it is one or the other")


class UploadFilesArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``upload_files``: the files to write, all or none."""

    files: list[UploadFile]


#: The argument Struct of every procedure, by procedure name.
class WatcherPauseArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``set_watcher_pause``: pause this node's watcher until ``until`` (seconds since
    the epoch), or end the pause (``None``)."""

    until: float | None = None


class RunCommandArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``run_command``: a shell command line (``gnt-cluster command``) and how long it
    may run, in seconds."""

    command: Annotated[str, msgspec.Meta(min_length=1)]
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 3600.0


class WriteFilePartArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``write_file_part``: one part of a file ``gnt-cluster copyfile`` copies: its
    absolute path, the transfer it belongs to, where the part starts, its bytes
    (base64) and, with the last part, the file's mode and modification time."""

    path: str
    transfer: str
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    data: str = ""
    last: bool = True
    mode: Annotated[int, msgspec.Meta(ge=0, le=0o7777)] = 0o644
    mtime: float | None = None


class RenewCryptoArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``renew_crypto``: one step of replacing the cluster's certificates (see
    :mod:`corral.noded.crypto`): ``stage`` (trust ``ca_bundle``, keep the new
    certificate and keys aside), ``activate`` (serve and call with them), ``finish``
    (trust ``ca_bundle`` only; the master keeps ``ca_key``) or ``abort`` (trust
    ``ca_bundle`` again, drop what was kept aside)."""

    phase: Literal["stage", "activate", "finish", "abort"]
    ca_bundle: str = ""
    node_cert: str = ""
    node_key: str = ""
    master_client: str | None = None
    ca_key: str | None = None


class X509CertCreateArgs(ProcedureArgs, kw_only=True, frozen=True,
                         forbid_unknown_fields=True):
    """``x509_cert_create``: a new key and certificate for one inter-cluster move,
    valid ``validity`` seconds (at most a week)."""

    validity: Annotated[int, msgspec.Meta(ge=1, le=7 * 24 * 3600)]
    #: The certificate's common name (the node's name, as the master knows it).
    common_name: Annotated[str, msgspec.Meta(max_length=255)] = ""


class X509CertRemoveArgs(ProcedureArgs, kw_only=True, frozen=True,
                         forbid_unknown_fields=True):
    """``x509_cert_remove``: forget the move key ``name``."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class RestartDaemonsArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``restart_daemons``: restart those of these daemons that run on the node (so
    that they load new keys or certificates)."""

    daemons: list[Literal["confd", "rapi", "mond"]]



# -- disk data transfers (corral.impexp) and exports ------------------------------------
#: The ports an importer listens on when the master names none (first free one).
DEFAULT_IMPEXP_PORTS = (11100, 11999)

TransferName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
ExportName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")]


class TransferTls(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The certificate, key and CA (PEM) a transfer uses instead of the cluster's own:
    per-move ones between clusters."""

    cert: str
    key: str
    ca: str


class TransferEnd(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One end of a transfer as the master names it: ``export`` (file ``file`` of the
    export ``export`` in this node's export directory, being written while it is
    ``<export>.new``), ``disk`` (an instance disk, read or written in place) or
    ``os`` (the instance's OS ``export``/``import`` script for disk ``index``)."""

    kind: Literal["export", "disk", "os"]
    export: ExportName | None = None
    file: TransferName | None = None
    disk: DiskSpec | None = None
    instance: InstanceSpec | None = None
    index: Annotated[int, msgspec.Meta(ge=0)] = 0
    search_path: list[str] = msgspec.field(
        default_factory=lambda: list(Paths.DEFAULT_OS_SEARCH_PATH))


class ImpexpImportArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``impexp_import``: listen on ``host`` (a port of ``ports``) for the transfer
    ``name`` with ``magic`` and feed ``destination``."""

    name: TransferName
    magic: str
    compression: str = "none"
    destination: TransferEnd
    host: str
    ports: tuple[Port, Port] = DEFAULT_IMPEXP_PORTS
    accept_timeout: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    tls: TransferTls | None = None


class ImpexpExportArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``impexp_export``: send ``source`` to the importer at ``host``:``port``;
    ``bandwidth`` in bytes per second (0: no limit); ``expected`` bytes for the ETA."""

    name: TransferName
    magic: str
    compression: str = "none"
    source: TransferEnd
    host: str
    port: Port
    bandwidth: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    expected: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tls: TransferTls | None = None


class ImpexpNamesArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``impexp_status``, ``impexp_abort``: the transfers named (all of them when
    empty, for ``impexp_status``)."""

    names: list[TransferName] = msgspec.field(default_factory=list)


class ImpexpCleanupArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``impexp_cleanup``: forget finished transfers older than ``older_than`` seconds
    and clean up what a transfer of an earlier node daemon left (stale ones)."""

    older_than: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class ExportPrepareArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``export_prepare``: make the directory ``<export>.new`` for ``size`` MiB of
    disk images, failing early when the export directory has not that much free."""

    export: ExportName
    size: Annotated[int, msgspec.Meta(ge=0)]


class ExportFinalizeArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``export_finalize``: write ``config`` (the export's config.ini) and put
    ``<export>.new`` in the place of ``export``."""

    export: ExportName
    config: str


class ExportArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``export_info``, ``export_remove``, ``export_abort``: one export by name (a
    directory name in the export directory, or an absolute path below it)."""

    export: str

class MoveImportArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``move_import``: an importer of an inter-cluster move (``transfer``, whose
    ``tls`` must be unset) with this node's move key ``x509_key_name`` and the source
    cluster's move certificate ``peer_ca`` (PEM) as the one CA it trusts."""

    x509_key_name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    peer_ca: str
    transfer: ImpexpImportArgs


class MoveExportArgs(ProcedureArgs, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``move_export``: an exporter of an inter-cluster move (see
    :class:`MoveImportArgs`), trusting the destination's move certificate only."""

    x509_key_name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    peer_ca: str
    transfer: ImpexpExportArgs


ARGS: Final[dict[str, type[ProcedureArgs]]] = {
    "version": NoArgs,
    "node_info": NodeInfoArgs,
    "node_leave": NoArgs,
    "instance_start": InstanceStartArgs,
    "instance_shutdown": InstanceShutdownArgs,
    "instance_reboot": InstanceRebootArgs,
    "instance_list": HypervisorsArgs,
    "instance_info": InstanceInfoArgs,
    "all_instances_info": HypervisorsArgs,
    "instance_check_host": InstanceArgs,
    "hypervisor_validate_params": HypervisorParamsArgs,
    "migration_accept": MigrationAcceptArgs,
    "migration_send": MigrationSendArgs,
    "migration_finish": MigrationFinishArgs,
    "migration_finish_source": MigrationFinishArgs,
    "migration_status": InstanceInfoArgs,
    "migration_info": InstanceInfoArgs,
    "instance_console": InstanceArgs,
    "hotplug_supported": InstanceArgs,
    "hotplug_device": HotplugDeviceArgs,
    "blockdev_create": BlockdevCreateArgs,
    "blockdev_remove": DiskArgs,
    "blockdev_grow": BlockdevGrowArgs,
    "blockdev_assemble": DisksArgs,
    "blockdev_shutdown": DisksArgs,
    "blockdev_copy_from": BlockdevCopyFromArgs,
    "blockdev_find": DisksArgs,
    "blockdev_rename": BlockdevRenameArgs,
    "blockdev_snapshot": BlockdevSnapshotArgs,
    "blockdev_setinfo": BlockdevSetInfoArgs,
    "blockdev_open": BlockdevOpenArgs,
    "blockdev_close": DisksArgs,
    "extstorage_diagnose": ExtStorageDiagnoseArgs,
    "storage_list": StorageListArgs,
    "storage_modify": StorageModifyArgs,
    "storage_execute": StorageExecuteArgs,
    "node_volumes": NoArgs,
    "lv_list": VolumeGroupsArgs,
    "bdev_sizes": DevicesArgs,
    "os_diagnose": OsArgs,
    "os_get": OsGetArgs,
    "instance_os_add": InstanceOsAddArgs,
    "instance_run_rename": InstanceRunRenameArgs,
    "os_validate": OsValidateArgs,
    "test_delay": TestDelayArgs,
    "config_replicate": ConfigReplicateArgs,
    "jobs_replicate": JobsReplicateArgs,
    "master_info": NoArgs,
    "master_demote": MasterDemoteArgs,
    "master_takeover": NoArgs,
    "replica_dump": NoArgs,
    "upload_files": UploadFilesArgs,
    "set_watcher_pause": WatcherPauseArgs,
    "run_command": RunCommandArgs,
    "write_file_part": WriteFilePartArgs,
    "renew_crypto": RenewCryptoArgs,
    "restart_daemons": RestartDaemonsArgs,
    "node_verify": NodeVerifyArgs,
    "x509_cert_create": X509CertCreateArgs,
    "x509_cert_remove": X509CertRemoveArgs,
    "x509_cert_list": NoArgs,
    "move_import": MoveImportArgs,
    "move_export": MoveExportArgs,
    "impexp_import": ImpexpImportArgs,
    "impexp_export": ImpexpExportArgs,
    "impexp_status": ImpexpNamesArgs,
    "impexp_abort": ImpexpNamesArgs,
    "impexp_cleanup": ImpexpCleanupArgs,
    "export_prepare": ExportPrepareArgs,
    "export_finalize": ExportFinalizeArgs,
    "export_list": NoArgs,
    "export_info": ExportArgs,
    "export_remove": ExportArgs,
    "export_abort": ExportArgs,
}

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_FIELD = re.compile(r"^Object (?P<kind>missing required|contains unknown) field `(?P<name>[^`]*)`$")
_FIRST = re.compile(r"^\.(?P<name>[A-Za-z_][A-Za-z_0-9]*)")


def _refusal(procedure: str, kind: type[ProcedureArgs], err: msgspec.ValidationError) -> str:
    match = _AT.match(str(err))
    what, path = (match["what"], match["path"] or "") if match else (str(err), "")
    field = _FIELD.match(what)
    if not path and field is not None:
        if field["kind"] == "missing required":
            return f"procedure {procedure}: argument {field['name']!r} is missing"
        takes = ", ".join(kind.__struct_fields__) or "no arguments"
        return (f"procedure {procedure}: unknown argument {field['name']!r}; it takes "
                f"{takes}")
    first = _FIRST.match(path)
    if first is None:
        return f"procedure {procedure}: invalid arguments: {what}"
    name, rest = first["name"], path[first.end():]
    where = f" (at {name}{rest})" if rest else ""
    return f"procedure {procedure}: argument {name!r}: {what[:1].lower()}{what[1:]}{where}"


def decode(procedure: str, kind: type[A], args: Mapping[str, Any]) -> A:
    """``args`` as ``kind``, strictly; a :class:`ParameterError` naming ``procedure``
    and the argument otherwise."""
    try:
        return msgspec.convert(dict(args), kind, strict=True)
    except msgspec.ValidationError as err:
        raise ParameterError(_refusal(procedure, kind, err)) from None


def decode_args(procedure: str, args: Mapping[str, Any]) -> ProcedureArgs:
    """The arguments of ``procedure`` (one listed in :data:`ARGS`) as its Struct."""
    return decode(procedure, ARGS[procedure], args)


def check_args(procedure: str, args: Mapping[str, Any]) -> None:
    """Refuse arguments ``procedure`` would refuse, before they are sent; a procedure
    this contract does not know is left to the node, which refuses it by name."""
    kind = ARGS.get(procedure)
    if kind is not None:
        decode(procedure, kind, args)
