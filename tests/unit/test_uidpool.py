"""The user-id pool: its text syntax, editing, and handing out unused uids."""

from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import CorralError, ParameterError
from corral.uidpool import (
    UID_MAX,
    add_to_uid_pool,
    expand_uid_pool,
    format_uid_pool,
    format_uid_pool_file,
    is_uid_in_use,
    parse_uid_pool,
    read_uid_pool_file,
    release_uid,
    remove_from_uid_pool,
    request_unused_uid,
)

# -- syntax ------------------------------------------------------------------------


def test_parse_single_uids_and_ranges() -> None:
    assert parse_uid_pool("1000-5000,8000,9000-9010") == [(1000, 5000), (8000, 8000), (9000, 9010)]


def test_parse_tolerates_whitespace_and_empty_items() -> None:
    assert parse_uid_pool(" 9000 - 9010 ,, 1000 ,") == [(1000, 1000), (9000, 9010)]
    assert parse_uid_pool("") == []


def test_parse_sorts_and_drops_exact_duplicates_but_keeps_overlaps() -> None:
    assert parse_uid_pool("5-10,1-6,5-10,7") == [(1, 6), (5, 10), (7, 7)]


def test_parse_other_separator() -> None:
    assert parse_uid_pool("1000-1010\n2000\n", separator="\n") == [(1000, 1010), (2000, 2000)]


def test_parse_accepts_bounds() -> None:
    assert parse_uid_pool(f"0-{UID_MAX}") == [(0, UID_MAX)]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("1000,abc", "'abc'"),
        ("1-2-3", "'1-2-3'"),
        ("1000-", "'1000-'"),
        ("-5", "'-5'"),
        ("+5", "'+5'"),
        ("1.5", "'1.5'"),
    ],
)
def test_parse_errors_name_the_item_and_what_is_accepted(text: str, named: str) -> None:
    with pytest.raises(ParameterError) as info:
        parse_uid_pool(text)
    assert named in str(info.value)
    assert "low-high" in str(info.value)


def test_parse_refuses_reversed_range() -> None:
    with pytest.raises(ParameterError, match="2000-1000"):
        parse_uid_pool("2000-1000")


def test_parse_refuses_out_of_range() -> None:
    with pytest.raises(ParameterError, match="4294967296"):
        parse_uid_pool(f"1-{UID_MAX + 1}")


def test_format() -> None:
    assert format_uid_pool([(1000, 5000), (8000, 8000)]) == "1000-5000, 8000"
    assert format_uid_pool([]) == ""
    assert format_uid_pool([(1, 2), (3, 3)], separator="\n") == "1-2\n3"


def test_node_file_is_ganetis_ssconf_format(tmp_path: Path) -> None:
    # Ganeti 3.0 wrote "4000-4009\n5000\n" to ssconf_uid_pool for --uid-pool
    # 4000-4009,5000, and an empty file for an empty pool.
    assert format_uid_pool_file([(4000, 4009), (5000, 5000)]) == "4000-4009\n5000\n"
    assert format_uid_pool_file([]) == ""
    path = tmp_path / "ssconf_uid_pool"
    assert read_uid_pool_file(path) == []  # no file: the feature is off
    path.write_text("4000-4009\n5000\n")
    assert read_uid_pool_file(path) == [(4000, 4009), (5000, 5000)]
    path.write_text("")
    assert read_uid_pool_file(path) == []


ranges = st.tuples(st.integers(0, UID_MAX), st.integers(0, UID_MAX)).map(
    lambda pair: (min(pair), max(pair))
)


@given(st.lists(ranges, max_size=8))
def test_format_parse_round_trip(pool: list[tuple[int, int]]) -> None:
    normal = sorted(set(pool))
    assert parse_uid_pool(format_uid_pool(normal)) == normal
    assert parse_uid_pool(format_uid_pool(normal, "\n"), "\n") == normal


# -- editing -----------------------------------------------------------------------


def test_add_keeps_existing_and_sorts() -> None:
    pool = [(1000, 1999)]
    assert add_to_uid_pool(pool, [(500, 500), (1000, 1999)]) == [(500, 500), (1000, 1999)]
    assert pool == [(1000, 1999)], "the input is not modified"


def test_add_refuses_bad_range() -> None:
    with pytest.raises(ParameterError):
        add_to_uid_pool([], [(5, 1)])


def test_remove_exact_ranges() -> None:
    pool = [(500, 500), (1000, 1999)]
    assert remove_from_uid_pool(pool, [(500, 500)]) == [(1000, 1999)]
    assert remove_from_uid_pool(pool, [(500, 500), (1000, 1999)]) == []


