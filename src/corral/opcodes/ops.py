"""The opcodes corral implements, with Ganeti's ``OP_ID`` and parameter names.

Parameter types are checked when a job is submitted; an opcode that corral does not
implement is not defined here and therefore refused.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = [
    "TAG_KINDS",
    "ListChange",
    "OpClusterQuery",
    "OpClusterRedistConf",
    "OpClusterRenewCrypto",
    "OpClusterSetParams",
    "OpQuery",
    "OpQueryFields",
    "OpTagsDel",
    "OpTagsGet",
    "OpTagsSearch",
    "OpTagsSet",
    "OpTestDelay",
]

#: Object kinds whose tags the tag opcodes handle (Ganeti's kinds); for every kind but
#: ``cluster`` the opcode's ``name`` (a name or a UUID) says which object.
TAG_KINDS = ("cluster", "node", "nodegroup", "instance", "network")

#: An add/remove change of a list-valued setting: ``["add", "debian"]``.
ListChange = tuple[Literal["add", "remove"], str]

_NonNegative = Annotated[float, msgspec.Meta(ge=0)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_TagKind = Literal["cluster", "node", "nodegroup", "instance", "network"]


@register
class OpTestDelay(OpCode, tag="OP_TEST_DELAY"):
    """Sleep ``duration`` seconds on the master and/or on nodes, ``repeat`` extra times."""

    SUMMARY_FIELD: ClassVar[str | None] = "duration"

    duration: _NonNegative
    on_master: bool = True
    on_nodes: list[_NonEmpty] = msgspec.field(default_factory=list)
    on_node_uuids: list[_NonEmpty] | None = None
    repeat: _Count = 0
    interruptible: bool = False
    no_locks: bool = True


@register
class OpClusterQuery(OpCode, tag="OP_CLUSTER_QUERY"):
    """Return the cluster's settings (what ``gnt-cluster info`` shows)."""


@register
class OpClusterRedistConf(OpCode, tag="OP_CLUSTER_REDIST_CONF"):
    """Push the full configuration and the cluster's ancillary files to the nodes."""


@register
class OpClusterRenewCrypto(OpCode, tag="OP_CLUSTER_RENEW_CRYPTO"):
    """Replace the cluster's certificates, keys and secrets on every node
    (``gnt-cluster renew-crypto``), without stopping any instance.

    ``node_certificates`` and ``renew_ssh_keys`` are Ganeti's (corral uses no SSH keys:
    the latter is accepted and does nothing); the rest are corral's, set by the
    command line: a new cluster CA with new certificates for every node
    (``cluster_certificate``), a new RAPI certificate (``rapi_certificate``, or the
    PEM file ``rapi_certificate_file`` names: certificate and key), a new confd key, a
    new cluster domain secret (or the one in ``cluster_domain_secret_file``). Files are
    named by their absolute path on the master node, never carried in the opcode: a
    job's input is shown to anyone who may read jobs (RAPI ``/2/jobs/ID``).
    """

    node_certificates: bool = False
    renew_ssh_keys: bool = False
    ssh_key_type: str | None = None
    ssh_key_bits: int | None = None
    verbose: bool = False
    debug: bool = False
    cluster_certificate: bool = False
    rapi_certificate: bool = False
    rapi_certificate_file: str | None = None
    confd_hmac_key: bool = False
    cluster_domain_secret: bool = False
    cluster_domain_secret_file: str | None = None


@register
class OpClusterSetParams(OpCode, tag="OP_CLUSTER_SET_PARAMS"):
    """Change cluster parameters; ``None`` leaves a setting as it is.

    In parameter dictionaries a value of ``None`` or ``"default"`` resets the
    parameter to its built-in default.
    """

    hvparams: dict[str, dict[str, Any]] | None = None
    beparams: dict[str, Any] | None = None
    nicparams: dict[str, Any] | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    enabled_hypervisors: list[str] | None = None
    enabled_disk_templates: list[str] | None = None
    candidate_pool_size: int | None = None
    max_running_jobs: int | None = None
    max_tracked_jobs: int | None = None
    job_archive_age: int | None = None
    mac_prefix: str | None = None
    master_netdev: str | None = None
    vg_name: str | None = None
    uid_pool: list[tuple[int, int]] | None = None
    add_uids: list[tuple[int, int]] | None = None
    remove_uids: list[tuple[int, int]] | None = None
    default_iallocator: str | None = None
    default_iallocator_params: dict[str, Any] | None = None
    compression_tools: list[str] | None = None
    file_storage_dir: str | None = None
    shared_file_storage_dir: str | None = None
    os_search_path: list[str] | None = None
    iallocator_search_path: list[str] | None = None
    """corral's: directories searched for iallocator plugins (empty: the default)."""
    iallocator_timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """corral's: seconds an allocator may take."""
    ipolicy: dict[str, Any] | None = None
    """Changes of the instance policy (Ganeti's keys: ``minmax``, ``std``,
    ``disk-templates``, ``vcpu-ratio``, ``spindle-ratio``); ``std`` is merged, the
    others replaced."""
    extstorage_search_path: list[str] | None = None
    """Where nodes look for ExtStorage providers (corral's; Ganeti's is built in)."""
    os_hvp: dict[str, dict[str, dict[str, Any] | None]] | None = None
    """Per-OS hypervisor parameters: ``{os: {hypervisor: {name: value}}}``; a hypervisor
    given ``None`` drops the OS's overrides for it, a value ``None``/``"default"`` one
    override."""
    osparams: dict[str, dict[str, Any]] | None = None
    """Cluster-level OS parameters per ``os`` or ``os+variant``; a value of ``None`` or
    ``"default"`` removes that parameter (an OS left without any is dropped)."""
    hidden_os: list[ListChange] | None = None
    blacklisted_os: list[ListChange] | None = None


@register
class OpTagsGet(OpCode, tag="OP_TAGS_GET"):
    """Return the tags of one object."""

    SUMMARY_FIELD: ClassVar[str | None] = "name"

    kind: _TagKind
    name: str | None = None
    use_locking: bool = False


@register
class OpTagsSearch(OpCode, tag="OP_TAGS_SEARCH"):
    """Return ``[path, tag]`` for every tag matching the regular expression ``pattern``."""

    SUMMARY_FIELD: ClassVar[str | None] = "pattern"

    pattern: _NonEmpty


@register
class OpTagsSet(OpCode, tag="OP_TAGS_SET"):
    """Add tags to one object."""

    kind: _TagKind
    tags: list[str]
    name: str | None = None


@register
class OpTagsDel(OpCode, tag="OP_TAGS_DEL"):
    """Remove tags from one object."""

    kind: _TagKind
    tags: list[str]
    name: str | None = None


@register
class OpQuery(OpCode, tag="OP_QUERY"):
    """Query a resource: selected fields of the items a filter accepts."""

    SUMMARY_FIELD: ClassVar[str | None] = "what"

    what: _NonEmpty
    fields: list[_NonEmpty]
    qfilter: list[Any] | None = None
    use_locking: bool = False


@register
class OpQueryFields(OpCode, tag="OP_QUERY_FIELDS"):
    """Describe a resource's fields (all of them when ``fields`` is None)."""

    SUMMARY_FIELD: ClassVar[str | None] = "what"

    what: _NonEmpty
    fields: list[_NonEmpty] | None = None
