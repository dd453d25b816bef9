"""One administrator's RAPI session, driven through Ganeti's own Python RAPI client.

Run under the system interpreter, where Debian's ``ganeti-3.0`` package puts the
client (``/usr/share/ganeti/3.0/ganeti/rapi/client.py``, on pycurl; the small
``python3-ganeti-rapi`` package ships the same file in dist-packages)::

    /usr/bin/python3 tests/integration/rapi_session.py --url https://127.0.1.1:PORT \\
        --user admin --password-file FILE --cafile CA.pem

It looks at the cluster (version, features, info, OS list, nodes, groups), runs an
instance through its life (create, start, console, reboot, stop, reinstall, modify,
rename, tags, remove), takes a node group through its life, tags the cluster and a
node, round-trips a job filter, has a job canceled by a REJECT filter at submission
and follows it to ``canceled``, sends a query argument the resource does not take (it
is ignored), follows every job the way scripts do
(``WaitForJobChange``, once ``WaitForJobCompletion``), lists and cancels jobs, and
queries nodes and instances with and without a filter. It prints one JSON report of
what it saw. On the first failure it prints the report so far, then the failing step
and the error on stderr, and exits 1. It imports nothing of corral:
it must work as any admin's script does, against any Ganeti-compatible RAPI.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

GANETI_LIB = "/usr/share/ganeti/3.0"
FINAL = ("success", "error", "canceled")


class SessionError(Exception):
    """What the session saw differs from what Ganeti's RAPI documents."""


def load_client_module() -> Any:
    """``ganeti.rapi.client`` (standalone: pycurl + simplejson) from Debian's ganeti-3.0,
    or else from python3-ganeti-rapi, which ships the same file in dist-packages."""
    if GANETI_LIB not in sys.path:
        sys.path.insert(0, GANETI_LIB)
    return importlib.import_module("ganeti.rapi.client")


class Session:
    """The client, the report and the step being run."""

    def __init__(self, rapi: Any, client: Any, job_timeout: float) -> None:
        self.rapi = rapi
        self.client = client
        self.job_timeout = job_timeout
        self.report: dict[str, Any] = {"jobs": {}}
        self.step = "start"

    @contextmanager
    def running(self, step: str) -> Iterator[None]:
        """Name the step for the failure message."""
        self.step = step
        yield

    def expect(self, condition: bool, message: str) -> None:
        """Fail the step unless ``condition`` holds."""
        if not condition:
            raise SessionError(message)

    def wait(self, job_id: Any, what: str) -> dict[str, Any]:
        """Follow a job with WaitForJobChange until it ends; it must succeed."""
        self.expect(str(job_id).isdigit(), f"{what}: expected a job id, got {job_id!r}")
        deadline = time.monotonic() + self.job_timeout
        previous: Any = None
        serial: Any = None
        status = None
        while time.monotonic() < deadline:
            change = self.client.WaitForJobChange(job_id, ["status"], previous, serial)
            if change is None:  # nothing changed within the server's wait period
                continue
            self.expect(isinstance(change, dict) and "job_info" in change
                        and "log_entries" in change,
                        f"{what}: /2/jobs/{job_id}/wait answered {change!r}, expected"
                        " {'job_info': [...], 'log_entries': [...]}")
            previous = change["job_info"]
            for entry in change["log_entries"] or []:
                serial = entry[0]
            status = previous[0]
            if status in FINAL:
                break
        job = self.client.GetJobStatus(job_id)
        self.report["jobs"][str(job_id)] = {"what": what, "status": job.get("status"),
                                           "opstatus": job.get("opstatus")}
        if job.get("status") != "success":
            raise SessionError(f"{what}: job {job_id} ended {job.get('status')!r}"
                               f" (last seen by wait: {status!r}): {job.get('opresult')!r}")
        return dict(job)

    def not_found(self, call: Callable[[], Any], what: str) -> int:
        """``call`` must fail with HTTP 404 and a Ganeti error body; return the code."""
        try:
            answer = call()
        except self.rapi.GanetiApiError as err:
            self.expect(err.code == 404, f"{what}: expected HTTP 404, got {err.code}: {err}")
            return int(err.code)
        except KeyError as err:
            # The client formats error bodies as "code message: explain"; a body
            # without those keys breaks it.
            raise SessionError(f"{what}: error body lacks the key {err}") from err
        raise SessionError(f"{what}: expected 404, got an answer: {answer!r}")


