"""Fuzzing the master daemon's luxi socket (issue 18, deliverable 4).

What Hypothesis sends, on the fuzz testbed's master daemon:

* frames of random bytes and random JSON documents (not a request, a request with
  wrong types, unknown methods, extra keys, other versions);
* every read-only or harmless method with random arguments: wrong counts and types,
  numbers past 64 bits, query filters built from the query language's operators over
  real and unknown fields, job ids that cannot exist;
* jobs of opcodes with random parameters (``OP_TEST_DELAY`` with short delays, the
  dependencies, reason trails, priorities and comments every opcode takes, unknown
  ``OP_ID``\\ s);
* several requests in one write, one request split over many writes, a client that
  leaves mid-request, a request larger than the 64 MiB limit.

Every answer must be luxi's answer shape and, when it is a failure, a clear error
(a code and a message, never ``internal-error``); the same connection must then
still answer a valid request, and a new connection too (the daemon keeps serving).
Methods that change the cluster for everyone (drain flag, watcher pause, master
handover, filters) are left to their own tests: a random drain would make the rest
of the run test only the drain.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import TestbedHandle
from tests.fuzz.conftest import examples
from tests.fuzz.luxi_wire import EOM, VALID, LuxiConnection, assert_serves

pytestmark = pytest.mark.integration

#: Methods fuzzed with random arguments (the rest change what every client sees).
METHODS = ("QueryClusterInfo", "QueryConfigValues", "QueryTags", "WaitForJobChange",
           "CancelJob", "ArchiveJob", "AutoArchiveJobs", "ChangeJobPriority", "QueryJobs",
           "Query", "QueryFields", "QueryFilters", "DeleteFilter", "SubmitJob",
           "SubmitManyJobs")
RESOURCES = ("instance", "node", "group", "os", "job", "filter", "lock", "network",
             "cluster", "export", "")
FIELDS = ("name", "uuid", "status", "id", "pnode", "oper_state", "tags", "ops",
          "summary", "received_ts", "admin_state", "beparams", "disk.sizes", "nic.macs",
          "ctotal", "mfree", "priority", "watermark", "valid", "")
OPERATORS = ("==", "=", "!=", "<", "<=", ">", ">=", "=~", "=[]")

# JSON values, with the edges msgspec and SQLite care about: numbers past 64 bits,
# negative zero, long and non-ASCII strings, deep nesting.
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=2**63 - 2, max_value=2**70),
    st.integers(min_value=-(2**70), max_value=-(2**63) + 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), st.sampled_from(["", "0", "-1", "1e999", "99999999999999999999999",
                                           "\x00", "name", "é", "\u2028", "\udcff"]),
)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
job_ids = st.one_of(st.integers(min_value=-2, max_value=30),
                    st.integers(min_value=2**63 - 2, max_value=2**70),
                    st.sampled_from(["1", "99999999999999999999999", "-1", "x", "", " 1"]))
field_lists = st.lists(st.one_of(st.sampled_from(FIELDS), st.text(max_size=6)), max_size=4)


def _filters(names: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """Query filters over the fields ``names`` gives (and some that are no fields)."""
    field = st.one_of(names, names, st.sampled_from(FIELDS), st.text(max_size=5), scalars)
    leaf = st.one_of(
        st.tuples(st.sampled_from(OPERATORS), field, json_values).map(list),
        st.tuples(st.just("?"), field).map(list),
        st.lists(json_values, max_size=3),
        scalars,
    )
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(st.just("!"), inner).map(list),
        st.tuples(st.sampled_from(("&", "|")), st.lists(inner, max_size=3)).map(
            lambda t: [t[0], *t[1]]),
    ), max_leaves=8)


reason_trails = st.one_of(json_values, st.lists(st.tuples(
    st.sampled_from(["user", "gnt:client:x", "gnt:opcode:x", "other", ""]),
    st.text(max_size=10), st.one_of(st.integers(), st.floats(allow_nan=False),
                                    st.text(max_size=3))).map(list), max_size=3))
depends = st.one_of(json_values, st.lists(st.tuples(
    job_ids, st.lists(st.sampled_from(["success", "error", "canceled", "running", ""]),
                      max_size=3)).map(list), max_size=3))


def _opcodes() -> st.SearchStrategy[Any]:
    common = st.fixed_dictionaries({}, optional={
        "reason": reason_trails, "priority": st.one_of(st.integers(-30, 30), json_values),
        "depends": depends, "comment": json_values, "dry_run": json_values,
        "debug_level": json_values, "surprise": json_values,
    })
    delay = st.fixed_dictionaries(
        {"OP_ID": st.just("OP_TEST_DELAY"),
         "duration": st.one_of(st.floats(min_value=0, max_value=0.05), json_values)},
        optional={"repeat": st.one_of(st.integers(0, 2), json_values),
                  "on_nodes": json_values, "on_master": json_values,
                  "on_node_uuids": json_values, "interruptible": json_values,
                  "no_locks": json_values})
    other = st.fixed_dictionaries({"OP_ID": st.one_of(
        st.sampled_from(["OP_INSTANCE_STARTUP", "OP_INSTANCE_SHUTDOWN", "OP_NOT_AN_OPCODE",
                         "", "OP_TEST_DELAY"]), json_values)},
        optional={"instance_name": json_values, "timeout": json_values})
    return st.one_of(st.tuples(delay, common), st.tuples(other, common)).map(
        lambda t: {**t[1], **t[0]}) | json_values


opcodes = _opcodes()

def _fields(real: dict[str, list[str]], what: str) -> st.SearchStrategy[list[str]]:
    """Lists of field names: mostly ``what``'s real ones (so that a request gets past
    the field check to what follows), some unknown."""
    names = real.get(what) or list(FIELDS)
    return st.lists(st.one_of(st.sampled_from(names), st.sampled_from(names),
                              st.sampled_from(FIELDS), st.text(max_size=6)), max_size=4)


def _query(real: dict[str, list[str]]) -> st.SearchStrategy[list[Any]]:
    def for_resource(what: str) -> st.SearchStrategy[list[Any]]:
        names = real.get(what) or list(FIELDS)
        return st.tuples(st.just(what), _fields(real, what),
                         _filters(st.sampled_from(names))).map(list)
    return st.sampled_from(RESOURCES).flatmap(for_resource)


def _arguments(method: str, real: dict[str, list[str]]) -> st.SearchStrategy[list[Any]]:
    """Arguments of ``method``'s shape, with random values; ``real`` has the real
    field names of each resource."""
    jobs = _fields(real, "job")
    shaped: dict[str, st.SearchStrategy[Any]] = {
        "QueryConfigValues": st.tuples(field_lists),
        "QueryTags": st.tuples(st.sampled_from(["cluster", "node", "instance", "nodegroup",
                                                "network", "x"]), json_values),
        # Short timeouts only: a valid wait on a live job lasts as long as it says.
        "WaitForJobChange": st.tuples(job_ids, jobs, json_values, json_values,
                                      st.floats(min_value=-1, max_value=0.2)),
        "CancelJob": st.tuples(job_ids),
        "ArchiveJob": st.tuples(job_ids),
        "AutoArchiveJobs": st.tuples(json_values, st.floats(min_value=-1, max_value=0.2)),
        "ChangeJobPriority": st.tuples(job_ids, st.one_of(st.integers(-40, 40),
                                                          json_values)),
        "QueryJobs": st.tuples(st.one_of(st.lists(job_ids, max_size=3), json_values), jobs),
        "Query": _query(real),
        "QueryFields": st.sampled_from(RESOURCES).flatmap(
            lambda what: st.tuples(st.just(what), st.one_of(st.none(), _fields(real, what)))),
        "QueryFilters": st.tuples(st.one_of(st.none(),
                                            st.lists(st.text(max_size=8), max_size=2)),
                                  _fields(real, "filter")),
        "DeleteFilter": st.tuples(json_values),
        "SubmitJob": st.tuples(st.lists(opcodes, max_size=3)),
        "SubmitManyJobs": st.tuples(st.lists(st.lists(opcodes, max_size=2), max_size=2)),
    }
    return shaped.get(method, st.just(())).map(list)


def _request(method: str, real: dict[str, list[str]]) -> st.SearchStrategy[dict[str, Any]]:
    """Requests for ``method``: mostly arguments of its shape, sometimes any list."""
    shaped = _arguments(method, real)
    return st.fixed_dictionaries({
        "method": st.just(method),
        "args": st.one_of(shaped, shaped, st.lists(json_values, max_size=5)),
    }, optional={"version": st.one_of(st.just(1), json_values)})


#: Documents that are rarely requests: keys missing, of the wrong types, or extra.
loose_requests = st.fixed_dictionaries({}, optional={
    "method": st.one_of(st.sampled_from(METHODS), st.text(max_size=12), json_values),
    "args": json_values, "version": json_values, "extra": json_values})


def _encode(value: Any) -> bytes:
    # Lone surrogates cannot be UTF-8: send them the way a broken client would.
    return json.dumps(value).encode("utf-8", "surrogatepass").replace(EOM, b"")


@pytest.fixture
def luxi_path(fuzz_testbed: TestbedHandle) -> Path:
    """The fuzz testbed master daemon's socket."""
    return fuzz_testbed.paths.master_socket


