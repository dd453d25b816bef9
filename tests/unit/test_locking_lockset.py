"""LockSet, scenario by scenario and as a stateful property test on a virtual clock.

The scenarios cover the rules in the module docstring of :mod:`corral.locking.lockset`:
sorted acquisition, one deadline for the whole call, nothing kept on timeout, error or
cancellation, deleted members, the whole-set lock and how add/remove wait for it, the
add/remove/acquire/release rules, and ``info()``.

The state machine drives one set with random owners that acquire (named subsets or
ALL_SET, shared or exclusive, with or without a timeout), release all or part, get
cancelled, add and remove members, while the clock moves. After every step it checks:

* per member an exclusive holder is alone; holders per ``info()``, ``list_owned``,
  ``owns_all`` and the model (what finished calls returned) agree, in the right mode;
* a running acquisition holds exactly a sorted prefix of what it asked for (minus
  members removed before it got to them) and never keeps anything after it ends
  without success;
* every running call waits in exactly one queue and nobody else is queued; no waiter
  is past its deadline; the top of a queue really cannot be granted.

At the end all holders release, repeatedly, while the clock runs out every timeout:
every call must finish (no deadlock) and the set must be left free.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from corral.errors import LockDeletedError, LockError
from corral.locking import ALL_SET, AllSet, LockInfo, LockSet
from tests.unit.virtual_time import VirtualLoop

SET_LOCK = "s/[lockset]"


@pytest.fixture
def vl() -> Iterator[VirtualLoop]:
    loop = VirtualLoop()
    yield loop
    loop.close()


def _set(*names: str) -> LockSet:
    return LockSet(names or ("a", "b", "c"), "s")


def _hold(
    vl: VirtualLoop, ls: LockSet, names: str | list[str] | AllSet, owner: str,
    shared: bool = False,
) -> frozenset[str] | None:
    return vl.run(ls.acquire(names, shared=shared, owner=owner))


def _start(
    vl: VirtualLoop, ls: LockSet, names: str | list[str] | AllSet, owner: str,
    shared: bool = False, timeout: float | None = None,
) -> asyncio.Task[frozenset[str] | None]:
    task = vl.spawn(ls.acquire(names, shared=shared, timeout=timeout, owner=owner))
    vl.settle()
    return task


def _members(ls: LockSet) -> dict[str, LockInfo]:
    """Member name -> its info; the set lock left out."""
    infos = ls.info()
    assert infos[0].name == SET_LOCK
    return {info.name.removeprefix("s/"): info for info in infos[1:]}


def _held_by(ls: LockSet, owner: str) -> set[str]:
    return {name for name, info in _members(ls).items() if owner in info.holders}


def _waiting_on(ls: LockSet) -> dict[str, list[str]]:
    """Lock name (member, or SET_LOCK) -> owners queued on it, in queue order."""
    result = {}
    for info in ls.info():
        owners = [o for entry in info.pending for o in entry.owners]
        if owners:
            result[SET_LOCK if info.name == SET_LOCK else info.name.removeprefix("s/")] = owners
    return result


def _assert_free(ls: LockSet) -> None:
    for info in ls.info():
        assert info.mode is None and info.holders == () and info.pending == (), info


# -- sorted order -------------------------------------------------------------------------


def test_members_are_taken_in_sorted_order_and_the_result_is_what_is_held(
    vl: VirtualLoop,
) -> None:
    ls = _set("d", "b", "a", "c")
    _hold(vl, ls, ["c"], "A")
    _hold(vl, ls, ["b"], "C")
    task = _start(vl, ls, ["d", "c", "b", "a"], "B")
    # "a" is free and first; "b" is the lowest held member, so B waits there, not on "c".
    assert _held_by(ls, "B") == {"a"}
    assert _waiting_on(ls) == {"b": ["B"]}
    ls.release(owner="C")
    vl.settle()
    assert _held_by(ls, "B") == {"a", "b"}
    assert _waiting_on(ls) == {"c": ["B"]}
    assert not task.done()
    ls.release(owner="A")
    vl.settle()
    assert task.result() == frozenset({"a", "b", "c", "d"})
    assert isinstance(task.result(), frozenset)
    assert ls.list_owned(owner="B") == frozenset({"a", "b", "c", "d"})
    assert _held_by(ls, "B") == {"a", "b", "c", "d"}
    assert ls.is_owned(owner="B") and not ls.owns_all(owner="B")


def test_order_of_acquisition_is_sorted_whatever_the_order_given(vl: VirtualLoop) -> None:
    """Every member held by somebody else: B's queue position reveals its whole order."""
    names = [f"n{i}" for i in range(8)]
    ls = LockSet(reversed(names), "s")
    for name in names:
        _hold(vl, ls, [name], f"H{name}")
    task = _start(vl, ls, list(reversed(names)), "B")
    order = []
    for _ in names:
        ((name, owners),) = _waiting_on(ls).items()
        assert owners == ["B"]
        order.append(name)
        ls.release(owner=f"H{name}")
        vl.settle()
    assert order == names
    assert task.result() == frozenset(names)


