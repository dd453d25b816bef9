"""The QMP conversations of kvm live migration (corral.hypervisor.kvm.migration) against
a scripted monitor; real qemu migrations are in tests/system/test_kvm_migration.py."""

from __future__ import annotations

import asyncio
import contextlib
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from corral.errors import HypervisorError
from corral.hypervisor.kvm import migration
from corral.hypervisor.kvm.migration import MigrationFiles, read_status, resume_source, send
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.paths import Paths


class ScriptedQmp:
    """A monitor that records every command and answers from ``answers`` (a value, or a
    function of the call count)."""

    def __init__(self, answers: dict[str, Any], root: Path | None = None) -> None:
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any] | None]] = []
        #: Where qemu's ``/`` is on the host (a chroot), and what the TLS directory
        #: held (with modes) when the credentials object was made.
        self.root = root
        self.tls_files: dict[str, int] = {}

    async def execute(self, cmd: str, arguments: dict[str, Any] | None = None) -> object:
        self.sent.append((cmd, arguments))
        if cmd == "object-add" and arguments is not None:
            seen = Path(arguments["dir"])
            host = self.root / seen.relative_to("/") if self.root else seen
            self.tls_files = {f.name: stat.S_IMODE(f.stat().st_mode) for f in host.iterdir()}
        answer = self.answers.get(cmd, {})
        if callable(answer):
            return answer(sum(1 for c, _ in self.sent if c == cmd))
        return answer

    def commands(self) -> list[str]:
        return [cmd for cmd, _ in self.sent]

    def args(self, cmd: str) -> list[dict[str, Any] | None]:
        return [a for c, a in self.sent if c == cmd]

    def factory(self) -> Callable[[], contextlib.AbstractAsyncContextManager[ScriptedQmp]]:
        @contextlib.asynccontextmanager
        async def opened() -> AsyncIterator[ScriptedQmp]:
            yield self
        return opened


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    paths.ca_cert.write_text("CA\n")
    paths.node_cert.write_text("CERT\n")
    paths.node_key.write_text("KEY\n")
    return paths


def _spec(**hvparams: Any) -> InstanceSpec:
    return InstanceSpec(name="vm1", uuid="u1", hypervisor="kvm", hvparams={
        "migration_port": 8102, "migration_bandwidth": 32, "migration_downtime": 30,
        **hvparams}, disks=[DiskSpec(uuid="0123456789ab", index=0, dev_type="file",
                                     size=64)])


def _migrating(done_after: int) -> Callable[[int], dict[str, Any]]:
    def answer(count: int) -> dict[str, Any]:
        if count >= done_after:
            return {"status": "completed", "total-time": 420, "downtime": 12,
                    "ram": {"transferred": 90 << 20, "remaining": 0, "total": 128 << 20}}
        return {"status": "active", "expected-downtime": 30,
                "ram": {"transferred": count << 20, "remaining": 100 << 20,
                        "total": 128 << 20}}
    return answer


def test_a_live_migration_sends_with_the_cluster_limits_over_tls(paths: Paths) -> None:
    qmp = ScriptedQmp({"query-migrate": _migrating(3)})
    figures = asyncio.run(send(qmp.factory(), paths, _spec(), target_ip="127.0.1.2",
                               target_name="node2.testbed", live=True, nbd_port=None))
    assert figures["total_time"] == 420 and figures["downtime"] == 12
    assert "stop" not in qmp.commands()
    [tls] = qmp.args("object-add")
    assert tls is not None and tls["qom-type"] == "tls-creds-x509"
    assert tls["endpoint"] == "client" and tls["verify-peer"] is True
    [params] = qmp.args("migrate-set-parameters")
    assert params == {"tls-creds": migration.TLS_OBJECT, "tls-hostname": "node2.testbed",
                      "max-bandwidth": 32 << 20, "downtime-limit": 30}
    assert qmp.args("migrate") == [{"uri": "tcp:127.0.1.2:8102"}]
    assert sorted(qmp.tls_files) == ["ca-cert.pem", "client-cert.pem", "client-key.pem"]
    assert qmp.tls_files["client-key.pem"] == 0o600
    assert not Path(tls["dir"]).exists(), "the key is not left lying around"
    assert read_status(paths, "vm1")["status"] == "completed"


def test_a_non_live_migration_stops_the_cpus_first(paths: Paths) -> None:
    qmp = ScriptedQmp({"query-migrate": _migrating(1)})
    asyncio.run(send(qmp.factory(), paths, _spec(), target_ip="127.0.1.2",
                     target_name="node2", live=False, nbd_port=None))
    assert qmp.commands().index("stop") < qmp.commands().index("migrate")


