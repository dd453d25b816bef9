"""The luxi methods the master daemon answers, each a small coroutine.

Method names are Ganeti's where Ganeti has the method (``QueryClusterInfo``,
``QueryConfigValues``) so the protocol reads the same to people who know it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from corral.cmdlib.cluster import ClusterSetParams, apply_cluster_params, cluster_info
from corral.config import ConfigStore
from corral.errors import ParameterError, ProtocolError, UnknownFieldError
from corral.luxi import Request
from corral.objects import Cluster

__all__ = ["MasterMethods"]

log = logging.getLogger(__name__)

Method = Callable[[list[Any]], Awaitable[Any]]

#: Config values with a name of their own; every Cluster field is available too.
_DERIVED_VALUES = ("cluster_name", "master_node", "config_serial", "default_hypervisor")


class MasterMethods:
    """Dispatches luxi requests to the master daemon's state."""

    def __init__(self, store: ConfigStore) -> None:
        self.store = store
        self._methods: dict[str, Method] = {
            "QueryClusterInfo": self.query_cluster_info,
            "QueryConfigValues": self.query_config_values,
            "SetClusterParams": self.set_cluster_params,
        }

    async def dispatch(self, request: Request) -> Any:
        """Run the method ``request`` names."""
        method = self._methods.get(request.method)
        if method is None:
            raise ProtocolError(
                f"unknown luxi method '{request.method}'; known: {', '.join(sorted(self._methods))}"
            )
        return await method(request.args)

    def _master_name(self) -> str:
        return self.store.get("node", self.store.cluster.master_node).name

    async def query_cluster_info(self, args: list[Any]) -> dict[str, Any]:
        """``QueryClusterInfo()``: the cluster's settings with Ganeti's keys."""
        return cluster_info(self.store.cluster, self._master_name(), self.store.serial)

    async def query_config_values(self, args: list[Any]) -> list[Any]:
        """``QueryConfigValues(fields)``: selected values, in the order asked."""
        if len(args) != 1 or not isinstance(args[0], list):
            raise ParameterError("QueryConfigValues takes one argument: a list of field names")
        cluster = self.store.cluster
        values: list[Any] = []
        for field in args[0]:
            if field == "cluster_name":
                values.append(cluster.name)
            elif field == "master_node":
                values.append(self._master_name())
            elif field == "config_serial":
                values.append(self.store.serial)
            elif field == "default_hypervisor":
                values.append(cluster.default_hypervisor)
            elif isinstance(field, str) and field in Cluster.__struct_fields__:
                values.append(msgspec.to_builtins(getattr(cluster, field)))
            else:
                valid = sorted({*_DERIVED_VALUES, *Cluster.__struct_fields__})
                raise UnknownFieldError(
                    f"unknown configuration value {field!r}; valid ones: {', '.join(valid)}"
                )
        return values

    async def set_cluster_params(self, args: list[Any]) -> dict[str, Any]:
        """``SetClusterParams(changes, reason_trail, dry_run)``: change cluster parameters.

        Returns the changed settings and the new configuration serial. With
        ``dry_run`` everything is checked and nothing is committed.
        """
        if len(args) != 3:
            raise ParameterError("SetClusterParams takes (changes, reason_trail, dry_run)")
        try:
            change = msgspec.convert(args[0], ClusterSetParams)
        except msgspec.ValidationError as err:
            raise ParameterError(f"invalid cluster parameters: {err}") from None
        reason_trail, dry_run = args[1], bool(args[2])
        with self.store.transaction() as txn:
            cluster = txn.cluster()
            changes = apply_cluster_params(cluster, change)
            if dry_run or not changes:
                txn.discard()
                return {"changes": changes, "serial": self.store.serial, "dry_run": dry_run}
            txn.update(cluster)
        log.info(
            "cluster parameters changed (serial %d): %s; reason trail: %s",
            self.store.serial, "; ".join(changes), reason_trail,
        )
        return {"changes": changes, "serial": self.store.serial, "dry_run": False}