# -- one deadline for the whole call -------------------------------------------------------


def test_timeout_covers_the_whole_acquisition_and_keeps_nothing(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["c"], "A")
    task = _start(vl, ls, ["a", "b", "c"], "B", timeout=2)
    assert _held_by(ls, "B") == {"a", "b"}
    vl.advance(1.75)
    assert not task.done()
    vl.advance(0.25)
    assert task.result() is None
    assert _held_by(ls, "B") == set()
    assert ls.list_owned(owner="B") == frozenset()
    assert not ls.is_owned(owner="B")
    assert _waiting_on(ls) == {}
    # a and b are free again: another owner takes them exclusively at once.
    assert _hold(vl, ls, ["a", "b"], "D") == frozenset({"a", "b"})


def test_deadline_is_for_the_whole_call_not_for_each_member(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["a"], "A")
    _hold(vl, ls, ["b"], "C")
    task = _start(vl, ls, ["a", "b"], "B", timeout=2)
    vl.advance(1.5)
    ls.release(owner="A")
    vl.settle()
    assert _held_by(ls, "B") == {"a"} and _waiting_on(ls) == {"b": ["B"]}
    vl.advance(0.25)
    assert not task.done()
    vl.advance(0.25)  # t = 2: the deadline, though B has waited on "b" for 0.5 s only
    assert task.result() is None
    assert _held_by(ls, "B") == set() and _waiting_on(ls) == {}
    assert _members(ls)["a"].holders == ()


def test_zero_timeout_only_tries(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["b"], "A", shared=True)
    assert vl.run(ls.acquire(["a", "b"], timeout=0, owner="B")) is None
    assert _held_by(ls, "B") == set() and _waiting_on(ls) == {}
    assert vl.run(ls.acquire(["a", "b"], shared=True, timeout=0, owner="B")) == {"a", "b"}


def test_all_set_timeout_on_the_set_lock_and_on_a_member(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "A")
    task = _start(vl, ls, ALL_SET, "B", timeout=1)
    assert _waiting_on(ls) == {SET_LOCK: ["B"]}
    vl.advance(1)
    assert task.result() is None and _waiting_on(ls) == {}
    ls.release(owner="A")
    _hold(vl, ls, ["c"], "A")
    task = _start(vl, ls, ALL_SET, "B", timeout=1)
    assert ls.info()[0].holders == ("B",) and _held_by(ls, "B") == {"a", "b"}
    vl.advance(1)
    assert task.result() is None
    assert not ls.owns_all(owner="B") and not ls.is_owned(owner="B")
    assert ls.info()[0].holders == () and _held_by(ls, "B") == set()
    # The set lock is free again: an add by somebody else goes through at once.
    vl.run(ls.add("d", owner="C"))
    assert "d" in ls


# -- cancellation --------------------------------------------------------------------------


def test_cancellation_in_the_middle_releases_what_the_call_took(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["c"], "A")
    task = _start(vl, ls, ["a", "b", "c"], "B")
    assert _held_by(ls, "B") == {"a", "b"}
    task.cancel()
    vl.settle()
    assert task.cancelled()
    assert _held_by(ls, "B") == set() and _waiting_on(ls) == {}
    assert not ls.is_owned(owner="B")
    assert _hold(vl, ls, ["a", "b"], "D") == frozenset({"a", "b"})
    assert _members(ls)["c"].holders == ("A",)


def test_cancelled_all_set_acquisition_gives_up_the_set_lock(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["b"], "A")
    task = _start(vl, ls, ALL_SET, "B", shared=True)
    assert ls.owns_all(True, owner="B") and _held_by(ls, "B") == {"a"}
    adder = vl.spawn(ls.add("d", owner="C"))
    vl.settle()
    assert not adder.done()
    task.cancel()
    vl.settle()
    assert task.cancelled() and adder.done() and adder.result() is None
    assert "d" in ls and not ls.owns_all(owner="B") and _held_by(ls, "B") == set()


# -- deleted members -----------------------------------------------------------------------


