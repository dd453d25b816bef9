"""The Grafana dashboard in docs/grafana uses only metrics corral serves, and every
metric corral serves is described in docs/monitoring.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"corral_[a-z_]+")
_SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def _served() -> set[str]:
    """The metric family names the master's and the nodes' metrics code defines."""
    names: set[str] = set()
    for module in ("src/corral/masterd/metrics.py", "src/corral/mond/metrics.py"):
        names.update(re.findall(r'"(corral_[a-z_]+)"', (ROOT / module).read_text()))
    return names


def _family(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_dashboard_uses_served_metrics_only() -> None:
    dashboard = json.loads((ROOT / "docs/grafana/corral.json").read_text())
    used = {_family(name) for panel in dashboard["panels"] for target in panel["targets"]
            for name in _NAME.findall(target["expr"])}
    served = _served()
    assert used and used <= served, used - served


def test_every_served_metric_is_documented() -> None:
    documented = {_family(name) for name in
                  _NAME.findall((ROOT / "docs/monitoring.md").read_text())}
    assert _served() <= documented, _served() - documented
