"""The allocator's engine on random clusters: the incremental score equals the score
computed from scratch after any sequence of moves, the vectorised kernels give the
same verdicts and scores as the one-node-at-a-time operations, balancing's fast
grid makes the same moves as trying each candidate one by one, and the shortcuts of
capacity planning (skipped sizes, counted allocations) find what trying each finds."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.allocator import kernels
from corral.allocator.alloc import AllocOptions, candidate_nodes
from corral.allocator.balance import BalanceOptions, Balancer
from corral.allocator.dedicated import count_by_checks, count_one_by_one
from corral.allocator.load import finish
from corral.allocator.metrics import ExactScorer, Stats, full_score, node_vector
from corral.allocator.model import NO_NODE, Cluster, Group, Instance, Node
from corral.allocator.moves import FAILOVER, apply_move
from corral.allocator.nodeops import add_pri, add_sec
from corral.allocator.planning import Planner, instance_from_spec
from corral.allocator.types import FailMode

TEMPLATES = ("drbd", "plain", "sharedfile", "diskless", "file")
STATES = ("running", "ADMIN_down", "ADMIN_offline", "ERROR_up")


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 7) -> Cluster:
    """A finished cluster of 2..max_nodes nodes in one or two groups with instances
    placed anywhere (so some nodes are over-committed, as real clusters can be)."""
    n_groups = draw(st.integers(1, 2))
    cluster = Cluster(groups=[Group(f"g{i}", f"uuid-{i}", idx=i) for i in range(n_groups)])
    n_nodes = draw(st.integers(2, max_nodes))
    for idx in range(n_nodes):
        t_mem = draw(st.sampled_from([8192, 16384, 65536]))
        t_dsk = draw(st.sampled_from([102400, 409600]))
        node = Node(f"node{idx}", float(t_mem), 1024, t_mem - 1024, float(t_dsk), t_dsk,
                    float(draw(st.sampled_from([4, 8, 16]))), 1,
                    draw(st.booleans()) and idx > 1 and draw(st.booleans()),
                    draw(st.integers(1, 4)), 0, idx % n_groups)
        node.idx = idx
        cluster.nodes.append(node)
    used_mem = [0] * n_nodes
    used_dsk = [0] * n_nodes
    for idx in range(draw(st.integers(0, 14))):
        template = draw(st.sampled_from(TEMPLATES))
        group = draw(st.integers(0, n_groups - 1))
        members = [n.idx for n in cluster.nodes if n.group == group]
        if template == "drbd" and len(members) < 2:
            template = "plain"
        pnode = draw(st.sampled_from(members))
        snode = (draw(st.sampled_from([m for m in members if m != pnode]))
                 if template == "drbd" else NO_NODE)
        mem = draw(st.sampled_from([512, 1024, 2048, 4096]))
        dsk = draw(st.sampled_from([1024, 10240, 20480]))
        inst = Instance(f"inst{idx}", mem, dsk, draw(st.integers(1, 4)),
                        draw(st.sampled_from(STATES)), pnode, snode, template,
                        tags=("svc:a",) if draw(st.booleans()) else ())
        inst.idx = idx
        cluster.instances.append(inst)
        if inst.uses_memory:
            used_mem[pnode] += mem
        if inst.local_storage:
            used_dsk[pnode] += dsk
            if snode != NO_NODE:
                used_dsk[snode] += dsk
    for node in cluster.nodes:
        # what the nodes report: running instances' memory and all disks in use
        node.f_mem = node.f_mem_forth = node.f_mem - used_mem[node.idx]
        node.f_dsk = node.f_dsk_forth = node.f_dsk - used_dsk[node.idx]
    cluster.tags = ["htools:iextags:svc"] if draw(st.booleans()) else []
    finish(cluster)
    return cluster


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6),
                                      st.integers(0, 5)), max_size=25))
def test_incremental_score_equals_full_recompute(cluster: Cluster,
                                                 moves: list[tuple[int, int, int]]) -> None:
    stats = Stats(cluster.nodes)
    assert _close(stats.score(), full_score(cluster.nodes))
    kinds = ("f", "fa", "rp", "rs", "raf", "far")
    for pick, target, kind in moves:
        if not cluster.instances:
            break
        inst = cluster.instances[pick % len(cluster.instances)]
        move = (kinds[kind], target % len(cluster.nodes))
        if move[0] == "f":
            move = FAILOVER
        if inst.mirror == 0 or (move[0] != "fa" and inst.snode == NO_NODE):
            continue
        if move[0] == "fa" and inst.disk_template == "drbd":
            continue
        if move[1] in (inst.pnode, inst.snode):
            continue
        result = apply_move(cluster.nodes, inst, move, force=True)
        if isinstance(result, FailMode):
            continue
        changed, moved = result
        for node in changed:
            stats.replace(cluster.nodes[node.idx], node)
            cluster.nodes[node.idx] = node
        cluster.instances[inst.idx] = moved
        assert _close(stats.score(), full_score(cluster.nodes))
        assert ExactScorer(cluster.nodes).score() == full_score(cluster.nodes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 30), st.booleans())
def test_kernels_agree_with_node_operations(cluster: Cluster, pick: int,
                                           force: bool) -> None:
    """For an instance tried on every node, the vectorised checks and scores are the
    ones of placing it on each node one by one."""
    nodes = cluster.nodes
    template = ("plain", "drbd", "diskless")[pick % 3]
    inst = Instance("new", 1024 * (1 + pick % 5), 10240 * (1 + pick % 3), 1 + pick % 4,
                    disk_template=template)
    inst.idx = len(cluster.instances)
    table = kernels.NodeTable(nodes)
    rows = np.arange(len(nodes))
    cols = table.take(rows)
    stats = Stats(n for n in nodes)
    fail, new = kernels.add_pri(cols, inst, force)
    after = kernels.metric_matrix(kernels.merged(cols, new))
    before = kernels.metric_matrix(cols)
    online = ~cols["offline"]
    scores = np.full(len(nodes), np.nan)
    if online.any():
        scores[online] = kernels.scores(stats, [(before[:, online], after[:, online])])
    for node in nodes:
        expected = add_pri(node, inst, force)
        if isinstance(expected, FailMode):
            assert fail[node.idx] == int(expected)
            continue
        assert fail[node.idx] == kernels.OK
        assert np.allclose(after[:, node.idx], node_vector(expected), equal_nan=True)
        if not node.offline:
            trial = stats.copy()
            trial.replace(node, expected)
            assert _close(float(scores[node.idx]), trial.score())
    # as a secondary of node 0
    peer = np.array([float(n.peers.get(0, 0)) for n in nodes])
    sfail, snew = kernels.add_sec(cols, inst, peer, force)
    safter = kernels.metric_matrix(kernels.merged(cols, snew))
    for node in nodes:
        expected = add_sec(node, inst, 0, force)
        if isinstance(expected, FailMode):
            assert sfail[node.idx] == int(expected)
        else:
            assert sfail[node.idx] == kernels.OK
            assert np.allclose(safter[:, node.idx], node_vector(expected), equal_nan=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_nodes=8), st.booleans(), st.booleans())
def test_balancing_grid_moves_as_trying_each_candidate(cluster: Cluster, evac: bool,
                                                       force: bool) -> None:
    opts = BalanceOptions(evac_mode=evac, force=force)
    fast = Balancer(cluster.copy(), 0, opts)
    slow = Balancer(cluster.copy(), 0, opts)
    slow._slow = True   # score every candidate with the one-node operations
    fast_steps = [(s.inst, s.move, s.score) for s in fast.run(8)]
    slow_steps = [(s.inst, s.move, s.score) for s in slow.run(8)]
    assert fast_steps == slow_steps
    if fast_steps:
        assert fast.score < Balancer(cluster.copy(), 0, opts).score


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from([128, 1024, 4096]), st.sampled_from([1024, 10240]),
       st.integers(1, 2), st.integers(1, 2), st.booleans(), st.booleans(),
       st.integers(-1, 4))
def test_dedicated_allocation_count_equals_placing_one_by_one(
        cluster: Cluster, mem: int, dsk: int, vcpus: int, spindle_use: int,
        with_spindles: bool, excl: bool, free_sp: int) -> None:
    # hail's lost-allocations metric counts how many test instances fit in a row;
    # corral works it out per check instead of placing thousands of them
    inst = Instance("minimalspecinstance", mem, dsk, vcpus, "running", NO_NODE, NO_NODE,
                    "plain", spindle_use, (), False, False,
                    ((dsk, 1),) if with_spindles else ())
    for node in cluster.nodes:
        if excl:
            node = node.copy()
            node.excl = True
            node.f_sp = node.f_sp_forth = free_sp
        assert count_by_checks(node, inst) == count_one_by_one(node, inst), node.name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from([FailMode.MEM, FailMode.DISK, FailMode.CPU]),
       st.sampled_from(["plain", "drbd"]), st.booleans(),
       st.sampled_from([(16384, 204800, 8), (8192, 409600, 16), (4096, 20480, 2)]))
def test_tiered_shrinking_skips_only_sizes_that_change_nothing(
        cluster: Cluster, mode: FailMode, template: str, capacity: bool,
        size: tuple[int, int, int]) -> None:
    # hspace shrinks a size one unit at a time until it fits; corral skips the sizes
    # whose candidates fail the same checks: the size found must be the same
    count = 2 if template == "drbd" else 1
    every = list(range(len(cluster.nodes)))
    cands = candidate_nodes(cluster, every, count, None, True)
    if not cands:
        return
    planner = Planner(cands, count, AllocOptions(capacity=capacity))
    inst = instance_from_spec(size[0], size[1], size[2], 1, template, 1)
    found = planner.suffices(cluster, inst, mode)
    expected = planner.suffices_trying_each(cluster, inst, mode)
    assert (found is None) == (expected is None)
    if found is not None and expected is not None:
        assert (found.mem, found.dsk, found.vcpus) == (expected.mem, expected.dsk,
                                                       expected.vcpus)
