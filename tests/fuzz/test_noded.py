"""Fuzzing the node daemon's RPC with a valid client certificate (issue 18, deliverable 4).

The caller holds the master's client certificate, so every request gets past TLS and
the access check to what a certificate cannot vouch for: the body. Hypothesis sends,
to a node that is not the master:

* every procedure with bodies that are no JSON, JSON that is no object, objects with
  unknown keys, and objects with the procedure's own argument names and random values
  (wrong types, numbers past 64 bits, deep nesting, strings with NUL and non-ASCII);
* unknown procedures and RPC versions;
* a body past the node's size limit (the fuzz testbed's node daemons run with a
  2 MiB limit, ``CORRAL_RPC_MAX_BODY``, so that this costs little).

Procedures that would take the testbed apart when the random values happen to be
valid (leaving the cluster, a master role change, new certificates, uploaded files,
replica updates, restarting daemons, running commands) get only bodies that cannot
be valid: with an argument no procedure has, or no object at all.

Every answer must be noded's error shape ``{"ok": false, "error": {"code",
"message"}}`` with an error status (the error class's: 400 for a bad argument, 500
for a hypervisor's or block device's refusal, 502 for an unknown RPC version), or
for a valid call ``{"ok": true}``; never an internal error. Afterwards the node still
answers ``version``.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from corral.paths import Paths
from corral.rpc.args import ARGS
from tests.conftest import TestbedHandle
from tests.fuzz.conftest import RPC_MAX_BODY, examples

pytestmark = pytest.mark.integration

#: Procedures sent only bodies that cannot be valid (see the module's docstring).
GUARDED = frozenset({
    "node_leave", "master_takeover", "master_demote", "renew_crypto", "restart_daemons",
    "upload_files", "write_file_part", "config_replicate", "jobs_replicate", "run_command",
    "set_watcher_pause", "test_delay", "replica_dump", "blockdev_copy_from",
    "migration_send", "migration_accept",
})
UNKNOWN_ARG = "fuzz_no_such_argument"

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63, max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=16),
    st.sampled_from(["", "\x00", "../../etc/passwd", "/", "node1.testbed", "fake", "kvm",
                     "inst1", "é\u2028"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=10)


class NodeRpc:
    """HTTPS calls to one node daemon with the master's client certificate."""

    def __init__(self, testbed: TestbedHandle) -> None:
        master = Paths(Path(testbed.state["nodes"][0]["root"]))
        target = next(n for n in testbed.state["nodes"] if not n["master"])
        self.base = f"https://{target['ip']}:{testbed.state['ports']['noded']}"
        self.session = requests.Session()
        self.session.verify = str(master.ca_cert)
        self.session.cert = str(master.master_client_cert)
        # The node's certificate names the node, not its loopback address.
        self.session.mount(self.base, _NoHostnameCheck())

    def post(self, path: str, body: bytes, content_type: str = "application/json"
             ) -> requests.Response:
        """POST ``body`` as it is."""
        # verify given per request: the environment's CA bundle would override the
        # session's.
        return self.session.post(self.base + path, data=body, timeout=60,
                                 verify=self.session.verify,
                                 headers={"Content-Type": content_type})

    def assert_serves(self) -> None:
        """The node answers ``version``."""
        response = self.post("/rpc/1/version", b"{}")
        assert response.status_code == 200, response.text
        assert response.json()["ok"] is True, response.text


class _NoHostnameCheck(requests.adapters.HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["assert_hostname"] = False
        super().init_poolmanager(*args, **kwargs)


def check_answer(response: requests.Response) -> None:
    """noded's answer shape; a failure is a clear client error, not an internal one."""
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("ok"), bool), response.text[:300]
    if body["ok"]:
        assert response.status_code == 200, response.text[:300]
        return
    error = body.get("error")
    assert isinstance(error, dict), response.text[:300]
    assert isinstance(error.get("code"), str) and isinstance(error.get("message"), str)
    assert error["code"] != "internal-error", error["message"]
    # The status is the error class's (a hypervisor or block-device error is 500, a
    # protocol error 502): the master reads the code, which must say what was wrong.
    assert response.status_code >= 400, (response.status_code, response.text[:300])