def test_unknown_name_raises_lock_deleted_naming_it_and_holds_nothing(vl: VirtualLoop) -> None:
    ls = _set()
    with pytest.raises(LockDeletedError, match="zz"):
        vl.run(ls.acquire(["a", "zz", "b"], owner="B"))
    assert not ls.is_owned(owner="B") and ls.list_owned(owner="B") == frozenset()
    _assert_free(ls)
    with pytest.raises(LockDeletedError, match="zz"):
        vl.run(ls.acquire("zz", owner="B"))
    _assert_free(ls)
    assert _hold(vl, ls, ["a", "b", "c"], "B") == frozenset({"a", "b", "c"})


def test_member_removed_while_queued_on_it_fails_the_named_acquire(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["b"], "A")
    task = _start(vl, ls, ["a", "b", "c"], "B")
    other = _start(vl, ls, ["b"], "C", shared=True)
    assert _held_by(ls, "B") == {"a"} and _waiting_on(ls) == {"b": ["B", "C"]}
    assert vl.run(ls.remove(["b"], owner="A")) == ["b"]
    assert "b" not in ls
    with pytest.raises(LockDeletedError, match="s/b"):
        task.result()
    with pytest.raises(LockDeletedError):
        other.result()
    assert not ls.is_owned(owner="B") and not ls.is_owned(owner="A")
    _assert_free(ls)


def test_member_removed_ahead_of_a_named_acquire_fails_it_when_reached(
    vl: VirtualLoop,
) -> None:
    ls = _set()
    _hold(vl, ls, ["a"], "A")
    task = _start(vl, ls, ["a", "c"], "B")
    assert vl.run(ls.remove("c", owner="C")) == ["c"]
    ls.release(owner="A")
    vl.settle()
    with pytest.raises(LockDeletedError, match="c"):
        task.result()
    assert not ls.is_owned(owner="B")
    _assert_free(ls)


# -- ALL_SET -------------------------------------------------------------------------------


def test_all_set_takes_every_member(vl: VirtualLoop) -> None:
    ls = _set()
    assert _hold(vl, ls, ALL_SET, "B") == frozenset({"a", "b", "c"})
    assert ls.list_owned(owner="B") == frozenset({"a", "b", "c"})
    assert ls.owns_all(owner="B") and ls.owns_all(False, owner="B")
    assert not ls.owns_all(True, owner="B")
    assert all(info.holders == ("B",) and info.mode == "exclusive" for info in ls.info())


def test_all_set_shared_by_two_owners_at_once(vl: VirtualLoop) -> None:
    ls = _set()
    assert _hold(vl, ls, ALL_SET, "A", shared=True) == frozenset({"a", "b", "c"})
    assert _hold(vl, ls, ALL_SET, "B", shared=True) == frozenset({"a", "b", "c"})
    assert all(info.holders == ("A", "B") and info.mode == "shared" for info in ls.info())
    assert ls.owns_all(True, owner="A") and ls.owns_all(True, owner="B")
    assert not ls.owns_all(False, owner="A")


@pytest.mark.parametrize("shared", [False, True])
def test_add_by_another_owner_waits_for_the_whole_set_holder(
    vl: VirtualLoop, shared: bool,
) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "B", shared=shared)
    adder = vl.spawn(ls.add("d", owner="C"))
    vl.settle()
    assert not adder.done() and "d" not in ls
    assert _waiting_on(ls) == {SET_LOCK: ["C"]}
    vl.advance(100)
    assert not adder.done()
    ls.release(owner="B")
    vl.settle()
    assert adder.done() and "d" in ls
    assert ls.names() == ["a", "b", "c", "d"]
    _assert_free(ls)


def test_add_waits_for_an_all_set_acquisition_still_on_its_way(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["b"], "A")
    task = _start(vl, ls, ALL_SET, "B")
    adder = vl.spawn(ls.add("bb", owner="C"))
    vl.settle()
    assert not adder.done() and "bb" not in ls
    ls.release(owner="A")
    vl.settle()
    # B got what was there when it started; "bb" did not appear under it.
    assert task.result() == frozenset({"a", "b", "c"})
    assert not adder.done() and "bb" not in ls
    ls.release(owner="B")
    vl.settle()
    assert adder.done() and ls.names() == ["a", "b", "bb", "c"]


def test_remove_by_another_owner_waits_for_the_whole_set_holder(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "B", shared=True)
    remover = vl.spawn(ls.remove(["a"], owner="C"))
    vl.settle()
    assert not remover.done() and "a" in ls
    assert _waiting_on(ls) == {"a": ["C"]}
    ls.release(owner="B")
    vl.settle()
    assert remover.result() == ["a"] and ls.names() == ["b", "c"]
    _assert_free(ls)