def look_around(s: Session) -> str:
    """Version, features, cluster info, OS list, nodes and groups; return a node name."""
    c = s.client
    with s.running("GET /version"):
        s.report["version"] = c.GetVersion()
        s.expect(s.report["version"] == 2, f"version {s.report['version']!r}, expected 2")
    with s.running("GET /2/features"):
        features = c.GetFeatures()
        s.report["features"] = features
        s.expect(s.rapi.INST_CREATE_REQV1 in features,
                 f"features {features!r} lack {s.rapi.INST_CREATE_REQV1!r}, without which"
                 " the client refuses to create instances")
    with s.running("GET /2/info"):
        info = c.GetInfo()
        missing = [k for k in ("name", "master", "software_version", "enabled_hypervisors",
                               "beparams", "hvparams") if k not in info]
        s.expect(not missing, f"/2/info lacks {missing}")
        s.report["info"] = {k: info[k] for k in ("name", "master", "enabled_hypervisors")}
    with s.running("GET /2/os"):
        s.report["os"] = c.GetOperatingSystems()
    with s.running("GET /2/nodes"):
        names = c.GetNodes()
        bulk = c.GetNodes(bulk=True)
        s.expect(sorted(names) == sorted(n["name"] for n in bulk),
                 f"/2/nodes {names} and /2/nodes?bulk=1 disagree")
        s.report["nodes"] = sorted(names)
        s.report["nodes_bulk_keys"] = sorted(bulk[0]) if bulk else []
    master = s.report["info"]["master"]
    with s.running(f"GET /2/nodes/{master}"):
        node = c.GetNode(master)
        s.expect(node.get("name") == master, f"GetNode({master!r}) gave {node.get('name')!r}")
        s.report["master_node"] = {k: node.get(k) for k in ("name", "role", "offline",
                                                             "master_candidate", "group.uuid")}
        s.report["master_role"] = c.GetNodeRole(master)
    with s.running("GET /2/groups"):
        groups = c.GetGroups()
        bulk_groups = c.GetGroups(bulk=True)
        s.expect(bool(groups), "no node group")
        group = c.GetGroup(groups[0])
        s.report["groups"] = groups
        s.report["group"] = {k: group.get(k) for k in ("name", "node_cnt", "node_list",
                                                       "alloc_policy")}
        s.expect(sorted(groups) == sorted(g["name"] for g in bulk_groups),
                 "/2/groups and /2/groups?bulk=1 disagree")
    with s.running("GET /2/instances/<unknown>"):
        s.report["unknown_instance_status"] = s.not_found(
            lambda: c.GetInstance("no-such-instance.testbed"), "GetInstance(unknown)")
    pnode = next((n for n in sorted(names) if n != master), master)
    return str(pnode)


def cluster_tags(s: Session) -> None:
    """Add, list and remove cluster tags; the add is followed by polling."""
    c = s.client
    tags = ["rapi-session", "owner:admin"]
    with s.running("PUT /2/tags"):
        job_id = c.AddClusterTags(tags)
        done = c.WaitForJobCompletion(job_id, period=0.2, retries=int(s.job_timeout / 0.2))
        s.report["jobs"][str(job_id)] = {"what": "add cluster tags",
                                         "status": c.GetJobStatus(job_id)["status"]}
        s.expect(done, f"WaitForJobCompletion({job_id}) gave {done!r}")
        after_add = sorted(c.GetClusterTags())
    with s.running("DELETE /2/tags"):
        s.wait(c.DeleteClusterTags(tags), "delete cluster tags")
        after_delete = sorted(c.GetClusterTags())
    s.report["cluster_tags"] = {"after_add": after_add, "after_delete": after_delete}


