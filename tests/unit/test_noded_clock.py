"""The node daemon's start-up check of its clock against its own certificate."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from corral.noded.clock import clock_problem
from corral.paths import Paths
from corral.x509 import load_cert_info
from corral.x509.certs import create_ca, sign_node_cert


def _joined(tmp_path: Path) -> Paths:
    paths = Paths(tmp_path)
    paths.data_dir.mkdir(parents=True)
    ca_cert, ca_key = create_ca("cluster.example", 3650)
    cert, _key = sign_node_cert(ca_cert, ca_key, "node2.example", ["192.0.2.2"], 365)
    paths.node_cert.write_bytes(cert)
    return paths


def test_a_clock_within_the_certificate_is_fine(tmp_path: Path) -> None:
    assert clock_problem(_joined(tmp_path)) is None


def test_a_clock_before_the_certificate_says_the_master_is_refused(tmp_path: Path) -> None:
    paths = _joined(tmp_path)
    start = load_cert_info(paths.node_cert.read_bytes()).not_before
    problem = clock_problem(paths, start - dt.timedelta(hours=2))
    assert problem is not None
    assert "is before the start of its certificate's validity" in problem
    assert "refuses the master's calls" in problem


def test_a_clock_past_the_certificate_says_so(tmp_path: Path) -> None:
    paths = _joined(tmp_path)
    end = load_cert_info(paths.node_cert.read_bytes()).not_after
    problem = clock_problem(paths, end + dt.timedelta(days=1))
    assert problem is not None and "past the end of its certificate's validity" in problem


def test_a_node_in_no_cluster_has_nothing_to_check(tmp_path: Path) -> None:
    assert clock_problem(Paths(tmp_path)) is None
