"""What ``gnt-cluster verify`` reports: Ganeti's finding codes, their kinds and severities.

A finding is one line of a verify job's log: a severity (``ERROR`` or ``WARNING``), a
code such as ``ENODEVERSION``, the kind of item it is about (``cluster``, ``group``,
``node`` or ``instance``), the item's name and a message. The codes and kinds are
Ganeti's, so that scripts which grep verify's output or pass ``--ignore-errors CODE``
work unchanged; every code Ganeti defines is accepted (by ``-I`` and by the opcodes),
including those of checks corral has no use for (DRBD, SSH, hooks), which it simply
never reports.

Pure data, no msgspec: the command line loads it for its ``-I`` choices.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "CODES",
    "CODE_KINDS",
    "ERROR",
    "NPLUSONE_MEM",
    "OPTIONAL_CHECKS",
    "WARNING",
    "ErrorCode",
    "OptionalCheck",
    "Severity",
]

#: A finding's severity. Only errors make a verify job's result false (and the
#: command's exit code 1); ``--ignore-errors`` turns a code's errors into warnings.
Severity = Literal["ERROR", "WARNING"]
ERROR: Final = "ERROR"
WARNING: Final = "WARNING"

#: Every finding code Ganeti 3.0 defines (its ``CV_ALL_ECODES_STRINGS``), sorted.
ErrorCode = Literal[
    "ECLUSTERCERT", "ECLUSTERCFG", "ECLUSTERCLIENTCERT", "ECLUSTERDANGLINGINST",
    "ECLUSTERDANGLINGNODES", "ECLUSTERFILECHECK", "EEXTAGS", "EGROUPDIFFERENTPVSIZE",
    "EINSTANCEBADNODE", "EINSTANCEDOWN", "EINSTANCEFAULTYDISK", "EINSTANCELAYOUT",
    "EINSTANCEMISSINGCFGPARAMETER", "EINSTANCEMISSINGDISK", "EINSTANCEPOLICY",
    "EINSTANCESPLITGROUPS", "EINSTANCEUNSUITABLENODE", "EINSTANCEWRONGNODE", "ENODEDRBD",
    "ENODEDRBDHELPER", "ENODEDRBDVERSION", "ENODEFILECHECK", "ENODEFILESTORAGEPATHS",
    "ENODEFILESTORAGEPATHUNUSABLE", "ENODEGLUSTERSTORAGEPATHUNUSABLE", "ENODEHOOKS",
    "ENODEHV", "ENODELVM", "ENODEN1", "ENODENET", "ENODEOOBPATH", "ENODEORPHANINSTANCE",
    "ENODEORPHANLV", "ENODEOS", "ENODERPC", "ENODESETUP",
    "ENODESHAREDFILESTORAGEPATHUNUSABLE", "ENODESSH", "ENODETIME", "ENODEUSERSCRIPTS",
    "ENODEVERSION",
]

#: The codes, sorted (what ``-I`` accepts).
CODES: Final[tuple[str, ...]] = get_args(ErrorCode)

#: The kind of item each code is about, as Ganeti prints it in the finding (its
#: "object type"). Two codes about dangling references are ``node`` findings although
#: they name no node (Ganeti's choice, kept: scripts see the same text).
CODE_KINDS: Final[dict[str, str]] = {
    **dict.fromkeys(("ECLUSTERCERT", "ECLUSTERCFG", "ECLUSTERCLIENTCERT",
                     "ECLUSTERFILECHECK"), "cluster"),
    "EGROUPDIFFERENTPVSIZE": "group",
    **{code: "instance" for code in CODES if code.startswith("EINSTANCE")},
    **{code: "node" for code in CODES if code.startswith("ENODE")},
    **dict.fromkeys(("ECLUSTERDANGLINGINST", "ECLUSTERDANGLINGNODES", "EEXTAGS"), "node"),
}

#: A check that can be skipped (``skip_checks``); Ganeti has exactly this one.
OptionalCheck = Literal["nplusone_mem"]
NPLUSONE_MEM: Final = "nplusone_mem"
OPTIONAL_CHECKS: Final[tuple[str, ...]] = get_args(OptionalCheck)
