"""The files made from the configuration that every node keeps, and sending them.

Design 2.1 has the user-id pool "distributed to all the nodes via the ssconf
mechanism", so that a node reads it without asking the master or a master candidate
(which hold the configuration itself). corral sends it with ``upload_files`` (the
node writes it to :attr:`corral.paths.Paths.uid_pool`, see
:data:`corral.noded.files.CONFIG_FILES`) to every online node, the master included:
when the pool changes (``gnt-cluster modify --uid-pool/--add-uids/--remove-uids``),
to a node that joins or comes back online (an offline node is sent nothing), and on
``gnt-cluster redistribute-conf``. A node that joins also gets the master's own files
every node keeps, as it would from ``redistribute-conf``: the VNC password files the
configuration names, so that kvm guests with VNC can start or arrive there at once (and
again the CA certificate and confd key, which the join already gave it).
A node that misses them is reported in the job log; ``redistribute-conf`` sends them
again.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

from corral import uidpool
from corral.cmdlib.base import MasterContext
from corral.config import ConfigStore
from corral.objects import Cluster, Node

__all__ = ["config_files", "online_nodes", "send_config_files", "vnc_password_files",
           "warn_missing"]


def config_files(cluster: Cluster) -> list[dict[str, Any]]:
    """The files every node keeps, made from ``cluster``, as ``upload_files`` entries."""
    data = uidpool.format_uid_pool_file(cluster.uid_pool).encode()
    return [{"name": "uid_pool", "data": base64.b64encode(data).decode("ascii")}]


def vnc_password_files(store: ConfigStore) -> list[str]:
    """The VNC password files the configuration names (the kvm cluster default and
    every kvm instance's own ``vnc_password_file``), sorted: design 2.1 has
    redistribute-config ship them all to every node."""
    names = {store.cluster.hvparams.get("kvm", {}).get("vnc_password_file") or ""}
    names.update(inst.hvparams.get("vnc_password_file") or "" for inst in store.all("instance")
                 if inst.hypervisor == "kvm")
    return sorted(name for name in names if name)


def online_nodes(master: MasterContext) -> list[Node]:
    """Every online node, the master included."""
    return [n for n in master.store.all("node") if not n.offline]


async def send_config_files(master: MasterContext, nodes: Sequence[Node], *,
                            ancillary: bool = False) -> dict[str, str]:
    """Send :func:`config_files` to ``nodes``; the nodes that failed, with the reason.

    ``ancillary`` (for a node that joins) adds the master's ancillary files that the
    cluster names (not those of the user-files list, which a new node has not agreed
    to), the candidates' ones only to master candidates.
    """
    if not nodes:
        return {}
    files = config_files(master.store.cluster)
    extra = [f for f in master.ancillary_files() if "name" in f] if ancillary else []

    def args(node: Node) -> dict[str, Any]:
        return {"files": files + [
            {k: v for k, v in f.items() if k != "candidates_only"} for f in extra
            if node.master_candidate or not f.get("candidates_only")]}
    results = await master.rpc.call(list(nodes), "upload_files", args)
    return {name: r.error.message for name, r in results.items() if r.error is not None}


def warn_missing(failed: dict[str, str], feedback: Callable[[str], None],
                 what: str = "the user-id pool") -> None:
    """Report in the job log each node that did not get the files (``what``)."""
    for name, message in sorted(failed.items()):
        feedback(f"Warning: node {name} did not get {what} ({message}); "
                 "'gnt-cluster redistribute-conf' sends it again")