def test_all_set_skips_a_member_removed_before_it_got_there(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["b"], "A")
    task = _start(vl, ls, ALL_SET, "B")
    assert _held_by(ls, "B") == {"a"}
    assert vl.run(ls.remove("c", owner="C")) == ["c"]  # free, so removed at once
    ls.release(owner="A")
    vl.settle()
    assert task.result() == frozenset({"a", "b"})
    assert ls.list_owned(owner="B") == frozenset({"a", "b"}) and ls.owns_all(owner="B")


def test_all_set_skips_the_member_it_was_queued_on_when_removed(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["b"], "A")
    task = _start(vl, ls, ALL_SET, "B", shared=True)
    assert _waiting_on(ls) == {"b": ["B"]}
    assert vl.run(ls.remove(["b"], owner="A")) == ["b"]
    vl.settle()
    assert task.result() == frozenset({"a", "c"})
    assert ls.list_owned(owner="B") == frozenset({"a", "c"})
    assert ls.owns_all(True, owner="B")
    ls.release(owner="B")
    _assert_free(ls)


# -- add and remove ------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True])
def test_add_acquired_gives_the_owner_the_new_lock_in_the_mode_asked(
    vl: VirtualLoop, shared: bool,
) -> None:
    ls = _set()
    vl.run(ls.add(["e", "d"], acquired=True, shared=shared, owner="C"))
    assert ls.names() == ["a", "b", "c", "d", "e"]
    assert ls.list_owned(owner="C") == frozenset({"d", "e"})
    members = _members(ls)
    for name in ("d", "e"):
        assert members[name].holders == ("C",)
        assert members[name].mode == ("shared" if shared else "exclusive")
    assert not ls.owns_all(owner="C")
    ls.release(owner="C")
    _assert_free(ls)


def test_add_without_acquired_holds_nothing(vl: VirtualLoop) -> None:
    ls = _set()
    vl.run(ls.add("d", owner="C"))
    assert "d" in ls and not ls.is_owned(owner="C")
    _assert_free(ls)


def test_add_of_an_existing_or_repeated_name_is_refused(vl: VirtualLoop) -> None:
    ls = _set()
    with pytest.raises(LockError, match="b"):
        vl.run(ls.add(["d", "b"], owner="C"))
    with pytest.raises(LockError):
        vl.run(ls.add(["d", "d"], owner="C"))
    assert ls.names() == ["a", "b", "c"]
    _assert_free(ls)


def test_add_while_holding_some_members_is_refused(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["a"], "C")
    with pytest.raises(LockError, match="holding some"):
        vl.run(ls.add("d", owner="C"))
    assert "d" not in ls and ls.list_owned(owner="C") == frozenset({"a"})


def test_add_while_holding_the_whole_set_shared_is_refused(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "C", shared=True)
    with pytest.raises(LockError):
        vl.run(ls.add("d", owner="C"))
    assert "d" not in ls and ls.owns_all(True, owner="C")


def test_add_while_holding_the_whole_set_exclusively_needs_no_wait(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "C")
    vl.run(ls.add("d", acquired=True, owner="C"))  # run() fails if it had to wait
    vl.run(ls.add("e", owner="C"))
    assert ls.names() == ["a", "b", "c", "d", "e"]
    assert ls.list_owned(owner="C") == frozenset({"a", "b", "c", "d"})
    assert ls.owns_all(False, owner="C")
    assert _members(ls)["e"].holders == ()
    ls.release(owner="C")
    _assert_free(ls)


def test_remove_returns_what_it_removed_and_skips_unknown_names(vl: VirtualLoop) -> None:
    ls = _set()
    assert vl.run(ls.remove(["zz", "a", "c"], owner="C")) == ["a", "c"]
    assert ls.names() == ["b"] and "a" not in ls
    assert vl.run(ls.remove("a", owner="C")) == []
    assert not ls.is_owned(owner="C")
    _assert_free(ls)
    with pytest.raises(LockDeletedError, match="a"):
        vl.run(ls.acquire(["a"], owner="D"))


def test_remove_of_held_members_by_their_holder(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["a", "b"], "C")
    assert vl.run(ls.remove(["a"], owner="C")) == ["a"]
    assert ls.list_owned(owner="C") == frozenset({"b"}) and ls.names() == ["b", "c"]
    assert vl.run(ls.remove(["b"], owner="C")) == ["b"]
    assert not ls.is_owned(owner="C") and ls.list_owned(owner="C") == frozenset()
    # Holding nothing now, C may acquire again.
    assert _hold(vl, ls, ["c"], "C") == frozenset({"c"})


def test_remove_by_the_whole_set_holder(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "C")
    assert vl.run(ls.remove(["a", "b", "c"], owner="C")) == ["a", "b", "c"]
    assert ls.names() == [] and ls.owns_all(owner="C")
    assert ls.list_owned(owner="C") == frozenset()
    ls.release(owner="C")
    assert not ls.is_owned(owner="C")
    _assert_free(ls)