def test_remove_part_of_a_range_is_refused() -> None:
    with pytest.raises(ParameterError, match="1000-1099"):
        remove_from_uid_pool([(1000, 1999)], [(1000, 1099)])


def test_remove_twice_is_refused() -> None:
    with pytest.raises(ParameterError, match="500"):
        remove_from_uid_pool([(500, 500)], [(500, 500), (500, 500)])


def test_expand() -> None:
    assert expand_uid_pool([(1, 3), (2, 5), (9, 9)]) == {1, 2, 3, 4, 5, 9}


# -- reservations ------------------------------------------------------------------

# Uids near the top of the range: nothing on a test machine runs with them.
FREE = 4_000_000_000


def test_uid_in_use_sees_our_own_process() -> None:
    assert is_uid_in_use(os.getuid())
    assert not is_uid_in_use(FREE)


def test_request_locks_and_unlock_keeps_the_lock_file(tmp_path: Path) -> None:
    reservation = request_unused_uid([(FREE, FREE + 2)], tmp_path)
    assert FREE <= reservation.uid <= FREE + 2
    assert reservation.locked
    assert (tmp_path / str(reservation.uid)).exists()
    reservation.unlock()
    assert not reservation.locked
    assert (tmp_path / str(reservation.uid)).exists(), "the file marks the uid as taken"
    release_uid(reservation.uid, tmp_path)
    assert not (tmp_path / str(reservation.uid)).exists()
    release_uid(reservation.uid, tmp_path)  # already gone: fine


def test_lock_directory_is_created(tmp_path: Path) -> None:
    lock_dir = tmp_path / "run" / "uid-pool"
    with request_unused_uid([(FREE, FREE)], lock_dir) as reservation:
        assert reservation.uid == FREE
    assert lock_dir.is_dir()


def test_used_uids_are_skipped(tmp_path: Path) -> None:
    mine = os.getuid()
    pool = [(mine, mine), (0, 0), (FREE, FREE)]
    for seed in range(5):
        with request_unused_uid(pool, tmp_path, rng=random.Random(seed)) as reservation:
            assert reservation.uid == FREE
        release_uid(FREE, tmp_path)


def test_only_used_uids_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CorralError, match="no unused user-id"):
        request_unused_uid([(os.getuid(), os.getuid())], tmp_path)


def test_empty_pool_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CorralError, match="empty"):
        request_unused_uid([], tmp_path)


def test_locked_uids_are_not_handed_out_twice(tmp_path: Path) -> None:
    pool = [(FREE, FREE + 2)]
    held = [request_unused_uid(pool, tmp_path) for _ in range(3)]
    assert sorted(r.uid for r in held) == [FREE, FREE + 1, FREE + 2]
    with pytest.raises(CorralError, match="no unused user-id"):
        request_unused_uid(pool, tmp_path)
    held[1].unlock()
    again = request_unused_uid(pool, tmp_path)
    assert again.uid == held[1].uid, "an unlocked uid with no process is reusable"
    for reservation in [*held, again]:
        reservation.release()


def test_uids_without_lock_file_come_first(tmp_path: Path) -> None:
    (tmp_path / str(FREE)).touch()
    for seed in range(5):
        with request_unused_uid([(FREE, FREE + 1)], tmp_path, rng=random.Random(seed)) as res:
            assert res.uid == FREE + 1
        release_uid(FREE + 1, tmp_path)


def test_failure_in_block_releases(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        request_unused_uid([(FREE, FREE)], tmp_path) as reservation,
    ):
        raise RuntimeError("the process did not start")
    assert not reservation.locked
    assert not (tmp_path / str(FREE)).exists()


def test_fake_proc_directory(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "status").write_text(f"Name:\tqemu\nUid:\t1\t{FREE}\t1\t1\nGid:\t1\t1\t1\t1\n")
    (proc / "self").mkdir()
    assert is_uid_in_use(FREE, proc)
    assert not is_uid_in_use(FREE + 1, proc)
    locks = tmp_path / "locks"
    with request_unused_uid([(FREE, FREE + 1)], locks, proc_dir=proc) as reservation:
        assert reservation.uid == FREE + 1


def test_lock_on_an_unlinked_file_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / str(FREE)
    real_flock = fcntl.flock
    calls: list[int] = []

    def racing_flock(fd: int, operation: int) -> None:
        real_flock(fd, operation)
        if not calls:
            # Another node process released the uid between our open and our lock.
            path.unlink()
            path.touch()
        calls.append(fd)

    monkeypatch.setattr(fcntl, "flock", racing_flock)
    with request_unused_uid([(FREE, FREE)], tmp_path) as reservation:
        assert len(calls) == 2, "the stale lock was dropped and the new file locked"
        assert reservation.locked