@pytest.fixture
def node(fuzz_testbed: TestbedHandle) -> Iterator[NodeRpc]:
    """A non-master node of the fuzz testbed, called as the master."""
    rpc = NodeRpc(fuzz_testbed)
    yield rpc
    rpc.session.close()


def _encode(value: Any) -> bytes:
    import json

    return json.dumps(value).encode("utf-8", "surrogatepass")


def _bodies(procedure: str) -> st.SearchStrategy[bytes]:
    names = list(ARGS[procedure].__struct_fields__) if procedure in ARGS else []
    invalid = st.one_of(
        st.binary(max_size=100),
        json_values.filter(lambda v: not isinstance(v, dict)).map(_encode),
        st.dictionaries(st.sampled_from(names) if names else st.text(max_size=5),
                        json_values, max_size=4).map(
            lambda d: _encode({**d, UNKNOWN_ARG: 1})),
    )
    if procedure in GUARDED:
        return invalid
    shaped = st.fixed_dictionaries({}, optional=dict.fromkeys(names, json_values)).map(_encode)
    return st.one_of(invalid, shaped, shaped)


@pytest.mark.parametrize("procedure", sorted(ARGS))
def test_procedure_bodies(node: NodeRpc, procedure: str) -> None:
    """Malformed bodies for ``procedure`` get a clear 4xx error; the node serves on."""
    @examples(6)
    @given(body=_bodies(procedure))
    def fuzz(body: bytes) -> None:
        check_answer(node.post(f"/rpc/1/{procedure}", body))

    fuzz()
    node.assert_serves()


def test_unknown_procedures_and_versions(node: NodeRpc) -> None:
    """Unknown procedures and RPC versions are refused with a clear error."""
    @examples(15)
    @given(version=st.sampled_from(["1", "0", "2", "x", "01"]),
           procedure=st.sampled_from(sorted(ARGS)) | st.from_regex(r"[a-z_]{1,20}", fullmatch=True),
           body=st.sampled_from([b"{}", b"[]", b"null"]))
    def fuzz(version: str, procedure: str, body: bytes) -> None:
        if version == "1" and procedure in ARGS:
            procedure += "_not_really"
        check_answer(node.post(f"/rpc/{version}/{procedure}", body))

    fuzz()
    node.assert_serves()


def test_oversized_body(node: NodeRpc) -> None:
    """A body past the node's limit is refused with a clear error naming the limit."""
    response = node.post("/rpc/1/version", b"[" + b" " * (RPC_MAX_BODY + 10) + b"]")
    check_answer(response)
    assert str(RPC_MAX_BODY) in response.json()["error"]["message"], response.text
    node.assert_serves()


# -- what the node reads from disk: OS definitions and ExtStorage providers ---------------