@pytest.fixture
def real_fields(luxi_path: Path) -> dict[str, list[str]]:
    """The field names of every resource, as the daemon lists them."""
    found: dict[str, list[str]] = {}
    with LuxiConnection(luxi_path) as conn:
        for what in RESOURCES:
            request = {"method": "QueryFields", "args": [what, None], "version": 1}
            answer = conn.call(_encode(request) + EOM)
            if answer is not None and answer["success"]:
                found[what] = [field["name"] for field in answer["result"]["fields"]]
    assert found.get("job") and found.get("instance"), found
    return found


def test_random_bytes(luxi_path: Path) -> None:
    """Frames of random bytes get a protocol error; the connection still serves."""
    with LuxiConnection(luxi_path) as conn:
        @examples(60)
        @given(frame=st.binary(max_size=300).map(lambda b: b.replace(EOM, b"")))
        def fuzz(frame: bytes) -> None:
            answer = conn.call(frame + EOM)
            assert answer is not None and not answer["success"], answer
            assert answer["result"]["code"] == "protocol-error", answer

        fuzz()
        assert conn.call(VALID) is not None
    assert_serves(luxi_path)


def _answers_then_serves(conn: LuxiConnection, document: Any) -> None:
    answer = conn.call(_encode(document) + EOM)
    assert answer is not None, f"connection closed after {document!r}"
    again = conn.call(VALID)
    assert again is not None and again["success"], again