def test_pending_acquirers_of_a_removed_member_fail(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["a"], "A", shared=True)
    exclusive = _start(vl, ls, ["a"], "X")
    remover = vl.spawn(ls.remove("a", owner="R"))
    vl.settle()
    shared = _start(vl, ls, ["a"], "S", shared=True)
    assert _waiting_on(ls) == {"a": ["X", "R", "S"]}
    ls.release(owner="A")
    vl.settle()
    # X is first in line, so gets "a"; R and S still wait.
    assert exclusive.result() == frozenset({"a"}) and not remover.done()
    ls.release(owner="X")
    vl.settle()
    assert remover.result() == ["a"]
    with pytest.raises(LockDeletedError):
        shared.result()
    assert not ls.is_owned(owner="S")
    _assert_free(ls)


def test_removing_members_not_held_while_holding_others_is_refused(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["a"], "C")
    with pytest.raises(LockError, match="b"):
        vl.run(ls.remove(["a", "b"], owner="C"))
    assert ls.names() == ["a", "b", "c"]
    assert ls.list_owned(owner="C") == frozenset({"a"})


def test_a_remove_that_fails_partway_leaves_ownership_consistent(vl: VirtualLoop) -> None:
    """The whole-set holder adds "b" held shared, then removes ["a", "b"].

    "b" cannot be deleted while held shared, so the call fails; whatever it did
    before failing must leave list_owned naming only members that exist, and a
    release must still free everything.
    """
    ls = _set("a")
    _hold(vl, ls, ALL_SET, "A")
    vl.run(ls.add("b", acquired=True, shared=True, owner="A"))
    assert ls.list_owned(owner="A") == frozenset({"a", "b"})
    with pytest.raises(LockError, match="b: A holds them shared"):
        vl.run(ls.remove(["a", "b"], owner="A"))
    assert ls.names() == ["a", "b"], "a refused remove removes nothing"
    assert ls.list_owned(owner="A") <= frozenset(ls.names())
    ls.release(owner="A")
    assert not ls.is_owned(owner="A")
    _assert_free(ls)


# -- misuse --------------------------------------------------------------------------------


def test_acquiring_while_holding_something_in_the_set_is_refused(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ["a"], "B")
    with pytest.raises(LockError, match="already holds"):
        vl.run(ls.acquire(["b"], owner="B"))
    assert ls.list_owned(owner="B") == frozenset({"a"}) and _held_by(ls, "B") == {"a"}
    ls.release(owner="B")
    _hold(vl, ls, ALL_SET, "B", shared=True)
    with pytest.raises(LockError, match="already holds"):
        vl.run(ls.acquire(ALL_SET, shared=True, owner="B"))
    assert ls.owns_all(True, owner="B") and _held_by(ls, "B") == {"a", "b", "c"}


def test_releasing_what_is_not_held_is_refused(vl: VirtualLoop) -> None:
    ls = _set()
    with pytest.raises(LockError, match="holds no lock"):
        ls.release(owner="B")
    with pytest.raises(LockError, match="b"):
        ls.release(["b"], owner="B")
    _hold(vl, ls, ["a"], "B")
    with pytest.raises(LockError, match=r"cannot release s lock.*b"):
        ls.release(["a", "b"], owner="B")
    assert ls.list_owned(owner="B") == frozenset({"a"}) and _held_by(ls, "B") == {"a"}


def test_releasing_a_subset_keeps_the_rest_and_gives_up_the_whole_set(vl: VirtualLoop) -> None:
    ls = _set()
    _hold(vl, ls, ALL_SET, "B")
    ls.release(["b"], owner="B")
    assert ls.list_owned(owner="B") == frozenset({"a", "c"})
    assert _held_by(ls, "B") == {"a", "c"}
    assert not ls.owns_all(owner="B") and ls.is_owned(owner="B")
    assert ls.info()[0].holders == ()
    assert _hold(vl, ls, ["b"], "C") == frozenset({"b"})
    ls.release("a", owner="B")
    ls.release(["c"], owner="B")
    assert not ls.is_owned(owner="B") and ls.list_owned(owner="B") == frozenset()
    with pytest.raises(LockError):
        ls.release(owner="B")


# -- info ----------------------------------------------------------------------------------


