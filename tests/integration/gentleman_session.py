"""An administrator's session through gentleman, the Ganeti RAPI client on PyPI.

gentleman is installed into the test venv by ``make rapi-clients``
(``install_gentleman.py``: its release needs two missing files supplied and a Python 3
conversion). Its synchronous client, ``gentleman.sync.RequestsRapiClient``, speaks HTTPS
through ``requests`` without checking the certificate; every call is a function of
``gentleman.base`` taking the client first. It sends what a 2015 client sends: query
arguments corral does not take (``no-remember`` on startup and shutdown, ``dry-run`` on a
job cancel), booleans as ``0``/``1``, a JSON body on ``GET /2/jobs/[id]/wait``.

:func:`run` takes one instance through its life, tags it, cancels a finished job, and
has a job canceled by a REJECT filter at submission and follows it to ``canceled``, as
a script polling its jobs would. It asserts as it goes and returns what it saw. It
makes no call that fails: gentleman turns every answer but 200 into a TypeError of its
own (``NotOkayError`` gets its ``code`` twice), whatever the server.
"""

from __future__ import annotations

import importlib
import time
import warnings
from typing import Any

FINAL = ("success", "error", "canceled")


def missing() -> str | None:
    """Why gentleman cannot run here, or None."""
    try:
        importlib.import_module("gentleman.sync")
        importlib.import_module("gentleman.base")
    except (ImportError, SyntaxError) as err:
        return (f"gentleman is not installed ('make rapi-clients' installs it: "
                f"tests/integration/install_gentleman.py): {err}")
    return None


def _follow(base: Any, r: Any, job_id: Any, timeout: float = 120.0) -> dict[str, Any]:
    """Follow a job with WaitForJobChange (the body-on-GET call) until it ends."""
    assert str(job_id).isdigit(), f"expected a job id, got {job_id!r}"
    deadline = time.monotonic() + timeout
    previous: Any = None
    while time.monotonic() < deadline:
        change = base.WaitForJobChange(r, job_id, ["status"], previous, None)
        if change is not None:
            previous = change["job_info"]
            if previous[0] in FINAL:
                return dict(base.GetJobStatus(r, job_id))
    raise AssertionError(f"job {job_id} did not end within {timeout}s")


def _ok(base: Any, r: Any, job_id: Any, what: str) -> dict[str, Any]:
    job = _follow(base, r, job_id)
    assert job["status"] == "success", f"{what}: job {job_id} ended {job['status']}: {job}"
    return job


def run(host: str, port: int, user: str, password: str, pnode: str) -> dict[str, Any]:
    """The session against the RAPI at ``host:port``; what it saw."""
    sync = importlib.import_module("gentleman.sync")
    base = importlib.import_module("gentleman.base")
    seen: dict[str, Any] = {}
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    r = sync.RequestsRapiClient(host, port, user, password, timeout=60)
    r.start()  # GET /version, GET /2/features
    seen["version"], seen["features"] = r.version, list(r.features)
    seen["cluster"] = base.GetInfo(r)["name"]
    seen["nodes"] = sorted(base.GetNodes(r))
    seen["os"] = base.GetOperatingSystems(r)

    name = "gent1.testbed"
    _ok(base, r, base.CreateInstance(
        r, "create", name, "file", [{"size": 16}], [{}], os="corral-ext4+default", pnode=pnode,
        start=False, name_check=False, ip_check=False,
        beparams={"maxmem": 128, "minmem": 128, "vcpus": 1}), "create")
    seen["created"] = base.GetInstance(r, name)["status"]
    # StartupInstance and ShutdownInstance send no-remember, which Ganeti ignores.
    _ok(base, r, base.StartupInstance(r, name), "startup")
    seen["after_start"] = base.GetInstance(r, name)["status"]
    _ok(base, r, base.RebootInstance(r, name, reboot_type="soft"), "reboot")
    _ok(base, r, base.ShutdownInstance(r, name, timeout=30), "shutdown")
    seen["after_stop"] = base.GetInstance(r, name)["status"]
    _ok(base, r, base.ModifyInstance(r, name, beparams={"maxmem": 256, "minmem": 256}),
        "modify")
    seen["maxmem"] = base.GetInstance(r, name)["beparams"]["maxmem"]
    _ok(base, r, base.AddInstanceTags(r, name, ["gent:a", "gent:b"]), "add tags")
    seen["tags"] = sorted(base.GetInstanceTags(r, name))

    # A REJECT filter matching only this session's tag job: the job gets an id and ends
    # canceled at once, naming the filter (gentleman has no filter calls: its request).
    rule = r.request("post", "/2/filters", content={
        "priority": 0, "action": "REJECT",
        "predicates": [["opcode", ["&", ["=", "OP_ID", "OP_TAGS_SET"], ["=", "name", name]]]]})
    try:
        job_id = base.AddInstanceTags(r, name, ["gent:rejected"])
        rejected = _follow(base, r, job_id)
    finally:
        r.request("delete", f"/2/filters/{rule}")
    seen["rejected"] = {"status": rejected["status"], "opresult": rejected["opresult"],
                        "rule": rule}
    seen["tags_after_reject"] = sorted(base.GetInstanceTags(r, name))

    # Cancel a finished job: refused in the answer (dry-run is sent and ignored).
    seen["cancel_finished"] = base.CancelJob(r, job_id)
    seen["jobs_listed"] = int(job_id) in base.GetJobs(r)
    _ok(base, r, base.DeleteInstance(r, name), "remove")
    # Not GetInstance: gentleman's answer to any status but 200 is a TypeError of its
    # own (NotOkayError is given its code twice), under Python 2 as under 3.
    seen["listed_after_remove"] = name in base.GetInstances(r)
    return seen