def test_local_disks_are_mirrored_before_the_memory(paths: Paths) -> None:
    jobs = [{"device": "disk-01234567-mirror", "offset": 32 << 20, "len": 64 << 20,
             "ready": False, "status": "running"},
            {"device": "disk-01234567-mirror", "offset": 64 << 20, "len": 64 << 20,
             "ready": True, "status": "ready"}]
    qmp = ScriptedQmp({"query-migrate": _migrating(1),
                       "query-block-jobs": lambda n: [jobs[min(n, 2) - 1]] if n <= 2 else []})
    asyncio.run(send(qmp.factory(), paths, _spec(), target_ip="127.0.1.2",
                     target_name="node2", live=True, nbd_port=10809))
    [node] = qmp.args("blockdev-add")
    assert node == {"driver": "nbd", "node-name": "disk-01234567-mirror",
                    "export": "disk-01234567-drive",
                    "server": {"type": "inet", "host": "127.0.1.2", "port": "10809"},
                    "tls-creds": migration.TLS_OBJECT, "tls-hostname": "node2"}
    [mirror] = qmp.args("blockdev-mirror")
    assert mirror is not None and mirror["device"] == "disk-01234567-drive"
    assert mirror["sync"] == "full" and mirror["copy-mode"] == "write-blocking"
    order = qmp.commands()
    assert order.index("blockdev-mirror") < order.index("migrate") \
        < order.index("block-job-cancel")


def test_a_failed_migration_names_qemus_reason(paths: Paths) -> None:
    qmp = ScriptedQmp({"query-migrate": {"status": "failed",
                                         "error-desc": "Connection reset by peer"}})
    with pytest.raises(HypervisorError, match=r"vm1's memory to 127\.0\.1\.2 failed: "
                                              "Connection reset by peer"):
        asyncio.run(send(qmp.factory(), paths, _spec(), target_ip="127.0.1.2",
                         target_name="node2", live=True, nbd_port=None))
    assert "migrate_cancel" in qmp.commands()
    assert read_status(paths, "vm1")["status"] == "failed"


def test_a_migration_without_progress_is_cancelled(paths: Paths,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration, "STALL_TIMEOUT", 0.3)
    monkeypatch.setattr(migration, "POLL_INTERVAL", 0.01)
    stuck = {"status": "active", "ram": {"transferred": 5, "remaining": 9, "total": 14}}
    qmp = ScriptedQmp({"query-migrate": stuck})
    with pytest.raises(HypervisorError, match="made no progress for 0 s: cancelled"):
        asyncio.run(send(qmp.factory(), paths, _spec(), target_ip="127.0.1.2",
                         target_name="node2", live=True, nbd_port=None))
    assert "migrate_cancel" in qmp.commands()


def test_a_failed_source_resumes_the_guest(paths: Paths) -> None:
    MigrationFiles.of(paths, "vm1").write_json(MigrationFiles.of(paths, "vm1").progress,
                                               {"status": "failed", "stopped": False})
    qmp = ScriptedQmp({"query-status": {"status": "postmigrate"}, "query-block-jobs": []})
    asyncio.run(resume_source(qmp, paths, "vm1"))
    assert "cont" in qmp.commands()
    assert not MigrationFiles.of(paths, "vm1").root.exists()

    running = ScriptedQmp({"query-status": {"status": "running"}, "query-block-jobs": []})
    asyncio.run(resume_source(running, paths, "vm1"))
    assert "cont" not in running.commands()


def test_a_chrooted_qemu_reads_its_credentials_inside_its_chroot(paths: Paths,
                                                                 tmp_path: Path) -> None:
    chroot = tmp_path / "chroot"
    chroot.mkdir()
    qmp = ScriptedQmp({"query-migrate": _migrating(1)}, root=chroot)
    asyncio.run(send(qmp.factory(), paths, _spec(), target_ip="127.0.1.2",
                     target_name="node2", live=True, nbd_port=None,
                     confined=migration.Confinement(chroot=chroot)))
    [tls] = qmp.args("object-add")
    assert tls is not None and tls["dir"] == f"/{migration.TLS_OBJECT}"
    assert sorted(qmp.tls_files) == ["ca-cert.pem", "client-cert.pem", "client-key.pem"]
    assert list(chroot.iterdir()) == [], "the chroot is left empty"
