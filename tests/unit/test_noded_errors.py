"""A node daemon answers a procedure's unexpected exception (a bug) with an incident
id, never with the exception's text, and keeps the traceback in its log."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from corral.noded import procedures
from corral.noded import server as server_module
from corral.noded.server import NodeServer
from corral.paths import Paths


async def _broken(paths: Paths, args: Mapping[str, Any]) -> None:
    raise RuntimeError("cannot open /secret/place")


async def test_unexpected_failure_answers_an_incident_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(procedures.PROCEDURES, "broken", _broken)
    # A read-only procedure, so that the caller's (absent) certificate may call it.
    monkeypatch.setattr(server_module, "OPEN_PROCEDURES",
                        server_module.OPEN_PROCEDURES | {"broken"})
    server = NodeServer(Paths(tmp_path), "127.0.0.1", 0)
    app = web.Application()
    app.router.add_post("/rpc/{version}/{procedure}", server._rpc)
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/rpc/1/broken", data="{}")
        answer = await resp.json()
    assert resp.status == 500 and answer["ok"] is False
    assert answer["error"]["code"] == "internal-error"
    assert "/secret/place" not in answer["error"]["message"]
    incident = re.search(r"incident ([0-9a-f]{8})", answer["error"]["message"])
    assert incident is not None and "corral-noded" in answer["error"]["message"]
    (logged,) = [r for r in caplog.records if incident.group(1) in r.getMessage()]
    assert "procedure broken" in logged.getMessage() and logged.exc_info is not None
