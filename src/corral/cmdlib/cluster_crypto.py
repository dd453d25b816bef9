"""``OP_CLUSTER_RENEW_CRYPTO`` (``gnt-cluster renew-crypto``): new certificates, keys
and secrets on every node, while every instance keeps running.

The cluster certificate is a CA that signed every node's certificate and the master's
client certificate; node daemons accept only peers it signed. Replacing it at once on
every node would cut the cluster in two for as long as some nodes have the new one and
some the old, so it is rolled out in steps (:mod:`corral.noded.crypto`), each done on
every node before the next begins:

1. **stage**: every node trusts the old and the new CA, and keeps its new certificate
   aside. A node that fails here makes the whole renewal stop: the others go back to
   trusting the old CA alone (``abort``) and nothing changed.
2. **activate**: every node serves and calls with its new certificate; the master
   then calls with its new client certificate. Any mix of old and new is trusted.
3. **finish**: every node trusts the new CA only; the master keeps the new CA key.

A node that fails after the first step stops the renewal there: the cluster keeps
working (every node trusts both CAs) and running the command again completes it.
``node_certificates`` alone renews every node's certificate under the same CA (steps 1
and 2). Offline nodes would be locked out, so the certificates are not renewed while
any node is offline.

The confd key and the cluster domain secret go to every node with ``upload_files``
(confd is restarted to load the new key), a new RAPI certificate to the master's node
daemon (RAPI is restarted). The cluster lock is held exclusively, so no job runs
meanwhile; instances are never touched.
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

from corral import x509
from corral.cmdlib.base import LogicalUnit
from corral.errors import OpExecError, OpPrereqError, ParameterError
from corral.objects import Node
from corral.opcodes import OpClusterRenewCrypto
from corral.paths import Paths
from corral.rpc.protocol import RpcResult

__all__ = ["UNITS", "LUClusterRenewCrypto"]

#: Seconds each node has for one step.
STEP_TIMEOUT = 60.0


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


def _failures(results: dict[str, RpcResult]) -> dict[str, str]:
    return {name: result.error.message for name, result in sorted(results.items())
            if result.error is not None}


class LUClusterRenewCrypto(LogicalUnit[OpClusterRenewCrypto]):
    """Renew what the options name (see the module doc)."""

    OP_ID = "OP_CLUSTER_RENEW_CRYPTO"
    REQ_BGL = True

    def check_arguments(self) -> None:
        """Each secret from one source, given files by absolute paths."""
        op = self.op
        if op.rapi_certificate and op.rapi_certificate_file:
            raise ParameterError("Only one of the --new-rapi-certificate and "
                                 "--rapi-certificate options can be specified at the same time.")
        if op.cluster_domain_secret and op.cluster_domain_secret_file:
            raise ParameterError("Only one of the --new-cluster-domain-secret and "
                                 "--cluster-domain-secret options can be specified at the "
                                 "same time.")
        for name in ("rapi_certificate_file", "cluster_domain_secret_file"):
            value = getattr(op, name)
            if value is not None and not value.startswith("/"):
                raise ParameterError(f"{name} must be an absolute path on the master node, "
                                     f"got {value!r}")

    def _paths(self) -> Paths:
        paths = self.master.paths or getattr(self.master.rpc, "paths", None)
        if not isinstance(paths, Paths):
            raise OpExecError("the master's files are not available to renew its secrets")
        return paths

    async def execute(self) -> dict[str, Any]:
        """Renew, step by step; what was renewed."""
        op = self.op
        store = self.master.store
        nodes = [n for n in store.all("node") if not n.offline]
        renewed: list[str] = []
        if op.cluster_certificate or op.node_certificates:
            offline = sorted(n.name for n in store.all("node") if n.offline)
            if offline:
                raise OpPrereqError(
                    f"cannot renew the certificates while node(s) {', '.join(offline)} are "
                    "offline: they would no longer be able to talk to the others; bring "
                    "them online (gnt-node modify -O no) or remove them first")
            await self._certificates(nodes, new_ca=op.cluster_certificate)
            renewed.append("cluster certificate" if op.cluster_certificate
                           else "node certificates")
        files: list[dict[str, Any]] = []
        if op.confd_hmac_key:
            files.append({"name": "confd_key", "data": _b64(x509.generate_hmac_key())})
        if op.cluster_domain_secret or op.cluster_domain_secret_file is not None:
            secret = (await _read(op.cluster_domain_secret_file, "cluster domain secret")
                      if op.cluster_domain_secret_file else x509.generate_hmac_key() + "\n")
            files.append({"name": "cluster_domain_secret", "data": _b64(secret)})
        if files:
            await self._send_files(nodes, files)
            renewed += [f["name"] for f in files]
        if op.confd_hmac_key:
            await self._restart(nodes, "confd")
        if op.rapi_certificate or op.rapi_certificate_file is not None:
            await self._rapi_certificate()
            renewed.append("rapi certificate")
        if op.renew_ssh_keys:
            self.feedback("corral uses no SSH keys between nodes: there are none to renew")
        return {"renewed": renewed}

    # -- the cluster and node certificates ----------------------------------------------

    async def _certificates(self, nodes: list[Node], *, new_ca: bool) -> None:
        paths = self._paths()
        cluster = self.master.store.cluster
        old_bundle, old_key = await asyncio.to_thread(
            lambda: (paths.ca_cert.read_text(), paths.ca_key.read_text()))
        if new_ca:
            # a name of its own, so that no peer mistakes one CA for the other
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
            ca_cert_b, ca_key_b = x509.create_ca(f"corral CA {cluster.name} {stamp}",
                                                 x509.CERT_DAYS)
            ca_cert, ca_key = ca_cert_b.decode(), ca_key_b.decode()
            trust = old_bundle.rstrip("\n") + "\n" + ca_cert
        else:
            ca_cert, ca_key, trust = old_bundle, old_key, old_bundle
        master_cert, master_key = x509.sign_master_client_cert(ca_cert, ca_key, cluster.name,
                                                               x509.CERT_DAYS)
        master_client = (master_key + master_cert).decode()
        master_uuid = cluster.master_node
        signed: dict[str, tuple[str, str]] = {}
        for node in nodes:
            cert, key = x509.sign_node_cert(
                ca_cert, ca_key, node.name,
                [ip for ip in (node.primary_ip, node.secondary_ip) if ip], x509.CERT_DAYS)
            signed[node.name] = (cert.decode(), key.decode())

        def stage(node: Node) -> dict[str, Any]:
            holds_master_cert = node.master_candidate or node.uuid == master_uuid
            return {"phase": "stage", "ca_bundle": trust, "node_cert": signed[node.name][0],
                    "node_key": signed[node.name][1],
                    "master_client": master_client if holds_master_cert else None,
                    "ca_key": ca_key if new_ca and node.uuid == master_uuid else None}

        self.feedback(f"Staging new certificates on {len(nodes)} node(s)")
        failed = _failures(await self.master.rpc.call(nodes, "renew_crypto", stage,
                                                      timeout=STEP_TIMEOUT))
        if failed:
            await self.master.rpc.call(nodes, "renew_crypto",
                                       {"phase": "abort", "ca_bundle": old_bundle},
                                       timeout=STEP_TIMEOUT)
            self._refresh()
            raise OpExecError(
                "the new certificates could not be staged on every node, so nothing was "
                "changed: " + "; ".join(f"{n}: {m}" for n, m in failed.items()))
        self._refresh()  # the master trusts both CAs now (its own node's ca.pem)
        self.feedback("Switching every node to its new certificate")
        failed = _failures(await self.master.rpc.call(nodes, "renew_crypto",
                                                      {"phase": "activate"},
                                                      timeout=STEP_TIMEOUT))
        self._refresh()  # the master calls with its new client certificate
        if failed:
            raise OpExecError(
                "some nodes did not switch to their new certificate ("
                + "; ".join(f"{n}: {m}" for n, m in failed.items()) + "); every node "
                "trusts the old and the new certificates, so the cluster works: run the "
                "command again once they answer to complete the renewal")
        if not new_ca:
            return
        self.feedback("Making every node trust the new cluster certificate only")
        failed = _failures(await self.master.rpc.call(nodes, "renew_crypto",
                                                      {"phase": "finish", "ca_bundle": ca_cert},
                                                      timeout=STEP_TIMEOUT))
        self._refresh()
        if failed:
            raise OpExecError(
                "some nodes still trust the old cluster certificate too ("
                + "; ".join(f"{n}: {m}" for n, m in failed.items()) + "); run the "
                "command again once they answer")

    def _refresh(self) -> None:
        """Make the master's node RPC load its certificates again for its next calls."""
        refresh = getattr(getattr(self.master.rpc, "client", None), "refresh", None)
        if callable(refresh):
            refresh()

    # -- files and daemons --------------------------------------------------------------

    async def _send_files(self, nodes: list[Node], files: list[dict[str, Any]]) -> None:
        failed = _failures(await self.master.rpc.call(nodes, "upload_files", {"files": files},
                                                      timeout=STEP_TIMEOUT))
        if failed:
            raise OpExecError("the new keys did not reach every node ("
                              + "; ".join(f"{n}: {m}" for n, m in failed.items())
                              + "); run the command again once they answer")

    async def _restart(self, nodes: list[Node], daemon: str) -> None:
        failed = _failures(await self.master.rpc.call(nodes, "restart_daemons",
                                                      {"daemons": [daemon]},
                                                      timeout=STEP_TIMEOUT))
        for name, message in failed.items():
            self.feedback(f" - WARNING: node {name}: corral-{daemon} was not restarted: "
                          f"{message}")

    async def _rapi_certificate(self) -> None:
        store = self.master.store
        master = store.get("node", store.cluster.master_node)
        path = self.op.rapi_certificate_file
        if path is None:
            cert_b, key_b = x509.create_self_signed(
                store.cluster.name, [store.cluster.name, master.name],
                [ip for ip in (master.primary_ip, master.secondary_ip) if ip], x509.CERT_DAYS)
            cert, key = cert_b.decode(), key_b.decode()
        else:
            pem = await _read(path, "RAPI certificate")
            if "PRIVATE KEY-----" not in pem or "BEGIN CERTIFICATE-----" not in pem:
                raise ParameterError(f"the RAPI certificate file {path} must hold the "
                                     "certificate and its private key (PEM)")
            x509.load_cert_info(pem)
            cert, key = _split_pem(pem)
        await self._send_files([master], [{"name": "rapi_key", "data": _b64(key)},
                                          {"name": "rapi_cert", "data": _b64(cert)}])
        await self._restart([master], "rapi")


async def _read(path: str, what: str) -> str:
    """A file the command line names on the master node."""
    try:
        return await asyncio.to_thread(Path(path).read_text)
    except OSError as err:
        raise ParameterError(f"cannot read the {what} from {path}: {err}") from None


def _split_pem(pem: str) -> tuple[str, str]:
    """The certificate blocks and the key block of a PEM file holding both."""
    certs: list[str] = []
    key: list[str] = []
    block: list[str] = []
    for line in pem.splitlines():
        block.append(line)
        if line.startswith("-----END "):
            (key if "PRIVATE KEY" in line else certs).append("\n".join(block) + "\n")
            block = []
    return "".join(certs), "".join(key)


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUClusterRenewCrypto,)