def test_info_lists_the_set_lock_then_members_by_name_with_holders_and_pending(
    vl: VirtualLoop,
) -> None:
    ls = LockSet(["c", "a", "b"], "s")
    _hold(vl, ls, ALL_SET, "A", shared=True)
    waiting = _start(vl, ls, ["b"], "Z", timeout=5)
    whole = _start(vl, ls, ALL_SET, "W")
    infos = ls.info()
    assert [i.name for i in infos] == [SET_LOCK, "s/a", "s/b", "s/c"]
    assert infos[0].mode == "shared" and infos[0].holders == ("A",)
    assert [(p.mode, p.owners) for p in infos[0].pending] == [("exclusive", ("W",))]
    assert [(p.mode, p.owners) for p in infos[2].pending] == [("exclusive", ("Z",))]
    assert all(i.holders == ("A",) and i.mode == "shared" for i in infos[1:])
    ls.release(owner="A")
    vl.settle()
    assert waiting.result() == frozenset({"b"})
    assert ls.info()[0].holders == ("W",) and _held_by(ls, "W") == {"a"}
    ls.release(owner="Z")
    vl.settle()
    assert whole.result() == frozenset({"a", "b", "c"})


# -- stateful ------------------------------------------------------------------------------

OWNERS = [f"o{i}" for i in range(5)]
UNIVERSE = [f"m{i}" for i in range(8)]
INITIAL = UNIVERSE[:5]
TIMEOUTS = st.sampled_from([None, 0.0, 1.0, 2.5])


@dataclass
class Acquire:
    """An acquire in flight."""

    owner: str
    names: tuple[str, ...] | None  # None: ALL_SET
    shared: bool
    deadline: float
    task: asyncio.Task[frozenset[str] | None]
    removes_before: int  # len(removal log) when it started
    removing: frozenset[str]  # names of removals still running when it started
    missing: bool  # a named member did not exist when it started


@dataclass
class Change:
    """An add or remove in flight (by an owner that held nothing)."""

    owner: str
    add: bool
    names: tuple[str, ...]
    acquired: bool
    shared: bool
    task: asyncio.Task[object]