def test_random_documents(luxi_path: Path) -> None:
    """Any JSON document gets an answer (a clear error unless it happened to be a
    valid request), and the connection serves the next request."""
    with LuxiConnection(luxi_path) as conn:
        @examples(60)
        @given(document=loose_requests | json_values)
        def fuzz(document: Any) -> None:
            _answers_then_serves(conn, document)

        fuzz()
    assert_serves(luxi_path)


@pytest.mark.parametrize("method", METHODS)
def test_method_arguments(luxi_path: Path, real_fields: dict[str, list[str]],
                          method: str) -> None:
    """Each harmless method with random arguments gets an answer (a clear error unless
    the arguments happened to be valid), and the connection serves the next request."""
    with LuxiConnection(luxi_path) as conn:
        @examples(25)
        @given(document=_request(method, real_fields))
        def fuzz(document: Any) -> None:
            _answers_then_serves(conn, document)

        fuzz()
    assert_serves(luxi_path)


def test_framing(luxi_path: Path) -> None:
    """Requests split at random points and several in one write are each answered, in
    order."""
    @examples(25)
    @given(cuts=st.lists(st.integers(min_value=1, max_value=len(VALID) * 3 - 1),
                         max_size=6, unique=True))
    def fuzz(cuts: list[int]) -> None:
        data = VALID * 3
        with LuxiConnection(luxi_path) as conn:
            start = 0
            for cut in [*sorted(cuts), len(data)]:
                conn.send(data[start:cut])
                start = cut
            for _ in range(3):
                answer = conn.answer()
                assert answer is not None and answer["success"], answer

    fuzz()


def test_client_leaves_mid_request(luxi_path: Path) -> None:
    """A client that closes (or half-closes) its connection in the middle of a request
    leaves a daemon that still serves."""
    for how in ("close", "shutdown"):
        with LuxiConnection(luxi_path) as conn:
            conn.send(VALID[:10])
            if how == "shutdown":
                conn.sock.shutdown(socket.SHUT_WR)
                assert conn.answer() is None
    assert_serves(luxi_path)


def test_oversized_request(luxi_path: Path) -> None:
    """A request past the 64 MiB limit is refused with a protocol error naming the
    size, the connection is closed, and the daemon keeps serving."""
    from corral.luxi.framing import MAX_MESSAGE_BYTES

    with LuxiConnection(luxi_path) as conn:
        chunk = b" " * (1 << 20)
        sent = 0
        try:
            while sent <= MAX_MESSAGE_BYTES + len(chunk):
                conn.send(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon refused and closed while the rest was being sent
        answer = conn.answer()
    assert answer is not None and not answer["success"], answer
    assert answer["result"]["code"] == "protocol-error", answer
    assert "too large" in answer["result"]["message"], answer
    assert_serves(luxi_path)