def instance_life(s: Session, pnode: str) -> None:
    """Create an instance and take it through start, reboot, stop, modify, rename,
    tags and removal."""
    c = s.client
    name, new_name = "rapi1.testbed", "rapi2.testbed"
    life: dict[str, Any] = {"name": name, "pnode": pnode}
    s.report["instance"] = life
    with s.running("POST /2/instances"):
        job = s.wait(c.CreateInstance(
            "create", name, "file", [{"size": 64}], [{}],
            os="corral-ext4+default", pnode=pnode, start=False,
            name_check=False, ip_check=False,
            beparams={"maxmem": 128, "minmem": 128, "vcpus": 1}),
            "create instance")
        life["create_result"] = job.get("opresult")
        inst = c.GetInstance(name)
        life["created"] = {k: inst.get(k) for k in (
            "name", "pnode", "os", "disk_template", "disk.sizes", "admin_state", "status",
            "beparams")}
        s.expect(name in c.GetInstances(), f"{name} not in /2/instances")
    with s.running(f"GET /2/instances/{name}/info"):
        job = s.wait(c.GetInstanceInfo(name), "instance info")
        result = job.get("opresult") or [None]
        life["info_keys"] = sorted(result[0].get(name, {})) if isinstance(result[0], dict) else []
    with s.running(f"PUT /2/instances/{name}/startup"):
        s.wait(c.StartupInstance(name), "start instance")
        life["after_start"] = c.GetInstance(name).get("status")
    with s.running(f"GET /2/instances/{name}/console"):
        console = c.GetInstanceConsole(name)
        life["console"] = {k: console.get(k) for k in ("instance", "kind")}
    with s.running(f"POST /2/instances/{name}/reboot"):
        s.wait(c.RebootInstance(name, reboot_type="hard"), "reboot instance")
        life["after_reboot"] = c.GetInstance(name).get("status")
    with s.running(f"PUT /2/instances/{name}/shutdown"):
        s.wait(c.ShutdownInstance(name), "stop instance")
        life["after_stop"] = c.GetInstance(name).get("status")
    with s.running(f"POST /2/instances/{name}/reinstall"):
        s.wait(c.ReinstallInstance(name, os="corral-ext4+default", no_startup=True),
               "reinstall instance")
        life["after_reinstall"] = c.GetInstance(name).get("status")
    with s.running(f"PUT /2/instances/{name}/modify"):
        # Values inside beparams may be strings and sizes, as Ganeti converts them.
        s.wait(c.ModifyInstance(name, beparams={"maxmem": "256M", "minmem": "256"}),
               "modify instance")
        life["beparams_after_modify"] = c.GetInstance(name).get("beparams")
    with s.running(f"PUT /2/instances/{name}/rename"):
        s.wait(c.RenameInstance(name, new_name, ip_check=False, name_check=False),
               "rename instance")
        life["renamed_to"] = c.GetInstance(new_name).get("name")
        life["old_name_status"] = s.not_found(lambda: c.GetInstance(name),
                                              "GetInstance(old name)")
    with s.running(f"PUT /2/instances/{new_name}/tags"):
        s.wait(c.AddInstanceTags(new_name, ["web", "tier:front"]), "add instance tags")
        added = sorted(c.GetInstanceTags(new_name))
        s.wait(c.DeleteInstanceTags(new_name, ["web"]), "delete instance tag")
        life["tags"] = {"after_add": added, "after_delete": sorted(c.GetInstanceTags(new_name))}
    with s.running("PUT /2/query/instance"):
        answer = c.Query("instance", ["name", "status", "pnode"],
                         ["=", "name", new_name])
        life["query"] = answer.get("data")
    with s.running(f"DELETE /2/instances/{new_name}"):
        s.wait(c.DeleteInstance(new_name), "remove instance")
        life["removed"] = new_name not in c.GetInstances()
        life["after_remove_status"] = s.not_found(lambda: c.GetInstance(new_name),
                                                  "GetInstance(removed)")


def failed_job(s: Session) -> None:
    """A body naming a node that does not exist is refused at submission (HTTP 400,
    no job); a job that fails: how its error is encoded, which scripts read to decide
    what to do (Ganeti: ``opresult`` holds ``[error class, [message, error code]]``,
    the codes being the client's ``ECODE_*``)."""
    c = s.client
    with s.running("POST /2/instances (unknown node)"):
        try:
            answer = c.CreateInstance("create", "broken.testbed", "diskless", [], [{}],
                                      os="corral-ext4+default", pnode="no-such-node.testbed",
                                      name_check=False, ip_check=False)
        except s.rapi.GanetiApiError as err:
            s.report["refused_create"] = {"code": err.code,
                                          "names_pnode": "'pnode'" in str(err)}
        else:
            raise SessionError(f"an unknown pnode was accepted: job {answer!r}")
    with s.running("PUT /2/instances/no-such-instance.testbed/startup"):
        job_id = c.StartupInstance("no-such-instance.testbed")
        deadline = time.monotonic() + s.job_timeout
        while (job := c.GetJobStatus(job_id))["status"] not in FINAL:
            s.expect(time.monotonic() < deadline, f"job {job_id} does not end")
            time.sleep(0.1)
        s.report["failed_job"] = {k: job.get(k) for k in ("status", "opstatus", "opresult")}


