"""The RAPI benchmark measures Ganeti or says why not; it quotes no figure of its own
(bench/rapi.py, issue 24 item 6)."""

from __future__ import annotations

from pathlib import Path

from corral.x509 import create_ca
from tests.conftest import free_port
from tests.unit.bench_helpers import load_bench


def _figures(p50: float) -> dict[str, object]:
    side = {"keepalive": {"p50_ms": p50, "p99_ms": p50}, "new_connection":
            {"p50_ms": p50 * 4, "p99_ms": p50 * 4}, "rps": 1000 / p50}
    return {"info": side, "instances_bulk": side, "jobs": side}


async def test_an_unreachable_ganeti_is_reported_with_the_reason(tmp_path: Path) -> None:
    rapi = load_bench("rapi")
    cert, _ = create_ca("bench-test", 1)
    (tmp_path / "ca.pem").write_bytes(cert)
    url = f"https://127.0.0.1:{free_port()}"
    target = rapi.Target(url, "user", "password", tmp_path / "ca.pem", check_hostname=False)
    reason = await rapi.ganeti_probe(target)
    assert reason is not None and reason.startswith(f"GET {url}/2/info: ")


def test_without_ganeti_the_ratio_line_compares_nothing() -> None:
    rapi = load_bench("rapi")
    line = rapi._ratio_line(_figures(1.0), None, "connection refused")
    assert line["ganeti"] == "unavailable" and line["reason"] == "connection refused"
    assert not [key for key in line if key.endswith(("_over_corral", "_over_ganeti"))]
    assert line["meets_targets"]["info_new_connection"] is None


def test_the_new_connection_target_is_a_twentieth_of_the_measured_ganeti_time() -> None:
    rapi = load_bench("rapi")
    line = rapi._ratio_line(_figures(1.0), _figures(30.0), None)
    assert line["target_ms"]["info_new_connection"] == 6.0  # 30 ms * 4 / 20
    assert line["meets_targets"]["info_new_connection"] is True  # 4 ms <= 6 ms
    assert line["info_new_connection_p50_ganeti_over_corral"] == 30.0
