"""Property-based tests of the configuration store.

(a) the configuration serial goes up by exactly one per successful commit and
    object serials only ever go up, by one per commit that changes the object;
(b) a state machine doing random additions, updates and removals with clashing
    names, IPs and MACs: the invariants always hold, in memory and after reopening
    the file, and refused transactions change nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from corral.config import ConfigStore, Transaction
from corral.errors import AlreadyExistsError, ConfigurationError, NotFoundError
from corral.objects import KINDS, NIC, Disk, Instance, Node, NodeGroup
from tests.unit.config_helpers import check_invariants, new_store, snapshot

REFUSALS = (ConfigurationError, AlreadyExistsError, NotFoundError)

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
IPS = st.sampled_from([None, "10.0.0.1", "10.0.0.2", "10.0.0.3"])
MACS = st.sampled_from([
    "aa:00:00:00:00:01", "AA:00:00:00:00:01", "aa:00:00:00:00:02", "aa:00:00:00:00:03",
    "aa:00:00:00:00:04",
])
NICS = st.lists(st.tuples(IPS, MACS), max_size=2)
PICK = st.integers(min_value=0, max_value=1000)
#: Node addresses drawn from a small pool so that duplicate-IP refusals are exercised.
NODE_IPS = st.sampled_from(["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"])
NAMED = st.sampled_from(["nodegroup", "node", "instance", "disk"])


def _serials(store: ConfigStore) -> dict[str, int]:
    return {obj.uuid: obj.serial_no for kind in KINDS for obj in store.all(kind)}


# -- (a) serials ---------------------------------------------------------------------

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), NAMES, PICK),
        st.tuples(st.just("rename"), NAMES, PICK),
        st.tuples(st.just("remove"), NAMES, PICK),
        st.tuples(st.just("touch"), NAMES, PICK),
        st.tuples(st.just("empty"), NAMES, PICK),
    ),
    max_size=12,
)


def _run(txn: Transaction, store: ConfigStore, op: str, name: str, index: int) -> set[str]:
    """Apply one operation; return the uuids it changes."""
    nodes = store.all("node")
    node = nodes[index % len(nodes)]
    if op == "add":
        new = Node(name=name, primary_ip=f"198.51.100.{index % 250}", group=node.group)
        txn.add(new)
        return {new.uuid}
    if op == "rename":
        copy = txn.get("node", node.uuid)
        copy.name = name
        txn.update(copy)
        return {node.uuid}
    if op == "remove":
        txn.remove("node", node.uuid)
        return {node.uuid}
    if op == "touch":  # two objects in one commit
        copy = txn.get("node", node.uuid)
        copy.tags.append(name)
        txn.update(copy)
        cluster = txn.cluster()
        cluster.tags.append(name)
        txn.update(cluster)
        return {node.uuid, cluster.uuid}
    return set()


@settings(max_examples=25, deadline=None)
@given(OPERATIONS)
def test_serials_go_up_by_one_per_commit(operations: list[tuple[str, str, int]]) -> None:
    with tempfile.TemporaryDirectory(prefix="corral-config-") as tmp:
        store = new_store(Path(tmp) / "config.db")
        try:
            for op, name, index in operations:
                serial, before = store.serial, _serials(store)
                try:
                    with store.transaction() as txn:
                        touched = _run(txn, store, op, name, index)
                except REFUSALS:
                    assert store.serial == serial
                    assert _serials(store) == before
                    continue
                after = _serials(store)
                assert store.serial == serial + (1 if touched else 0)
                for uuid, number in after.items():
                    if uuid in touched:
                        assert number == before.get(uuid, 0) + 1
                    else:
                        assert number == before[uuid]
                assert set(before) - set(after) <= touched
        finally:
            store.close()


# -- (b) random changes keep every invariant -------------------------------------------


class ConfigMachine(RuleBasedStateMachine):
    """Random transactions against one store, many of them refused."""

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory(prefix="corral-config-")
        self.path = Path(self._tmp.name) / "config.db"
        self.store = new_store(self.path)
        self.serials: dict[str, int] = {}
        self.committed = 0

    def teardown(self) -> None:
        try:
            before = snapshot(self.store)
            self.store.close()
            with ConfigStore.open(self.path) as reopened:
                check_invariants(reopened)
                assert snapshot(reopened) == before
        finally:
            self.store.close()
            self._tmp.cleanup()

    def _pick(self, kind: str, index: int) -> str:
        """The uuid of an existing object of ``kind``, or now and then of none."""
        objects = self.store.all(kind)
        if not objects or index % 8 == 7:
            return f"missing-{kind}"
        return objects[index % len(objects)].uuid

    def _attempt(self, change: Callable[[Transaction], None]) -> None:
        before = snapshot(self.store)
        try:
            with self.store.transaction() as txn:
                change(txn)
        except REFUSALS:
            assert snapshot(self.store) == before
            return
        if self.store.serial == before["serial"]:  # nothing was staged
            assert snapshot(self.store) == before
            return
        assert self.store.serial == before["serial"] + 1
        self.committed += 1

    # -- additions -----------------------------------------------------------------------
    @rule(name=NAMES)
    def add_group(self, name: str) -> None:
        self._attempt(lambda txn: txn.add(NodeGroup(name=name)))

    @rule(name=NAMES, group=PICK, ip=NODE_IPS)
    def add_node(self, name: str, group: int, ip: str) -> None:
        node = Node(name=name, primary_ip=ip, group=self._pick("nodegroup", group))
        self._attempt(lambda txn: txn.add(node))

    @rule(name=st.none() | NAMES, nodes=st.lists(PICK, max_size=2))
    def add_disk(self, name: str | None, nodes: list[int]) -> None:
        disk = Disk(name=name, nodes=[self._pick("node", n) for n in nodes])
        self._attempt(lambda txn: txn.add(disk))

    @rule(name=NAMES, node=PICK, nics=NICS, disks=st.lists(PICK, max_size=1),
          new_disk=st.none() | NAMES)
    def add_instance(self, name: str, node: int, nics: list[tuple[str | None, str]],
                     disks: list[int], new_disk: str | None) -> None:
        primary = self._pick("node", node)
        disk_uuids = [self._pick("disk", d) for d in disks]
        extra = Disk(name=new_disk, nodes=[primary]) if new_disk else None
        if extra is not None:
            disk_uuids.append(extra.uuid)
        instance = Instance(name=name, primary_node=primary, disks=disk_uuids,
                            nics=[NIC(ip=ip, mac=mac) for ip, mac in nics])

        def change(txn: Transaction) -> None:
            if extra is not None:
                txn.add(extra)
            txn.add(instance)

        self._attempt(change)

    @rule(name=NAMES, node=PICK, ip=IPS, mac=MACS)
    def add_instance_with_one_nic(self, name: str, node: int, ip: str | None, mac: str) -> None:
        instance = Instance(name=name, primary_node=self._pick("node", node),
                            nics=[NIC(ip=ip, mac=mac)])
        self._attempt(lambda txn: txn.add(instance))

    # -- updates ---------------------------------------------------------------------------
    @rule(kind=NAMED, index=PICK, name=NAMES)
    def rename(self, kind: str, index: int, name: str) -> None:
        def change(txn: Transaction) -> None:
            obj = txn.get(kind, self._pick(kind, index))
            obj.name = name  # type: ignore[attr-defined]
            txn.update(obj)

        self._attempt(change)

    @rule(index=PICK, nics=NICS)
    def set_nics(self, index: int, nics: list[tuple[str | None, str]]) -> None:
        def change(txn: Transaction) -> None:
            instance = txn.get("instance", self._pick("instance", index))
            instance.nics = [NIC(ip=ip, mac=mac) for ip, mac in nics]
            txn.update(instance)

        self._attempt(change)

    @rule(index=PICK, disks=st.lists(PICK, max_size=2))
    def set_disks(self, index: int, disks: list[int]) -> None:
        def change(txn: Transaction) -> None:
            instance = txn.get("instance", self._pick("instance", index))
            instance.disks = [self._pick("disk", d) for d in disks]
            txn.update(instance)

        self._attempt(change)

    @rule(index=PICK, group=PICK)
    def move_node(self, index: int, group: int) -> None:
        def change(txn: Transaction) -> None:
            node = txn.get("node", self._pick("node", index))
            node.group = self._pick("nodegroup", group)
            txn.update(node)

        self._attempt(change)

    @rule(index=PICK)
    def set_master(self, index: int) -> None:
        def change(txn: Transaction) -> None:
            cluster = txn.cluster()
            cluster.master_node = self._pick("node", index)
            txn.update(cluster)

        self._attempt(change)

    @rule(first=PICK, second=PICK)
    def swap_instance_names(self, first: int, second: int) -> None:
        def change(txn: Transaction) -> None:
            one = txn.get("instance", self._pick("instance", first))
            two = txn.get("instance", self._pick("instance", second))
            if one.uuid == two.uuid:
                return
            one.name, two.name = two.name, one.name
            txn.update(one)
            txn.update(two)

        self._attempt(change)

    @rule(index=PICK)
    def stale_update(self, index: int) -> None:
        uuid = self._pick("node", index)
        if self.store.find("node", uuid) is None:
            return
        stale = self.store.transaction().get("node", uuid)

        def touch(txn: Transaction) -> None:
            fresh = txn.get("node", uuid)
            fresh.tags.append("touched")
            txn.update(fresh)

        self._attempt(touch)
        before = snapshot(self.store)
        stale.offline = True
        try:
            with self.store.transaction() as txn:
                txn.update(stale)
        except ConfigurationError:  # SerialConflictError, or a refusal of the touch
            pass
        else:
            raise AssertionError("a stale update was accepted")
        assert snapshot(self.store) == before

    # -- removals --------------------------------------------------------------------------
    @rule(kind=NAMED, index=PICK)
    def remove(self, kind: str, index: int) -> None:
        self._attempt(lambda txn: txn.remove(kind, self._pick(kind, index)))

    @rule(index=PICK)
    def remove_instance_with_disks(self, index: int) -> None:
        def change(txn: Transaction) -> None:
            instance = txn.get("instance", self._pick("instance", index))
            txn.remove("instance", instance.uuid)
            for disk in instance.disks:
                txn.remove("disk", disk)

        self._attempt(change)

    # -- the file --------------------------------------------------------------------------
    @rule()
    def reopen(self) -> None:
        before = snapshot(self.store)
        self.store.close()
        self.store = ConfigStore.open(self.path)
        assert snapshot(self.store) == before

    @invariant()
    def invariants_hold(self) -> None:
        check_invariants(self.store)
        for uuid, number in _serials(self.store).items():
            assert number >= self.serials.get(uuid, 1)
            self.serials[uuid] = number


TestConfigMachine = ConfigMachine.TestCase
TestConfigMachine.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
