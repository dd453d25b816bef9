"""``OP_BACKUP_PREPARE``: the key of an inter-cluster move is made on the instance's
primary node and answered signed with the cluster domain secret (real noded
procedures in this process)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509 as cx509

from corral.errors import OpPrereqError
from corral.noded import move_keys
from corral.paths import Paths
from corral.x509 import moves
from tests.unit.instance_helpers import Cluster, open_cluster
from tests.unit.lu_helpers import JobCtx

SECRET = "5eb1c0ffee5eb1c0ffee5eb1c0ffee5eb1c0ffee"


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    for cluster in open_cluster(tmp_path):
        cluster.ctx.paths = Paths(tmp_path / "master")
        cluster.ctx.paths.ensure_dirs()
        yield cluster


def _set_secret(cl: Cluster, text: str = SECRET + "\n") -> None:
    assert cl.ctx.paths is not None
    cl.ctx.paths.cluster_domain_secret.write_text(text)


def test_remote_prepare_makes_a_key_on_the_primary_node_and_signs_it(cl: Cluster) -> None:
    cl.create(pnode="node2")
    _set_secret(cl)
    job = JobCtx()
    answer = cl.run("OP_BACKUP_PREPARE", job, instance_name="web1", mode="remote")
    assert set(answer) == {"handshake", "x509_key_name", "x509_ca"}
    assert "Generating X509 certificate on node2" in job.log
    name = moves.verify_key_name(answer["x509_key_name"], SECRET)
    verified = moves.verify_signed_certificate(answer["x509_ca"], SECRET)
    assert verified.salt == answer["x509_key_name"][2]  # one salt for both, as Ganeti
    moves.check_handshake(answer["handshake"], SECRET)
    # The private key stays on the primary node, beside the certificate it answered.
    node2 = cl.rpc.nodes.paths("node2")
    assert [k["name"] for k in move_keys.list_keys(node2)] == [name]
    assert (node2.crypto_dir / name / "cert").read_text() == verified.pem
    assert (node2.crypto_dir / name / "key").stat().st_mode & 0o777 == 0o400
    assert move_keys.list_keys(cl.rpc.nodes.paths("node1")) == []
    cert = cx509.load_pem_x509_certificate(verified.pem.encode())
    assert cert.subject.rfc4514_string() == "CN=node2"
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert life == dt.timedelta(seconds=moves.RIE_CERT_VALIDITY)


def test_another_cluster_with_another_secret_refuses_the_answer(cl: Cluster) -> None:
    cl.create()
    _set_secret(cl)
    answer = cl.run("OP_BACKUP_PREPARE", instance_name="web1", mode="remote")
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(answer["x509_ca"], "another-" + SECRET)
    assert err.value.check == "signature"


def test_local_prepare_needs_nothing(cl: Cluster) -> None:
    cl.create()
    assert cl.run("OP_BACKUP_PREPARE", instance_name="web1", mode="local") is None
    assert cl.rpc.procedures("node1")[-1] != "x509_cert_create"


def test_remote_prepare_without_a_domain_secret_says_how_to_make_one(cl: Cluster) -> None:
    cl.create()
    with pytest.raises(OpPrereqError, match="renew-crypto --new-cluster-domain-secret"):
        cl.run("OP_BACKUP_PREPARE", instance_name="web1", mode="remote")
    assert move_keys.list_keys(cl.rpc.nodes.paths("node1")) == []


def test_key_names_that_leave_the_key_directory_are_refused(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    with pytest.raises(Exception, match="invalid X509 key name"):
        move_keys.key_dir(paths, "../../etc")


def test_the_watcher_cleaner_removes_expired_move_keys_only(cl: Cluster) -> None:
    from corral.watcher import cleanup

    cl.create()
    _set_secret(cl)
    answer = cl.run("OP_BACKUP_PREPARE", instance_name="web1", mode="remote")
    name = answer["x509_key_name"][0]
    node1 = cl.rpc.nodes.paths("node1")
    not_after = move_keys.list_keys(node1)[0]["not_after"]
    assert cleanup.run_cleaners(node1) == []  # still valid: kept
    assert move_keys.clean_expired(node1, now=lambda: not_after - 1) == []
    removed = move_keys.clean_expired(node1, now=lambda: not_after + 1)
    assert len(removed) == 1 and name in removed[0] and "expired" in removed[0]
    assert not (node1.crypto_dir / name).exists()
    # a directory that never got its certificate goes once it is a day old
    stray = node1.crypto_dir / moves.new_key_name()
    stray.mkdir()
    assert move_keys.clean_expired(node1) == []
    later = stray.stat().st_mtime + moves.RIE_CERT_VALIDITY + 1
    assert "without a readable certificate" in move_keys.clean_expired(node1, lambda: later)[0]
    assert not stray.exists()


def test_removing_a_key_through_the_node_procedure(cl: Cluster) -> None:
    cl.create()
    _set_secret(cl)
    name = cl.run("OP_BACKUP_PREPARE", instance_name="web1", mode="remote")["x509_key_name"][0]
    node = cl.store.get("node", "node1")
    results = asyncio.run(cl.rpc.call([node], "x509_cert_remove", {"name": name}))
    assert results["node1"].get("removing") is True
    assert move_keys.list_keys(cl.rpc.nodes.paths("node1")) == []
    results = asyncio.run(cl.rpc.call([node], "x509_cert_remove", {"name": "../x"}))
    assert "invalid X509 key name" in str(results["node1"].error)