class LockSetMachine(RuleBasedStateMachine):
    """Random owners drive one LockSet; see the module docstring for what is checked."""

    def __init__(self) -> None:
        super().__init__()
        self.vl = VirtualLoop()
        self.ls = LockSet(INITIAL, "s")
        self.acquiring: dict[str, Acquire] = {}
        self.changing: dict[str, Change] = {}
        self.holding: dict[str, dict[str, bool]] = {}  # owner -> member -> shared?
        self.whole: dict[str, bool] = {}  # owner -> shared? for whole-set holders
        #: For each whole-set holder, the members that may exist: what it got, plus what
        #: it added itself. Nobody else can add under it.
        self.whole_names: dict[str, set[str]] = {}
        self.removals: list[tuple[str, ...]] = []

    def teardown(self) -> None:
        try:
            self._drain()
        finally:
            self.vl.close()

    # -- helpers ----------------------------------------------------------------------

    def _idle(self, owner: str) -> bool:
        return not (owner in self.acquiring or owner in self.changing
                    or owner in self.holding or owner in self.whole)

    def _forget(self, owner: str) -> None:
        self.holding.pop(owner, None)
        self.whole.pop(owner, None)
        self.whole_names.pop(owner, None)

    def _step(self) -> None:
        """Settle the loop, then account for every call that finished."""
        self.vl.settle()
        for owner, change in list(self.changing.items()):
            if not change.task.done():
                continue
            del self.changing[owner]
            assert not change.task.cancelled()
            error = change.task.exception()
            assert error is None, f"unexpected error from {owner}'s change: {error!r}"
            if change.add:
                assert change.task.result() is None
                if change.acquired:
                    self.holding[owner] = dict.fromkeys(change.names, change.shared)
            else:
                removed = change.task.result()
                assert isinstance(removed, list)
                # Names are looked up as the call gets to them, so a member added
                # meanwhile may be removed too; but only names it was asked for.
                assert set(removed) <= set(change.names), (removed, change)
                assert len(set(removed)) == len(removed)
        for owner, req in list(self.acquiring.items()):
            if not req.task.done():
                continue
            del self.acquiring[owner]
            if req.task.cancelled():
                event("acquire cancelled")
                continue
            error = req.task.exception()
            if isinstance(error, LockDeletedError):
                event("named acquire: member deleted")
                assert req.names is not None, "ALL_SET must skip removed members"
                assert any(n in str(error) for n in req.names), str(error)
                later = {n for names in self.removals[req.removes_before:] for n in names}
                assert req.missing or (req.removing | later) & set(req.names), (
                    "LockDeletedError although none of the members was removed")
                continue
            assert error is None, f"unexpected error from {owner}'s acquire: {error!r}"
            got = req.task.result()
            assert not req.missing, "acquire of a missing member succeeded"
            event(f"acquire {'ALL_SET' if req.names is None else 'named'}: "
                  f"{'timed out' if got is None else 'granted'}")
            if got is None:
                assert req.deadline <= self.vl.now, "timed out before its deadline"
                continue
            assert isinstance(got, frozenset)
            if req.names is None:
                # Nobody can add under a whole-set holder, or remove what it holds.
                assert got == frozenset(self.ls.names())
                self.whole[owner] = req.shared
                self.whole_names[owner] = set(got)
            else:
                assert got == frozenset(req.names)
            if got:
                self.holding[owner] = dict.fromkeys(got, req.shared)

    def _drain(self) -> None:
        stalled = 0
        for _ in range(200):
            holders = sorted(set(self.holding) | set(self.whole))
            for owner in holders:
                self.ls.release(owner=owner)
                self._forget(owner)
            running = len(self.acquiring) + len(self.changing)
            self._step()
            if not (self.acquiring or self.changing or self.holding or self.whole):
                break
            self.vl.advance(100.0)
            self._step()
            # Nothing to release and nobody finished although every timeout ran out:
            # whoever still waits, waits forever.
            progress = holders or len(self.acquiring) + len(self.changing) < running
            stalled = 0 if progress else stalled + 1
            if stalled >= 3:
                break
        assert not self.acquiring and not self.changing, (
            f"calls never finished: {sorted(self.acquiring)} {sorted(self.changing)}")
        assert not self.holding and not self.whole
        _assert_free(self.ls)

    # -- rules ------------------------------------------------------------------------

    def _idlers(self) -> list[str]:
        return [o for o in OWNERS if self._idle(o)]

    def _holders(self) -> list[str]:
        return sorted(set(self.holding) | set(self.whole))

    def _acquire(
        self, data: st.DataObject, whole: bool, shared: bool, timeout: float | None,
    ) -> None:
        owner = data.draw(st.sampled_from(self._idlers()), label="owner")
        names: tuple[str, ...] | None = None
        if not whole:
            present = self.ls.names()
            pool = st.sampled_from(present) if present else st.sampled_from(UNIVERSE)
            # Now and then a name that is not (or no longer) a member.
            picked = data.draw(st.lists(st.one_of(*[pool] * 7, st.sampled_from(UNIVERSE)),
                                        min_size=1, max_size=4), label="names")
            names = tuple(picked)
        missing = names is not None and any(n not in self.ls for n in names)
        deadline = math.inf if timeout is None else self.vl.now + timeout
        removing = frozenset(
            n for c in self.changing.values() if not c.add for n in c.names)
        target: list[str] | AllSet = ALL_SET if names is None else list(names)
        task = self.vl.spawn(self.ls.acquire(target, shared=shared, timeout=timeout,
                                             owner=owner))
        self.acquiring[owner] = Acquire(owner, names, shared, deadline, task,
                                        len(self.removals), removing, missing)
        self._step()
        if missing:
            assert task.done() and isinstance(task.exception(), LockDeletedError)

    @precondition(lambda self: self._idlers())
    @rule(data=st.data(), shared=st.booleans(), timeout=TIMEOUTS)
    def acquire_named(self, data: st.DataObject, shared: bool, timeout: float | None) -> None:
        self._acquire(data, False, shared, timeout)

    @precondition(lambda self: self._idlers())
    @rule(data=st.data(), shared=st.booleans(), timeout=TIMEOUTS)
    def acquire_all(self, data: st.DataObject, shared: bool, timeout: float | None) -> None:
        self._acquire(data, True, shared, timeout)

    @precondition(lambda self: self._holders())
    @rule(data=st.data(), part=st.booleans())
    def release(self, data: st.DataObject, part: bool) -> None:
        owner = data.draw(st.sampled_from(self._holders()), label="owner")
        held = sorted(self.holding.get(owner, {}))
        if held and part:
            some = data.draw(st.lists(st.sampled_from(held), min_size=1, unique=True),
                             label="part")
            self.ls.release(some, owner=owner)
            self.whole.pop(owner, None)
            self.whole_names.pop(owner, None)
            for name in some:
                del self.holding[owner][name]
            if not self.holding[owner]:
                del self.holding[owner]
        else:
            self.ls.release(owner=owner)
            self._forget(owner)
        self._step()

    @rule(seconds=st.sampled_from([0.5, 0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.vl.advance(seconds)
        self._step()

    @precondition(lambda self: self.acquiring)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.acquiring)), label="owner")
        req = self.acquiring[owner]
        req.task.cancel()
        self._step()
        assert req.task.done()

    @precondition(lambda self: self._idlers() or False in self.whole.values())
    @rule(data=st.data(), add=st.booleans(), acquired=st.booleans(), shared=st.booleans())
    def change(self, data: st.DataObject, add: bool, acquired: bool, shared: bool) -> None:
        """An idle owner adds or removes members; a whole-set exclusive holder adds."""
        exclusive = [o for o, sh in self.whole.items() if not sh]
        owner = data.draw(st.sampled_from(self._idlers() + exclusive), label="owner")
        if not add and owner not in exclusive:
            names = data.draw(st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=2,
                                       unique=True), label="names")
            task = self.vl.spawn(self.ls.remove(names, owner=owner))
            self.changing[owner] = Change(owner, False, tuple(names), False, False, task)
            self.removals.append(tuple(names))
            self._step()
            return
        adding = {n for c in self.changing.values() if c.add for n in c.names}
        fresh = [n for n in UNIVERSE if n not in self.ls and n not in adding]
        if not fresh:
            return
        name = data.draw(st.sampled_from(fresh), label="name")
        if owner in exclusive:
            # A whole-set exclusive holder adds at once.
            self.vl.run(self.ls.add(name, acquired=acquired, shared=shared, owner=owner))
            self.whole_names[owner].add(name)
            if acquired:
                self.holding.setdefault(owner, {})[name] = shared
            self._step()
            return
        task = self.vl.spawn(self.ls.add(name, acquired=acquired, shared=shared, owner=owner))
        self.changing[owner] = Change(owner, True, (name,), acquired, shared, task)
        self._step()

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def holders_agree_with_the_model(self) -> None:
        members = _members(self.ls)
        assert sorted(members) == self.ls.names()
        for name, info in members.items():
            assert info.mode in (None, "shared", "exclusive"), (name, info)
            if info.mode == "exclusive":
                assert len(info.holders) == 1, f"exclusive among others on {name}: {info}"
            assert bool(info.holders) == (info.mode is not None), info
        set_info = self.ls.info()[0]
        if set_info.mode == "exclusive":
            assert len(set_info.holders) == 1
        whole_acquirers = {o for o, r in self.acquiring.items() if r.names is None}
        for owner, allowed in self.whole_names.items():
            assert set(members) <= allowed, f"members appeared under {owner}'s whole set"
        assert set(self.whole) <= set(set_info.holders) <= set(self.whole) | whole_acquirers
        for owner in OWNERS:
            held = {n for n, info in members.items() if owner in info.holders}
            if owner in self.acquiring:
                continue
            assert held == set(self.holding.get(owner, {})), (owner, held, self.holding)
            assert self.ls.list_owned(owner=owner) == held
            for name in held:
                expected = "shared" if self.holding[owner][name] else "exclusive"
                assert members[name].mode == expected, (owner, name, members[name])
            assert self.ls.owns_all(owner=owner) == (owner in self.whole)
            if owner in self.whole:
                assert self.ls.owns_all(self.whole[owner], owner=owner)
                assert not self.ls.owns_all(not self.whole[owner], owner=owner)
            assert self.ls.is_owned(owner=owner) == bool(held or owner in self.whole)

    @invariant()
    def running_acquisitions_hold_a_sorted_prefix(self) -> None:
        members = _members(self.ls)
        for owner, req in self.acquiring.items():
            held = sorted(n for n, info in members.items() if owner in info.holders)
            wanted = self.ls.names() if req.names is None else sorted(set(req.names))
            reachable = [n for n in wanted if n in members]
            assert held == reachable[:len(held)], (
                f"{owner} holds {held} while acquiring {wanted} in order")
            for name in held:
                assert members[name].mode == ("shared" if req.shared else "exclusive")
            if req.names is not None:
                assert owner not in self.ls.info()[0].holders
            assert self.ls.list_owned(owner=owner) == frozenset()

    @invariant()
    def every_running_call_waits_in_exactly_one_queue(self) -> None:
        queued: dict[str, int] = {}
        for info in self.ls.info():
            for entry in info.pending:
                for o in entry.owners:
                    queued[o] = queued.get(o, 0) + 1
            if info.pending:
                top = info.pending[0]
                if top.mode == "exclusive":
                    assert info.holders, f"exclusive waiter on top of free {info.name}"
                else:
                    assert info.mode == "exclusive", f"shared waiter stuck on {info.name}"
        running = set(self.acquiring) | set(self.changing)
        assert set(queued) == running, (queued, running)
        assert all(count == 1 for count in queued.values()), queued
        for req in self.acquiring.values():
            assert req.deadline > self.vl.now, f"{req.owner} waits past its deadline"


LockSetMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None)
TestLockSetMachine = LockSetMachine.TestCase
