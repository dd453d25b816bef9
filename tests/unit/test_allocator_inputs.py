"""Reading the allocator's inputs: the htools text format (good files read back as
written, bad ones refused naming the line and the field), instance policies, and
the htools' command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.allocator.model import Instance
from corral.allocator.policy import matches_policy
from corral.allocator.request import RequestError, parse
from corral.allocator.textformat import TextFormatError, haskell_double, serialize
from corral.allocator.textformat import parse as parse_text
from corral.allocator.types import FailMode, IPolicy, ISpec, MinMaxISpecs
from corral.cli.htools.options import UsageError, ValueProblem
from corral.cli.htools.options import parse as parse_argv

DATA = Path(__file__).resolve().parent.parent / "data" / "allocator"

GOOD = """g1|uuid-1|preferred||
g2|uuid-2|last_resort|t1,t2|

n1|65536|2048|60000|1048576|1000000|16|M|uuid-1|2||N|0|1|1.0
n2|65536|2048|65536|1048576|1048576|16|N|uuid-1
n3|?|?|?|?|?|?|N|uuid-2

i1|1024|10368|1|running|Y|n1|n2|drbd|a,b|1|-|N
i2|2048|10240|2|ADMIN_down|N|n2||plain|

htools:iextags:a

|1024,1,10240,1,1,1|128,1,1024,1,1,1;65536,16,1048576,16,8,16|drbd,plain|4.0|32.0
g2|1024,1,10240,1,1,1|128,1,1024,1,1,1;4096,2,20480,2,2,2|plain|2.0|8.0
"""


def test_text_file_is_read_with_htools_defaults_and_written_back() -> None:
    cluster = parse_text(GOOD)
    assert [g.name for g in cluster.groups] == ["g1", "g2"]
    n1, n2, n3 = cluster.nodes
    assert n1.is_master and (n1.t_mem, n1.f_mem, n1.t_sp) == (65536, 60000, 2)
    assert (n2.t_sp, n2.cpu_speed, n2.excl) == (1, 1.0, False)   # short line: defaults
    assert n3.offline and n3.t_mem == 0                          # "?": offline, no data
    i1, i2 = cluster.instances
    assert (i1.pnode, i1.snode, i1.tags, i1.spindle_use) == (0, 1, ("a", "b"), 1)
    assert (i2.auto_balance, i2.run_st, i2.spindle_use) == (False, "ADMIN_down", 1)
    assert cluster.tags == ["htools:iextags:a"]
    assert cluster.groups[1].ipolicy.vcpu_ratio == 2.0
    assert cluster.ipolicy.disk_templates == ("drbd", "plain")
    again = parse_text(serialize(cluster))
    assert serialize(again) == serialize(cluster)


def test_generated_file_round_trips() -> None:
    text = (DATA / "c100.data").read_text()
    written = serialize(parse_text(text))
    # the same fields, the CPU speed written as htools write it
    assert written == text.replace("|1.0\n", "|1.000000\n")
    assert serialize(parse_text(written)) == written


@pytest.mark.parametrize(("text", "message"), [
    ("g1|u1|preferred||\n\nn1|x|2048|1|1|1|1|N|u1\n\n\n\n",
     "line 3 (nodes): field 2 (t_mem) is 'x'; expected a number"),
    ("g1|u1|preferred||\n\nn1|1|2048|1.5|1|1|1|N|u1\n\n\n\n",
     "line 3 (nodes): field 4 (f_mem) is '1.5'; expected an integer"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u9\n\n\n\n",
     "line 3 (nodes): field 9 (group_uuid) is 'u9'; expected the UUID of a group"),
    ("g1|u1|sometimes||\n\n\n\n\n",
     "line 1 (node groups): field 3 (alloc_policy) is 'sometimes'; expected one of"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u1\n\ni1|1|1|1|running|Y|n9||plain|\n\n",
     "line 5 (instances): field 7 (pnode) is 'n9'; expected a node"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u1\n\ni1|1|1|1|fine|Y|n1||plain|\n\n",
     "line 5 (instances): field 5 (status) is 'fine'; expected one of"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u1\n\ni1|1|1|1|running|Y|n1||nfs|\n\n",
     "line 5 (instances): field 9 (disk_template) is 'nfs'; expected one of"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u1\n\ni1|1|1|1|running|Y|n1|n1|drbd|\n\n",
     "line 5 (instances): instance i1 has the same primary and secondary node n1"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u1\n\n\n\n|1,1,1|1,1,1,1,1,1;1,1,1,1,1,1"
     "|plain|4.0|32.0\n", "line 7 (instance policies): field 2 (std_spec) is '1,1,1'"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1|1|N|u1\n\n\n\nnope|1,1,1,1,1,1|"
     "1,1,1,1,1,1;1,1,1,1,1,1|plain|4.0|32.0\n",
     "line 7 (instance policies): field 1 (owner) is 'nope'"),
    ("g1|u1|preferred||\n\nn1|1|2048|1|1|1\n\n\n\n", "line 3 (nodes): 6 field(s)"),
    ("g1|u1|preferred||\n\n", "the file has 2 section(s)"),
])
def test_bad_text_file_names_line_and_field(text: str, message: str) -> None:
    with pytest.raises(TextFormatError) as err:
        parse_text(text)
    assert message in str(err.value)


def test_haskell_shows_floats_as_htools_write_them() -> None:
    assert [haskell_double(v) for v in (4.0, 32.0, 0.5, 0.05, 1e7, 123.25, 0.1)] == [
        "4.0", "32.0", "0.5", "5.0e-2", "1.0e7", "123.25", "0.1"]


POLICY = IPolicy((MinMaxISpecs(ISpec(128, 1, 1024, 1, 1, 1), ISpec(4096, 4, 20480, 2, 2, 2)),
                  MinMaxISpecs(ISpec(8192, 8, 1024, 1, 1, 1),
                               ISpec(16384, 16, 40960, 4, 2, 2))),
                 ISpec(1024, 1, 10240, 1, 1, 1), ("plain", "drbd"), 4.0, 32.0)


@pytest.mark.parametrize(("mem", "vcpus", "disks", "template", "expected"), [
    (1024, 1, ((10240, None),), "plain", None),
    (12288, 10, ((30000, None),), "drbd", None),          # within the second pair
    (64, 1, ((10240, None),), "plain", FailMode.MEM),      # below both: the first pair's
    (1024, 1, ((512, None),), "plain", FailMode.DISK),
    (1024, 6, ((10240, None),), "plain", FailMode.CPU),
    (1024, 1, ((2048, None), (2048, None), (2048, None)), "plain", FailMode.DISK_COUNT),
    (1024, 1, ((10240, None),), "file", FailMode.DISK),    # template not allowed
])
def test_instance_policy(mem: int, vcpus: int, disks: tuple[tuple[int, int | None], ...],
                         template: str, expected: FailMode | None) -> None:
    inst = Instance("i", mem, sum(d for d, _ in disks), vcpus, disk_template=template,
                    disks=disks)
    assert matches_policy(inst, POLICY) == expected


def test_request_errors_name_what_is_wrong() -> None:
    with pytest.raises(RequestError, match="key 'nodegroups' is missing"):
        parse({"request": {"type": "allocate"}})
    with pytest.raises(RequestError, match="Invalid request type 'grow'"):
        parse({"request": {"type": "grow"}, "nodegroups": {}, "nodes": {}, "instances": {},
               "cluster_tags": [], "enabled_hypervisors": []})


def test_options_parse_as_getopt() -> None:
    names = ("print-nodes", "print-commands", "text-data", "max-length", "verbose", "luxi",
             "group", "exec", "machine-readable")
    opts, args = parse_argv(["-vv", "-l5", "--text-data", "f", "-pname,fmem", "-C", "x",
                             "--max-l=7", "--luxi", "--machine-readable=no"], names)
    assert (opts.verbose, opts.max_length, opts.data_file) == (3, 7, "f")
    assert opts.print_nodes == ["name", "fmem"] and opts.print_commands == "-"
    assert opts.luxi == "" and opts.machine_readable is False and args == ["x"]
    with pytest.raises(UsageError, match="unrecognized option `--bogus'"):
        parse_argv(["--bogus"], names)
    with pytest.raises(UsageError, match="option `-l' requires an argument N"):
        parse_argv(["-l"], names)
    with pytest.raises(UsageError, match="doesn't allow an argument"):
        parse_argv(["--exec=1"], names)
    with pytest.raises(ValueProblem, match="max solution length: cannot parse string 'x'"):
        parse_argv(["-l", "x"], names)
