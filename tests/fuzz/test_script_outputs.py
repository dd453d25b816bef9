"""Fuzzing what outside programs give the daemons (issue 18, deliverable 4).

Node daemons read OS definitions (their files and their scripts' output) and run
ExtStorage providers' scripts, whose ``attach`` output names the disk; the master
reads iallocator plugins' answers. Here, with no daemon, Hypothesis gives each of
these readers garbage through the same code the daemons run, with real files and real
scripts where the daemon would have them:

* an OS definition's ``ganeti_api_version``, ``variants.list``, ``parameters.list``
  and ``os_version`` of random bytes: reading never raises, and what a valid OS
  declares survives the wire form noded answers with;
* an OS script that writes random bytes and fails: the error quotes its output as
  text;
* an ExtStorage provider whose ``attach`` prints random bytes: the disk is either
  usable or refused with a block-device error, never an unexpected exception;
* an iallocator plugin that prints random bytes or random JSON for each request type
  (Ganeti's recorded requests): a checked answer or an ``OpExecError``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral import serializer
from corral.errors import BlockDeviceError, OpExecError, OsScriptError
from corral.iallocator import PluginRunner, parse_answer
from corral.objects.specs import DiskSpec
from corral.osapi import read_os, run_script
from corral.osapi.definition import OsDefinition
from corral.paths import Paths
from corral.storage import get_block_device
from tests.fuzz.conftest import examples

DATA = Path(__file__).resolve().parents[1] / "data"
DUMPENV_OS = DATA / "os" / "dumpenv"
ENVDUMP_PROVIDER = DATA / "extstorage" / "corral-envdump"
MODES = ("allocate", "relocate", "change-group", "node-evacuate", "multi-allocate")
OS_FILES = ("ganeti_api_version", "variants.list", "parameters.list", "os_version")

#: Bytes as scripts write them: text, lines, control characters, invalid UTF-8.
garbage = st.one_of(
    st.binary(max_size=300),
    st.lists(st.text(max_size=30), max_size=6).map(lambda lines: "\n".join(lines).encode(
        "utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\x00", b"/dev/null\x00x", b"20\n\x00", b"\xff\xfe", b"\n" * 50,
                     b"15\n20\n10\n", b"a" * 5000, b"#!\n", b"/\n", b"kvm:\n:\nkvm:x"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=15)


def _os_copy(root: Path) -> Path:
    path = root / "fuzzos"
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(DUMPENV_OS, path)
    return path


def test_os_definition_files(tmp_path: Path) -> None:
    """Garbage in an OS definition's files makes it invalid with a message, or valid
    with what it declares; never an exception, and the wire form round-trips."""
    @examples(60)
    @given(contents=st.fixed_dictionaries({}, optional=dict.fromkeys(OS_FILES, garbage)))
    def fuzz(contents: dict[str, bytes]) -> None:
        path = _os_copy(tmp_path)
        for name, data in contents.items():
            (path / name).write_bytes(data)
        os_def = read_os(path)
        if not os_def.valid:
            assert os_def.message, os_def
            return
        wire = serializer.loads(serializer.dumps(os_def.to_dict()))
        assert OsDefinition.from_dict(wire).to_dict() == os_def.to_dict()

    fuzz()


def test_os_script_output(tmp_path: Path) -> None:
    """A failing OS script's output, whatever its bytes, is quoted as text."""
    path = _os_copy(tmp_path)
    output = tmp_path / "output"
    (path / "create").write_text(f"#!/bin/sh\ncat {output}\nexit 3\n")
    os_def = read_os(path)
    assert os_def.valid, os_def.message

    @examples(12)
    @given(data=garbage)
    def fuzz(data: bytes) -> None:
        output.write_bytes(data)
        with pytest.raises(OsScriptError) as err:
            asyncio.run(run_script(os_def, "create", {"PATH": "/usr/bin:/bin"},
                                   tmp_path / "os.log"))
        assert "failed (exit 3)" in err.value.message
        err.value.message.encode()  # text that any client can carry

    fuzz()


def _ext_node(root: Path) -> tuple[Paths, Path]:
    node = Paths(root / "node")
    node.ensure_dirs()
    provider = node.node_path("/srv/corral/extstorage") / "corral-envdump"
    shutil.copytree(ENVDUMP_PROVIDER, provider)
    output = root / "attach-output"
    (provider / "attach").write_text(f"#!/bin/sh\ncat {output}\n")
    return node, output


def test_extstorage_attach_output(tmp_path: Path) -> None:
    """Whatever ``attach`` prints, assembling the disk gives a path or URI, or a
    block-device error naming the disk; for both kinds of access."""
    node, output = _ext_node(tmp_path)
    driver = get_block_device("ext", node)
    real_file = tmp_path / "volume"
    real_file.write_bytes(b"\0" * 512)

    @examples(25)
    @given(data=st.one_of(garbage, st.just(f"{real_file}\nkvm:rbd:x\n".encode())),
           access=st.sampled_from(["kernelspace", "userspace"]))
    def fuzz(data: bytes, access: str) -> None:
        output.write_bytes(data)
        disk = DiskSpec(uuid="6c7f56cc-a0d6-44ac-a944-c18e558d6683", index=0,
                        dev_type="ext", size=1, logical_id=["corral-envdump", "v.disk0"],
                        name="d0", params={"provider": "corral-envdump", "access": access},
                        search_path=["/srv/corral/extstorage"])
        try:
            where = asyncio.run(driver.assemble(disk))
        except BlockDeviceError as err:
            assert "disk/0" in err.message or "corral-envdump" in err.message, err.message
            return
        assert isinstance(where, str) and where

    fuzz()


def _recorded(mode: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "iallocator" / f"ganeti-{mode}.json").read_text())
    return data


@pytest.mark.parametrize("mode", MODES)
def test_iallocator_answers(mode: str) -> None:
    """Any answer text, and answers of the right frame with any result, are a checked
    answer or an ``OpExecError``."""
    data = _recorded(mode)
    framed = st.fixed_dictionaries(
        {"success": st.one_of(st.just(True), json_values), "info": json_values,
         "result": json_values}, optional={"nodes": json_values}).map(json.dumps)

    @examples(40)
    @given(text=st.one_of(garbage, json_values.map(json.dumps), framed, framed))
    def fuzz(text: str | bytes) -> None:
        try:
            answer = parse_answer(text, data)
        except OpExecError as err:
            assert err.message
            return
        assert isinstance(answer.info, str)

    fuzz()


def test_iallocator_plugin_output(tmp_path: Path) -> None:
    """A plugin printing garbage, and exiting 0 or not, gives text or an
    ``OpExecError`` quoting it."""
    directory = tmp_path / "srv" / "corral" / "iallocators"
    directory.mkdir(parents=True)
    output = tmp_path / "plugin-output"
    runner = PluginRunner(Paths(tmp_path))

    @examples(10)
    @given(data=garbage, status=st.sampled_from([0, 0, 1, 2]))
    def fuzz(data: bytes, status: int) -> None:
        output.write_bytes(data)
        plugin = directory / "garbage"
        plugin.write_text(f"#!/bin/sh\ncat {output}\nexit {status}\n")
        plugin.chmod(0o755)
        try:
            text = asyncio.run(runner.run("garbage", _recorded("allocate"),
                                          search_path=["/srv/corral/iallocators"],
                                          params={}, timeout=30))
        except OpExecError as err:
            assert status != 0 and f"exit code {status}" in err.message, err.message
            return
        assert status == 0
        with pytest.raises(OpExecError):
            parse_answer(text, _recorded("allocate"))

    fuzz()