def groups_and_nodes(s: Session, node: str) -> None:
    """A node group's life (create, modify, rename, tags, remove) and node tags."""
    c = s.client
    out: dict[str, Any] = {}
    s.report["group_life"] = out
    with s.running("POST /2/groups"):
        s.wait(c.CreateGroup("rapi-group", alloc_policy="last_resort"), "create group")
        out["created"] = c.GetGroup("rapi-group").get("alloc_policy")
    with s.running("PUT /2/groups/rapi-group/modify"):
        s.wait(c.ModifyGroup("rapi-group", alloc_policy="unallocable"), "modify group")
        out["modified"] = c.GetGroup("rapi-group").get("alloc_policy")
    with s.running("PUT /2/groups/rapi-group/rename"):
        s.wait(c.RenameGroup("rapi-group", "rapi-group2"), "rename group")
        out["renamed"] = "rapi-group2" in c.GetGroups() and "rapi-group" not in c.GetGroups()
    with s.running("PUT /2/groups/rapi-group2/tags"):
        s.wait(c.AddGroupTags("rapi-group2", ["zone:a"]), "add group tags")
        out["tags"] = c.GetGroupTags("rapi-group2")
    with s.running("DELETE /2/groups/rapi-group2"):
        s.wait(c.DeleteGroup("rapi-group2"), "remove group")
        out["removed"] = "rapi-group2" not in c.GetGroups()
    with s.running(f"PUT /2/nodes/{node}/tags"):
        s.wait(c.AddNodeTags(node, ["rack:7"]), "add node tags")
        added = c.GetNodeTags(node)
        s.wait(c.DeleteNodeTags(node, ["rack:7"]), "delete node tags")
        s.report["node_tags"] = {"after_add": added, "after_delete": c.GetNodeTags(node)}


