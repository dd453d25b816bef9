"""Every file and directory a corral process uses, derived from one root.

On a real node the root is ``/`` and the places are the FHS ones
(``/var/lib/corral``, ``/run/corral``, ``/var/log/corral``). Setting ``CORRAL_ROOT``
moves all of them under another directory, which is how the testbed runs a whole
cluster unprivileged inside a temporary directory: no code builds a path by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT_ENV", "Paths"]

#: Environment variable that relocates every path.
ROOT_ENV = "CORRAL_ROOT"


@dataclass(frozen=True)
class Paths:
    """The places of one corral node, all below ``root``."""

    root: Path

    @classmethod
    def from_env(cls) -> Paths:
        """Paths for this process: ``$CORRAL_ROOT`` if set, else ``/``."""
        return cls(Path(os.environ.get(ROOT_ENV) or "/"))

    def _under(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    # -- directories ---------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        """Persistent state: configuration store, keys, certificates."""
        return self._under("/var/lib/corral")

    @property
    def run_dir(self) -> Path:
        """Sockets and pid files; may be wiped at boot."""
        return self._under("/run/corral")

    @property
    def log_dir(self) -> Path:
        """One log file per daemon."""
        return self._under("/var/log/corral")

    # -- cluster-wide places (configuration values; see node_path) ---------------
    #: Default for ``file`` disks (Ganeti: /srv/ganeti/file-storage).
    DEFAULT_FILE_STORAGE_DIR = "/srv/corral/file-storage"
    #: Default for ``sharedfile`` disks: a directory every node mounts from one storage.
    DEFAULT_SHARED_FILE_STORAGE_DIR = "/srv/corral/shared-file-storage"
    #: Where OS definitions are looked up; Ganeti's places first so theirs work.
    DEFAULT_OS_SEARCH_PATH = (
        "/srv/ganeti/os",
        "/usr/local/lib/ganeti/os",
        "/usr/lib/ganeti/os",
        "/usr/share/ganeti/os",
        "/srv/corral/os",
    )
    #: Where iallocator plugins are looked up by name (``-I NAME``) when the cluster
    #: sets no search path of its own: Ganeti's places, so that its ``hail`` works,
    #: then corral's.
    DEFAULT_IALLOCATOR_SEARCH_PATH = (
        "/usr/local/lib/ganeti/iallocators",
        "/usr/lib/ganeti/iallocators",
        "/srv/corral/iallocators",
    )
    #: Where ExtStorage providers are looked up: Ganeti's places (its built-in
    #: ``ES_SEARCH_PATH``) first so that its providers work, then corral's own.
    DEFAULT_EXTSTORAGE_SEARCH_PATH = (
        "/srv/ganeti/extstorage",
        "/usr/local/lib/ganeti/extstorage",
        "/usr/lib/ganeti/extstorage",
        "/usr/share/ganeti/extstorage",
        "/srv/corral/extstorage",
    )

    # -- files ---------------------------------------------------------------
    @property
    def config_db(self) -> Path:
        """The SQLite configuration store."""
        return self.data_dir / "config.db"

    @property
    def jobs_db(self) -> Path:
        """The job queue's SQLite file (jobs, archive and the drain flag)."""
        return self.data_dir / "jobs.db"

    @property
    def jobs_replica(self) -> Path:
        """A master candidate's copy of the job queue (the schema of :attr:`jobs_db`)."""
        return self.data_dir / "jobs-replica.db"

    @property
    def ca_cert(self) -> Path:
        """The cluster CA certificate (PEM), trusted by every daemon."""
        return self.data_dir / "ca.pem"

    @property
    def ca_key(self) -> Path:
        """The cluster CA private key (PEM, mode 0400); only on the master."""
        return self.data_dir / "ca-key.pem"

    @property
    def node_cert(self) -> Path:
        """This node's certificate signed by the cluster CA (PEM): noded's server
        certificate and the client certificate of calls to other nodes."""
        return self.data_dir / "server.pem"

    @property
    def node_key(self) -> Path:
        """This node's private key (PEM, mode 0400)."""
        return self.data_dir / "server-key.pem"

    @property
    def master_client_cert(self) -> Path:
        """The master's client certificate and its key in one PEM file (mode 0400), on
        the master and the master candidates: node daemons run a procedure that
        changes the node only for a caller presenting it."""
        return self.data_dir / "master-client.pem"

    @property
    def rapi_cert(self) -> Path:
        """corral-rapi's self-signed certificate (PEM); RAPI clients that verify the
        server trust it. The cluster CA did not sign it, so no node daemon accepts it."""
        return self.data_dir / "rapi.pem"

    @property
    def rapi_key(self) -> Path:
        """The key of :attr:`rapi_cert` (PEM, mode 0400)."""
        return self.data_dir / "rapi-key.pem"

    @property
    def config_replica(self) -> Path:
        """A master candidate's copy of the configuration (same SQLite schema as
        :attr:`config_db`), kept up to date by its node daemon from the master's pushes;
        confd answers from it."""
        return self.data_dir / "config-replica.db"

    def local_config(self) -> Path:
        """The configuration this node holds: the store on the master, else the replica
        (which may not exist: a node that is no master candidate has none)."""
        # os.path.exists: a file this process may not look at counts as absent
        return self.config_db if os.path.exists(self.config_db) else self.config_replica

    @property
    def confd_hmac_key(self) -> Path:
        """The shared HMAC key confd signs its packets with (mode 0400)."""
        return self.data_dir / "confd.key"

    @property
    def rapi_users(self) -> Path:
        """RAPI users file: ``user password [read,write]`` per line."""
        return self.data_dir / "rapi" / "users"

    @property
    def rapi_admin_password(self) -> Path:
        """The password ``gnt-cluster init`` chose for the RAPI user ``admin`` (mode 0400)."""
        return self.data_dir / "rapi" / "admin-password"

    @property
    def user_file_list(self) -> Path:
        """Files the administrator wants on every node: one absolute path per line
        (``#`` starts a comment); ``gnt-cluster redistribute-conf`` copies them from the
        master, and a node writes only the ones its own copy of this list names."""
        return self.data_dir / "user-files"

    @property
    def file_storage_paths(self) -> Path:
        """The directories this node lets file disks live in: one cluster-wide absolute
        path per line (``#`` starts a comment). A node-side list that no RPC writes;
        without the file, the default file and shared-file storage directories."""
        return self.data_dir / "file-storage-paths"

    @property
    def uid_pool(self) -> Path:
        """The cluster's user-id pool as every node keeps it (design 2.1: distributed
        to all nodes, so a node picks uids without asking the master): one uid or
        ``low-high`` range per line, Ganeti's ``ssconf_uid_pool``; empty when the
        pool is."""
        return self.data_dir / "ssconf_uid_pool"

    @property
    def uid_pool_lock_dir(self) -> Path:
        """One lock file per user-id of the pool that an instance process holds or is
        being started with (:func:`corral.uidpool.request_unused_uid`); a file whose
        process stopped is removed, so the uid is free again. Under the run dir: after
        a reboot no instance process runs and every uid is free."""
        return self.run_dir / "uid-pool"

    @property
    def master_socket(self) -> Path:
        """The master daemon's luxi Unix socket."""
        return self.run_dir / "master.sock"

    @property
    def noded_settings(self) -> Path:
        """Where this node's noded listens (JSON ``{"bind", "port"}``); optional."""
        return self.data_dir / "noded.json"

    @property
    def join_token(self) -> Path:
        """The one-time token a node daemon without a cluster prints (mode 0400)."""
        return self.data_dir / "join-token"

    @property
    def node_membership(self) -> Path:
        """What the master told this node when it joined (cluster, node name, master)."""
        return self.data_dir / "membership.json"

    @property
    def instance_reason_dir(self) -> Path:
        """The reason trail of each instance's last status change, one file per
        instance named after it (Ganeti's place and JSON format; seed 001)."""
        return self.run_dir / "instance-reason"

    @property
    def instance_status_dir(self) -> Path:
        """What this node knows of each instance it is primary for: UUID, wanted
        state and when that last changed (``<name>.json``; read by corral-mond)."""
        return self.run_dir / "instance-status"

    @property
    def watcher_pause_file(self) -> Path:
        """Until when the watcher is paused (seconds since the epoch, Ganeti's
        ``watcher.pause``); absent when it is not."""
        return self.data_dir / "watcher.pause"

    @property
    def watcher_dir(self) -> Path:
        """The watcher's own directory: with privilege separation it runs as a user of
        its own, which may write here and nowhere else in the data directory."""
        return self.data_dir / "watcher"

    @property
    def watcher_state_file(self) -> Path:
        """The watcher's memory between runs: restart attempts, nodes' boot ids."""
        return self.watcher_dir / "state.json"

    @property
    def daemon_users(self) -> Path:
        """The user and group prefixes this node's daemons run under
        (:mod:`corral.daemon_users`); absent: every daemon runs as its starter."""
        return self.data_dir / "daemon-users.json"

    @property
    def watcher_lock_file(self) -> Path:
        """Held (``flock``) by a running watcher, so that two never run at once."""
        return self.run_dir / "watcher.lock"

    @property
    def crypto_dir(self) -> Path:
        """The keys and certificates of inter-cluster moves, one directory each."""
        return self.run_dir / "crypto"

    @property
    def cluster_domain_secret(self) -> Path:
        """The secret shared by clusters that move instances between them (Ganeti's
        ``cluster-domain-secret``)."""
        return self.data_dir / "cluster-domain-secret"

    @property
    def node_reports_dir(self) -> Path:
        """What the node daemon (root) gathers for the monitoring daemon, which may
        not gather it itself (LVM's reports)."""
        return self.run_dir / "node-reports"

    @property
    def lvm_report(self) -> Path:
        """The rows of LVM's ``lvs`` and ``vgs`` reports and when they were taken
        (:mod:`corral.storage.lvm_report`)."""
        return self.node_reports_dir / "lvm.json"

    @property
    def export_dir(self) -> Path:
        """Instance exports, one directory per instance (Ganeti's
        ``/var/lib/ganeti/export``)."""
        return self.data_dir / "export"

    @property
    def impexp_dir(self) -> Path:
        """Disk transfers of this node: one status file each, and their logs."""
        return self.run_dir / "impexp"

    @property
    def hypervisor_state_dir(self) -> Path:
        """Per-hypervisor runtime state (the fake hypervisor's instance files)."""
        return self.run_dir / "hypervisor"

    @property
    def kvm_ifup_custom(self) -> Path:
        """The administrator's hook that sets up a kvm guest's tap devices, run (when
        executable) instead of corral's own bridged/routed set-up, as Ganeti's
        ``kvm-ifup-custom``."""
        return self.data_dir / "kvm-ifup-custom"

    @property
    def os_log_dir(self) -> Path:
        """Output of OS definition scripts, one file per script run."""
        return self.log_dir / "os"

    @property
    def extstorage_log_dir(self) -> Path:
        """Output of ExtStorage provider scripts, one file per script run (Ganeti's
        ``/var/log/ganeti/extstorage``)."""
        return self.log_dir / "extstorage"

    def node_path(self, path: str) -> Path:
        """A cluster-wide absolute path (file storage dir, OS search path entry, a
        disk's file) as this node sees it: below ``root``, so that every testbed
        node has its own places while the configuration holds one path for all."""
        return self._under(path)

    def pid_file(self, daemon: str) -> Path:
        """Pid file of ``daemon`` (for example ``masterd``)."""
        return self.run_dir / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        """Log file of ``daemon``."""
        return self.log_dir / f"{daemon}.log"

    def ensure_dirs(self) -> None:
        """Create the data, run and log directories (data with mode 0700) and the
        user-id pool's lock directory."""
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.uid_pool_lock_dir.mkdir(exist_ok=True, mode=0o755)
