"""``run_command`` and ``write_file_part`` (gnt-cluster command and copyfile) on a node,
without a daemon: exit codes, output, files written whole or not at all."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from corral.errors import ParameterError
from corral.noded.cluster_wide import run_command, write_file_part
from corral.paths import Paths
from corral.rpc.args import RunCommandArgs, WriteFilePartArgs


async def test_command_exit_codes_and_output(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    result = await run_command(paths, RunCommandArgs(command="echo out; echo err >&2; pwd; "
                                                     "exit 7"))
    assert result == {"exit_code": 7, "stdout": f"out\n{tmp_path}\n", "stderr": "err\n"}
    killed = await run_command(paths, RunCommandArgs(command="kill -9 $$"))
    assert killed["exit_code"] == 128 + 9
    slow = await run_command(paths, RunCommandArgs(command="sleep 30", timeout=0.2))
    assert slow["exit_code"] == 128 + 9 and "killed after 0.2 s" in str(slow["stderr"])


def _part(data: bytes, offset: int, last: bool, path: str = "/etc/app.conf") -> WriteFilePartArgs:
    return WriteFilePartArgs(path=path, transfer="t1", offset=offset, last=last, mode=0o640,
                             mtime=1_700_000_000.0, data=base64.b64encode(data).decode())


async def test_parts_make_the_file_at_once(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    target = paths.node_path("/etc/app.conf")
    assert await write_file_part(paths, _part(b"abc", 0, False)) == 3
    assert not target.exists()  # nothing visible before the last part
    with pytest.raises(ParameterError, match="does not follow"):
        await write_file_part(paths, _part(b"zzz", 10, True))
    assert await write_file_part(paths, _part(b"abc", 0, False)) == 3
    assert await write_file_part(paths, _part(b"def", 3, True)) == 6
    assert target.read_bytes() == b"abcdef"
    assert (target.stat().st_mode & 0o777, target.stat().st_mtime) == (0o640, 1_700_000_000)
    assert sorted(p.name for p in target.parent.iterdir()) == ["app.conf"]


@pytest.mark.parametrize("path", ["relative", "/etc/../x", "/"])
async def test_bad_paths_are_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(ParameterError, match="absolute file path"):
        await write_file_part(Paths(tmp_path), _part(b"x", 0, True, path))
