"""The user-id pool: ranges of uids reserved for instance processes, and handing them out.

The cluster stores the pool as a sorted list of inclusive ``(low, high)`` ranges; a
single uid is a range with equal bounds. The text form, used on the command line
(``--uid-pool``, ``--add-uids``, ``--remove-uids``) and printed by ``gnt-cluster
info``, is a comma-separated list of uids and ``low-high`` ranges, for example
``1000-1999, 3000``.

Ranges are kept as the user gave them: overlapping or adjacent ranges are *not*
merged, only sorted and stripped of exact duplicates. This is what Ganeti does and it
matters for removal, which takes away exactly the ranges that were added (removing
``1000-1099`` from a pool holding ``1000-1999`` is an error, not a split).

On a node, :func:`request_unused_uid` hands out a uid that no process uses. It follows
the seed's algorithm: candidates in random order (uids without a lock file first),
for each an exclusive ``flock`` on ``<lock_dir>/<uid>`` taken without waiting, then a
scan of ``/proc`` for processes running with that uid. The lock is held until the
caller has started its process and calls :meth:`UidReservation.unlock`; the lock file
stays, marking the uid as probably taken, until :func:`release_uid` removes it when
the process has stopped. The guarantee only holds if every process using a pool uid
was started through a reservation.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from corral.errors import CorralError, ParameterError

__all__ = [
    "UID_MAX",
    "UID_MIN",
    "UidRange",
    "UidReservation",
    "add_to_uid_pool",
    "check_uid_pool",
    "expand_uid_pool",
    "format_uid_pool",
    "format_uid_pool_file",
    "is_uid_in_use",
    "normalize_uid_pool",
    "parse_uid_pool",
    "read_uid_pool_file",
    "release_uid",
    "remove_from_uid_pool",
    "request_unused_uid",
]

#: Smallest uid a pool may hold.
UID_MIN = 0
#: Largest uid a pool may hold (uids are 32-bit unsigned on Linux).
UID_MAX = 4294967295

#: One inclusive range of uids.
UidRange = tuple[int, int]

_ACCEPTED = "a uid or a range 'low-high' of uids between 0 and 4294967295"
_NUMBER = re.compile(r"[0-9]+")


def _parse_bound(item: str, text: str) -> int:
    bound = text.strip()
    if not _NUMBER.fullmatch(bound):
        raise ParameterError(f"invalid user-id pool entry {item!r}: expected {_ACCEPTED}")
    return int(bound)


def parse_uid_pool(text: str, separator: str = ",") -> list[UidRange]:
    """Parse a uid-pool definition such as ``"1000-1999, 3000"``.

    Items are separated by ``separator`` (a newline in files distributed to nodes);
    whitespace around items and bounds is ignored and empty items are skipped. The
    result is checked with :func:`check_uid_pool` and normalized.

    :raises ParameterError: naming the bad item and saying what is accepted.
    """
    ranges: list[UidRange] = []
    for raw in text.split(separator):
        item = raw.strip()
        if not item:
            continue
        parts = item.split("-")
        if len(parts) > 2:
            raise ParameterError(
                f"invalid user-id pool entry {item!r}: only one '-' is allowed;"
                f" expected {_ACCEPTED}"
            )
        low = _parse_bound(item, parts[0])
        high = _parse_bound(item, parts[-1])
        ranges.append((low, high))
    check_uid_pool(ranges)
    return normalize_uid_pool(ranges)


def _format_range(uid_range: UidRange) -> str:
    low, high = uid_range
    return str(low) if low == high else f"{low}-{high}"


def format_uid_pool(pool: Iterable[UidRange], separator: str = ", ") -> str:
    """Format a pool in the syntax :func:`parse_uid_pool` accepts (``"1000-1999, 3000"``)."""
    return separator.join(_format_range(r) for r in pool)


def format_uid_pool_file(pool: Iterable[UidRange]) -> str:
    """The pool as the file every node keeps (:attr:`corral.paths.Paths.uid_pool`):
    one item per line, as Ganeti's ``ssconf_uid_pool``; empty for an empty pool."""
    text = format_uid_pool(pool, separator="\n")
    return f"{text}\n" if text else ""


