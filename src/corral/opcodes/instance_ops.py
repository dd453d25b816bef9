"""Instance life-cycle opcodes, with Ganeti's OP_ID and parameter names.

Parameter names, types and defaults are Ganeti 3.0's so that RAPI bodies and scripts
written for Ganeti decode unchanged. Some parameters are accepted only so that such
bodies decode; the logical units (:mod:`corral.cmdlib.instance`) say which ones they
ignore and refuse values they cannot honour (e.g. ``mode="import"``) with an error
that says what is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = [
    "CREATE_MODES",
    "REBOOT_TYPES",
    "InstanceOp",
    "OpInstanceCreate",
    "OpInstanceQueryData",
    "OpInstanceReboot",
    "OpInstanceReinstall",
    "OpInstanceRemove",
    "OpInstanceRename",
    "OpInstanceShutdown",
    "OpInstanceStartup",
]

#: Ganeti's instance creation modes (only ``create`` is implemented so far).
CREATE_MODES = ("create", "import", "remote-import")
#: Ganeti's reboot types.
REBOOT_TYPES = ("soft", "hard", "full")

_Name = Annotated[str, msgspec.Meta(min_length=1)]
_Timeout = Annotated[int, msgspec.Meta(ge=0)]
_CreateMode = Literal["create", "import", "remote-import"]
_RebootType = Literal["soft", "hard", "full"]
_FileDriver = Literal["loop", "blktap", "blktap2"]


class InstanceOp(OpCode, kw_only=True):
    """An opcode about one existing instance, named by name or UUID (``instance_uuid``,
    when given too, must name the same instance)."""

    SUMMARY_FIELD: ClassVar[str | None] = "instance_name"

    instance_name: _Name
    instance_uuid: str | None = None


@register
class OpInstanceCreate(OpCode, tag="OP_INSTANCE_CREATE"):
    """Create an instance: its disks on the primary node, the OS installed, started.

    ``disks`` are dicts with ``size`` (MiB or ``"10G"``), ``mode`` (``rw``/``ro``),
    ``name`` and ``spindles``; ``nics`` are dicts with ``mac``, ``ip``, ``mode``,
    ``link``, ``vlan``, ``name`` and ``network``. The result is the list of the nodes
    the instance uses.
    """

    SUMMARY_FIELD: ClassVar[str | None] = "instance_name"

    instance_name: _Name
    mode: _CreateMode = "create"
    disk_template: str | None = None
    disks: list[dict[str, Any]] = msgspec.field(default_factory=list)
    nics: list[dict[str, Any]] = msgspec.field(default_factory=list)
    os_type: str | None = None
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams_private: dict[str, Any] | None = None
    osparams_secret: dict[str, Any] | None = None
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    hypervisor: str | None = None
    pnode: str | None = None
    pnode_uuid: str | None = None
    snode: str | None = None
    snode_uuid: str | None = None
    iallocator: str | None = None
    group_name: str | None = None
    start: bool = True
    wait_for_sync: bool = True
    ip_check: bool = True
    name_check: bool = True
    conflicts_check: bool = True
    no_install: bool | None = None
    file_storage_dir: str | None = None
    file_driver: _FileDriver | None = None
    force_variant: bool = False
    identify_defaults: bool = False
    ignore_ipolicy: bool = False
    opportunistic_locking: bool = False
    tags: list[_Name] = msgspec.field(default_factory=list)
    source_handshake: list[Any] | None = None
    source_instance_name: str | None = None
    source_shutdown_timeout: _Timeout = 120
    source_x509_ca: str | None = None
    src_node: str | None = None
    src_node_uuid: str | None = None
    src_path: str | None = None
    compress: str = "none"
    forthcoming: bool = False
    commit: bool = False
    instance_communication: bool = False
    helper_startup_timeout: int | None = None
    helper_shutdown_timeout: int | None = None
    member_of: list[str] = msgspec.field(default_factory=list)
    """corral's placement constraints: Placement's ``member_of`` values (``AGG``,
    ``in:A,B``, ``!AGG``, ``!in:A,B``), aggregates by name or UUID, all of which the
    primary node must meet."""
    required_traits: list[str] = msgspec.field(default_factory=list)
    """corral's: traits the primary node must have."""
    forbidden_traits: list[str] = msgspec.field(default_factory=list)
    """corral's: traits the primary node must not have."""


@register
class OpInstanceRemove(InstanceOp, tag="OP_INSTANCE_REMOVE"):
    """Shut an instance down, remove its disks and forget it."""

    shutdown_timeout: _Timeout = 120
    ignore_failures: bool = False


@register
class OpInstanceStartup(InstanceOp, tag="OP_INSTANCE_STARTUP"):
    """Start an instance; ``hvparams``/``beparams`` apply to this start only."""

    force: bool = False
    ignore_offline_nodes: bool = False
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    no_remember: bool = False
    startup_paused: bool = False
    shutdown_timeout: _Timeout = 120


@register
class OpInstanceShutdown(InstanceOp, tag="OP_INSTANCE_SHUTDOWN"):
    """Stop an instance (``timeout`` seconds for a clean shutdown)."""

    force: bool = False
    ignore_offline_nodes: bool = False
    timeout: _Timeout = 120
    no_remember: bool = False
    admin_state_source: Literal["admin", "user"] | None = None


@register
class OpInstanceReboot(InstanceOp, tag="OP_INSTANCE_REBOOT"):
    """Reboot an instance: ``soft``/``hard`` by its hypervisor, ``full`` = stop + start."""

    reboot_type: _RebootType
    shutdown_timeout: _Timeout = 120
    ignore_secondaries: bool = False


@register
class OpInstanceReinstall(InstanceOp, tag="OP_INSTANCE_REINSTALL"):
    """Reinstall a stopped instance's OS, optionally another one (``os_type``).

    ``osparams`` apply to this installation only (Ganeti's "temporary OS parameters").
    """

    force_variant: bool = False
    os_type: str | None = None
    osparams: dict[str, Any] | None = None
    osparams_private: dict[str, Any] | None = None
    osparams_secret: dict[str, Any] | None = None


@register
class OpInstanceRename(InstanceOp, tag="OP_INSTANCE_RENAME"):
    """Rename a stopped instance and run its OS's rename script; returns the new name."""

    SUMMARY_FIELD: ClassVar[str | None] = None

    new_name: _Name
    name_check: bool = True
    ip_check: bool = True


@register
class OpInstanceQueryData(OpCode, tag="OP_INSTANCE_QUERY_DATA"):
    """Detailed information on instances (all when ``instances`` is empty), keyed by
    name; ``static`` answers from the configuration without asking the nodes."""

    use_locking: bool = False
    instances: list[_Name] = msgspec.field(default_factory=list)
    static: bool = False