#: Bytes as definition files hold them when broken: lines, NUL, invalid UTF-8.
file_garbage = st.one_of(
    st.binary(max_size=120),
    st.lists(st.text(max_size=20), max_size=5).map(
        lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
    st.sampled_from([b"20\n", b"15\n20\n", b"\x00\n", b"x y\nx z\n", b"\xff\xfe"]),
)
OS_FILES = ("ganeti_api_version", "variants.list", "parameters.list", "os_version")
EXT_FILES = ("parameters.list",)


def test_garbage_definitions_on_the_node(node: NodeRpc, fuzz_testbed: TestbedHandle) -> None:
    """An OS definition and an ExtStorage provider whose files hold garbage are listed
    by the node (valid, or invalid with a message), and the master's OS query still
    answers; the node serves on."""
    from tests.fuzz.luxi_wire import EOM, LuxiConnection

    target = next(n for n in fuzz_testbed.state["nodes"] if not n["master"])
    root = Paths(Path(target["root"]))
    os_dir = root.node_path("/srv/corral/os") / "fuzz-os"
    ext_dir = root.node_path("/srv/corral/extstorage") / "fuzz-ext"
    bundled_os = root.node_path("/srv/corral/os") / "corral-ext4"
    bundled_ext = root.node_path("/srv/corral/extstorage") / "corral-file"

    shutil.copytree(bundled_os, os_dir)
    shutil.copytree(bundled_ext, ext_dir)
    try:
        @examples(6)
        @given(os_files=st.fixed_dictionaries({}, optional=dict.fromkeys(OS_FILES,
                                                                          file_garbage)),
               ext_files=st.fixed_dictionaries({}, optional=dict.fromkeys(EXT_FILES,
                                                                           file_garbage)))
        def fuzz(os_files: dict[str, bytes], ext_files: dict[str, bytes]) -> None:
            for name, data in os_files.items():
                (os_dir / name).write_bytes(data)
            for name, data in ext_files.items():
                (ext_dir / name).write_bytes(data)
            for procedure, item in (("os_diagnose", "fuzz-os"),
                                    ("extstorage_diagnose", "fuzz-ext")):
                response = node.post(f"/rpc/1/{procedure}", b"{}")
                check_answer(response)
                found = [entry for entry in response.json()["result"]
                         if entry["name"] == item]
                assert len(found) == 1, response.text[:300]
                assert found[0]["valid"] or found[0]["message"], found[0]
            with LuxiConnection(fuzz_testbed.paths.master_socket) as luxi:
                answer = luxi.call(b'{"method":"Query","args":["os",["name","valid"],null]}'
                                   + EOM)
            assert answer is not None and answer["success"], answer

        fuzz()
    finally:
        shutil.rmtree(os_dir)
        shutil.rmtree(ext_dir)
    node.assert_serves()


# -- a node waiting to join: the one request anyone may send ------------------------------


@pytest.fixture
def waiting_node(tmp_path: Path) -> Iterator[str]:
    """A node daemon of its own that belongs to no cluster (it serves only ``/join``,
    to anyone: there is no client certificate yet); its URL."""
    from corral import daemons
    from corral.serializer import dumps
    from corral.utils.files import write_public
    from tests.conftest import free_port

    paths = Paths(tmp_path / "waiting")
    paths.ensure_dirs()
    port = free_port("127.0.0.1")
    write_public(paths.noded_settings, dumps({"bind": "127.0.0.1", "port": port}) + b"\n")
    try:
        daemons.start(paths, {"noded"})
        daemons.wait_for_token(paths)
        yield f"https://127.0.0.1:{port}"
    finally:
        daemons.stop(paths)
    log = paths.log_file("noded").read_text(errors="replace")
    assert "(incident " not in log, log[-3000:]


def test_join_requests(waiting_node: str) -> None:
    """Random join requests (no proof, forged proofs, malformed bundles) are refused
    with a join error; the node still waits for its real join afterwards."""
    session = requests.Session()

    @examples(30)
    @given(body=st.one_of(
        st.binary(max_size=80),
        json_values.map(_encode),
        st.fixed_dictionaries({}, optional={
            "proof": st.one_of(json_values, st.text(alphabet="0123456789abcdef.",
                                                    max_size=80)),
            "bundle": st.one_of(json_values, st.fixed_dictionaries({}, optional=dict.fromkeys(
                ("ca_cert", "node_cert", "node_key", "confd_key", "membership",
                 "rapi_users"), json_values)))}).map(_encode)))
    def fuzz(body: bytes) -> None:
        response = session.post(waiting_node + "/join", data=body, verify=False, timeout=60,
                                headers={"Content-Type": "application/json"})
        check_answer(response)
        assert not response.json()["ok"], response.text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the waiting node's certificate is throwaway
        fuzz()
        response = session.get(waiting_node + "/rpc/1/version", verify=False, timeout=60)
    check_answer(response)
    assert response.json()["error"]["code"] == "join-error", response.text