def read_uid_pool_file(path: Path) -> list[UidRange]:
    """The pool a node keeps in ``path``; empty (the feature is off) without the file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return parse_uid_pool(text, separator="\n")


def check_uid_pool(pool: Iterable[UidRange]) -> None:
    """Check that every range has ``low <= high`` and lies within 0..4294967295.

    :raises ParameterError: naming the offending range.
    """
    for low, high in pool:
        if low > high:
            raise ParameterError(
                f"invalid user-id range {low}-{high}: the lower bound is larger than the higher"
            )
        if low < UID_MIN or high > UID_MAX:
            raise ParameterError(
                f"invalid user-id range {_format_range((low, high))}: user-ids must be"
                f" between {UID_MIN}"
                f" and {UID_MAX}"
            )


def normalize_uid_pool(pool: Iterable[UidRange]) -> list[UidRange]:
    """Sort the ranges and drop exact duplicates; overlapping ranges are kept as given."""
    return sorted({(int(low), int(high)) for low, high in pool})


def add_to_uid_pool(pool: Iterable[UidRange], ranges: Iterable[UidRange]) -> list[UidRange]:
    """Return ``pool`` with ``ranges`` added (ranges already there are not repeated)."""
    added = list(ranges)
    check_uid_pool(added)
    return normalize_uid_pool([*pool, *added])


def remove_from_uid_pool(pool: Iterable[UidRange], ranges: Iterable[UidRange]) -> list[UidRange]:
    """Return ``pool`` without ``ranges``.

    Each range must be in the pool exactly as given; a range that is only covered by,
    or overlaps, a range of the pool is refused, as Ganeti does.

    :raises ParameterError: naming the first range that is not in the pool.
    """
    result = normalize_uid_pool(pool)
    for uid_range in ranges:
        key = (int(uid_range[0]), int(uid_range[1]))
        if key not in result:
            raise ParameterError(
                f"user-id range {_format_range(key)} is not in the user-id pool"
                f" ({format_uid_pool(result) or 'empty'}); only ranges exactly as they"
                " appear in the pool can be removed"
            )
        result.remove(key)
    return result


def expand_uid_pool(pool: Iterable[UidRange]) -> set[int]:
    """Every uid the pool holds. Costs memory in proportion to the number of uids."""
    uids: set[int] = set()
    for low, high in pool:
        uids.update(range(low, high + 1))
    return uids


# -- reservations ----------------------------------------------------------------

_UID_LINE = re.compile(r"^Uid:\s+(.*)$", re.MULTILINE)


def is_uid_in_use(uid: int, proc_dir: str | os.PathLike[str] = "/proc") -> bool:
    """Whether any process runs with ``uid`` as its real, effective, saved or fs uid.

    Reads the ``Uid:`` line of every ``<proc_dir>/<pid>/status``; processes that exit
    during the scan are ignored. Note that with ``/proc`` mounted ``hidepid`` an
    unprivileged caller cannot see other users' processes.
    """
    wanted = str(uid)
    for entry in os.scandir(proc_dir):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "status"), encoding="ascii") as status:
                content = status.read()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        match = _UID_LINE.search(content)
        if match and wanted in match.group(1).split():
            return True
    return False


class UidReservation:
    """A uid from the pool, locked for the caller.

    Start the process with :attr:`uid`, then call :meth:`unlock`. If starting failed,
    call :meth:`release` instead, which also removes the lock file and so returns the
    uid to the pool. Used as a context manager, it does exactly that: unlock on
    success, release if the block raises.
    """

    def __init__(self, uid: int, lock_path: Path, fd: int) -> None:
        self.uid = uid
        self.lock_path = lock_path
        self._fd: int | None = fd

    @property
    def locked(self) -> bool:
        """Whether this reservation still holds the exclusive lock."""
        return self._fd is not None

    def unlock(self) -> None:
        """Drop the lock but keep the lock file (the uid stays marked as taken)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor releases the flock

    def release(self) -> None:
        """Drop the lock and remove the lock file: the uid goes back to the pool."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)
        self.unlock()

    def __enter__(self) -> UidReservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.unlock()
        else:
            self.release()

    def __repr__(self) -> str:
        state = "locked" if self.locked else "unlocked"
        return f"<UidReservation uid={self.uid} {state}>"

    def __del__(self) -> None:
        # A forgotten reservation must not keep the descriptor (and lock) forever.
        if getattr(self, "_fd", None) is not None:
            self.unlock()


def _taken_uids(lock_dir: Path) -> set[int]:
    taken: set[int] = set()
    for name in os.listdir(lock_dir):
        if name.isdigit():
            taken.add(int(name))
    return taken


def _try_lock(path: Path) -> int | None:
    """Lock ``path`` exclusively without waiting; None if someone else holds it.

    A lock taken on a file that :func:`release_uid` unlinked meanwhile would guard
    nothing, so after locking the descriptor must still be the file at ``path``.
    """
    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                return None
            raise
        held = os.fstat(fd)
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (
            held.st_dev,
            held.st_ino,
        ):
            return fd
        os.close(fd)
    return None


def _candidates(pool: Iterable[UidRange], lock_dir: Path, rng: random.Random) -> Iterator[int]:
    all_uids = expand_uid_pool(pool)
    taken = all_uids & _taken_uids(lock_dir)
    free = list(all_uids - taken)
    marked = list(taken)
    rng.shuffle(free)
    rng.shuffle(marked)
    yield from free
    yield from marked


def request_unused_uid(
    pool: Iterable[UidRange],
    lock_dir: str | os.PathLike[str],
    *,
    proc_dir: str | os.PathLike[str] = "/proc",
    rng: random.Random | None = None,
) -> UidReservation:
    """Find a uid of ``pool`` that no process uses, lock it and return the reservation.

    ``lock_dir`` is created (mode 0755) if missing. Uids without a lock file are
    tried first, in random order, then the others; a uid whose lock another
    reservation holds, or which a running process uses, is skipped.

    :raises CorralError: when every uid of the pool is locked or in use, or the lock
        directory cannot be used.
    """
    ranges = list(pool)
    chooser = rng if rng is not None else random.SystemRandom()
    directory = Path(lock_dir)
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        candidates = list(_candidates(ranges, directory, chooser))
    except OSError as err:
        raise CorralError(f"cannot use the user-id pool lock directory {directory}: {err}") from err
    if not candidates:
        raise CorralError("the user-id pool is empty; set one with --uid-pool")
    for uid in candidates:
        path = directory / str(uid)
        try:
            fd = _try_lock(path)
        except OSError as err:
            raise CorralError(f"cannot lock {path} for user-id {uid}: {err}") from err
        if fd is None:
            continue
        if is_uid_in_use(uid, proc_dir):
            os.close(fd)
            continue
        return UidReservation(uid, path, fd)
    raise CorralError(
        f"no unused user-id left in the user-id pool"
        f" ({format_uid_pool(normalize_uid_pool(ranges))})"
    )


def release_uid(uid: int, lock_dir: str | os.PathLike[str]) -> None:
    """Return ``uid`` to the pool after its process stopped: remove its lock file.

    Does not check whether a process still runs with the uid. A missing lock file is
    not an error.
    """
    path = Path(lock_dir) / str(uid)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        raise CorralError(f"cannot remove the lock file of user-id {uid}: {err}") from err