def filters(s: Session) -> None:
    """Add, read, replace and delete a job filter."""
    c = s.client
    predicates = [["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]]
    out: dict[str, Any] = {}
    s.report["filters"] = out
    with s.running("GET /2/filters"):
        out["before"] = c.GetFilters()
    with s.running("POST /2/filters"):
        # The library appends its own ["gnt:client", "", now] entry to the trail.
        uuid = c.AddFilter(10, predicates, "REJECT",
                           reason_trail=[["user", "session maintenance", 1]])
        s.expect(isinstance(uuid, str) and len(uuid) >= 32,
                 f"AddFilter returned {uuid!r}, expected the new filter's UUID")
        out["uuid"] = uuid
        got = c.GetFilter(uuid)
        out["added"] = {k: got.get(k) for k in ("uuid", "priority", "action", "predicates")}
        out["added_trail"] = [list(entry[:2]) for entry in got.get("reason_trail") or []]
        out["listed"] = uuid in c.GetFilters()
        out["listed_bulk"] = any(f.get("uuid") == uuid for f in c.GetFilters(bulk=True))
    with s.running(f"PUT /2/filters/{uuid}"):
        replaced = c.ReplaceFilter(uuid, 20, predicates, "ACCEPT")
        out["replace_returned"] = replaced
        got = c.GetFilter(uuid)
        out["replaced"] = {k: got.get(k) for k in ("uuid", "priority", "action")}
    with s.running(f"DELETE /2/filters/{uuid}"):
        c.DeleteFilter(uuid)
        out["after_delete"] = c.GetFilters()
        out["deleted_status"] = s.not_found(lambda: c.GetFilter(uuid), "GetFilter(deleted)")


def rejected_job(s: Session) -> None:
    """A job a REJECT filter matches at submission: it gets an id and ends canceled at
    once (the filter matches only this session's reason text, and is removed after)."""
    c = s.client
    out: dict[str, Any] = {}
    s.report["rejected"] = out
    why = "rapi-session rejected job"
    with s.running("POST /2/filters (REJECT)"):
        uuid = c.AddFilter(0, [["reason", ["=", "reason", why]]], "REJECT")
        out["uuid"] = uuid
    try:
        with s.running("PUT /2/tags (rejected)"):
            job_id = c.AddClusterTags(["rejected"], reason=why)
            s.expect(str(job_id).isdigit(), f"expected a job id, got {job_id!r}")
            deadline = time.monotonic() + s.job_timeout
            info: Any = None
            while (info is None or info[0] not in FINAL) and time.monotonic() < deadline:
                change = c.WaitForJobChange(job_id, ["status"], info, None)
                info = info if change is None else change["job_info"]
            job = c.GetJobStatus(job_id)
            out["job"] = {k: job.get(k) for k in ("status", "opstatus", "opresult")}
            out["tags"] = c.GetClusterTags()
    finally:
        with s.running(f"DELETE /2/filters/{uuid}"):
            c.DeleteFilter(uuid)


def unknown_query_argument(s: Session) -> None:
    """A query argument the resource does not take is ignored, as Ganeti ignores it."""
    with s.running("GET /2/info?no-remember=1"):
        info = s.client._SendRequest("GET", "/2/info", [("no-remember", 1)], None)
        s.report["unknown_argument_info_name"] = info.get("name")


def jobs_and_queries(s: Session) -> None:
    """List jobs (plain and bulk) and query nodes and their fields."""
    c = s.client
    with s.running("GET /2/jobs"):
        ids = c.GetJobs()
        bulk = c.GetJobs(bulk=True)
        s.report["job_list"] = sorted(ids)
        s.report["jobs_bulk_keys"] = sorted(bulk[0]) if bulk else []
        ours = sorted(int(j) for j in s.report["jobs"])
        s.expect(set(ours) <= set(ids), f"/2/jobs {sorted(ids)} lacks some of ours {ours}")
    with s.running(f"GET /2/jobs/{ours[0] if ours else 1}"):
        job = c.GetJobStatus(ours[0])
        s.report["job_keys"] = sorted(job)
    with s.running(f"DELETE /2/jobs/{ours[0]}"):
        # Cancelling a finished job is refused in the answer, not by an HTTP error.
        s.report["cancel_finished"] = c.CancelJob(ours[0])
    with s.running("PUT /2/query/node"):
        answer = c.Query("node", ["name", "role", "pinst_cnt"])
        s.report["query_nodes"] = answer
        rows = answer.get("data", [])
        s.report["query_node_names"] = sorted(row[0][1] for row in rows)
        one = c.Query("node", ["name"], ["=", "name", s.report["info"]["master"]])
        s.report["query_master_only"] = [row[0][1] for row in one.get("data", [])]
    with s.running("GET /2/query/node/fields"):
        fields = c.QueryFields("node", ["name", "role"])
        s.report["query_fields"] = [f.get("name") for f in fields.get("fields", [])]
        s.report["query_all_fields_count"] = len(c.QueryFields("node").get("fields", []))


def main() -> int:
    """Run the session; print the report; exit 1 on the first failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="https://HOST:PORT of the RAPI")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--cafile", required=True, help="CA certificate the server's chains to")
    parser.add_argument("--job-timeout", type=float, default=120.0)
    args = parser.parse_args()
    try:
        rapi = load_client_module()
    except ImportError as err:
        print(f"rapi_session: cannot import Ganeti's RAPI client: {err}", file=sys.stderr)
        return 2
    import pycurl  # present: the client module imports it

    url = urlsplit(args.url)
    with open(args.password_file) as handle:
        password = handle.read().strip()
    pycurl.global_init(pycurl.GLOBAL_ALL)
    try:
        client = rapi.GanetiRapiClient(
            url.hostname, port=url.port, username=args.user, password=password,
            # proxy="": a proxy from the environment must not see loopback requests.
            curl_config_fn=rapi.GenericCurlConfig(cafile=args.cafile, proxy="",
                                                  connect_timeout=10,
                                                  timeout=int(args.job_timeout)))
        session = Session(rapi, client, args.job_timeout)
        try:
            pnode = look_around(session)
            cluster_tags(session)
            instance_life(session, pnode)
            failed_job(session)
            groups_and_nodes(session, pnode)
            filters(session)
            rejected_job(session)
            unknown_query_argument(session)
            jobs_and_queries(session)
        except Exception as err:
            print(json.dumps(session.report, sort_keys=True, default=str))
            expected = (SessionError, rapi.GanetiApiError)
            detail = "" if isinstance(err, expected) else "\n" + traceback.format_exc()
            code = getattr(err, "code", None)
            print(f"rapi_session: step {session.step!r} failed: {type(err).__name__}"
                  f"{'' if code is None else f' (code {code})'}: {err}{detail}",
                  file=sys.stderr)
            return 1
        print(json.dumps(session.report, sort_keys=True, default=str))
        return 0
    finally:
        pycurl.global_cleanup()


if __name__ == "__main__":
    sys.exit(main())
