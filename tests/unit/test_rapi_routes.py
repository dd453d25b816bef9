"""The RAPI route table: Ganeti's paths are all there, entries are consistent, lookups work."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from corral.errors import NotFoundError
from corral.opcodes import REGISTRY
from corral.rapi.routes import ROUTES, find
from corral.rapi.shapes import JOB_ID
from corral.rapi.spec import ACCESS_LEVELS, METHODS, PATH_PARAMS, NotServed, Operation

README = Path(__file__).resolve().parents[2] / "README.md"

#: Ganeti 3.0's RAPI v2 resources and their methods (its documentation's list), with
#: path parameters written the way the table writes them.
GANETI_RESOURCES: dict[str, set[str]] = {
    "/": {"GET"},
    "/version": {"GET"},
    "/2": {"GET"},
    "/2/info": {"GET"},
    "/2/features": {"GET"},
    "/2/modify": {"PUT"},
    "/2/redistribute-config": {"PUT"},
    "/2/tags": {"GET", "PUT", "DELETE"},
    "/2/jobs": {"GET"},
    "/2/jobs/{job_id}": {"GET", "DELETE"},
    "/2/jobs/{job_id}/wait": {"GET"},
    "/2/filters": {"GET", "POST"},
    "/2/filters/{filter_uuid}": {"GET", "PUT", "DELETE"},
    "/2/nodes": {"GET"},
    "/2/nodes/{node_name}": {"GET"},
    "/2/nodes/{node_name}/powercycle": {"POST"},
    "/2/nodes/{node_name}/role": {"GET", "PUT"},
    "/2/nodes/{node_name}/evacuate": {"POST"},
    "/2/nodes/{node_name}/migrate": {"POST"},
    "/2/nodes/{node_name}/modify": {"POST"},
    "/2/nodes/{node_name}/storage": {"GET"},
    "/2/nodes/{node_name}/storage/modify": {"PUT"},
    "/2/nodes/{node_name}/storage/repair": {"PUT"},
    "/2/nodes/{node_name}/tags": {"GET", "PUT", "DELETE"},
    "/2/groups": {"GET", "POST"},
    "/2/groups/{group_name}": {"GET", "DELETE"},
    "/2/groups/{group_name}/modify": {"PUT"},
    "/2/groups/{group_name}/rename": {"PUT"},
    "/2/groups/{group_name}/assign-nodes": {"PUT"},
    "/2/groups/{group_name}/tags": {"GET", "PUT", "DELETE"},
    "/2/networks": {"GET", "POST"},
    "/2/networks/{network_name}": {"GET", "DELETE"},
    "/2/networks/{network_name}/connect": {"PUT"},
    "/2/networks/{network_name}/disconnect": {"PUT"},
    "/2/networks/{network_name}/modify": {"PUT"},
    "/2/networks/{network_name}/tags": {"GET", "PUT", "DELETE"},
    "/2/instances": {"GET", "POST"},
    "/2/instances-multi-alloc": {"POST"},
    "/2/instances/{instance_name}": {"GET", "DELETE"},
    "/2/instances/{instance_name}/info": {"GET"},
    "/2/instances/{instance_name}/reboot": {"POST"},
    "/2/instances/{instance_name}/shutdown": {"PUT"},
    "/2/instances/{instance_name}/startup": {"PUT"},
    "/2/instances/{instance_name}/reinstall": {"POST"},
    "/2/instances/{instance_name}/replace-disks": {"POST"},
    "/2/instances/{instance_name}/activate-disks": {"PUT"},
    "/2/instances/{instance_name}/deactivate-disks": {"PUT"},
    "/2/instances/{instance_name}/recreate-disks": {"POST"},
    "/2/instances/{instance_name}/disk/{disk_index}/grow": {"POST"},
    "/2/instances/{instance_name}/prepare-export": {"PUT"},
    "/2/instances/{instance_name}/export": {"PUT"},
    "/2/instances/{instance_name}/migrate": {"PUT"},
    "/2/instances/{instance_name}/failover": {"PUT"},
    "/2/instances/{instance_name}/rename": {"PUT"},
    "/2/instances/{instance_name}/modify": {"PUT"},
    "/2/instances/{instance_name}/console": {"GET"},
    "/2/instances/{instance_name}/tags": {"GET", "PUT", "DELETE"},
    "/2/os": {"GET"},
    "/2/query/{resource}": {"GET", "PUT"},
    "/2/query/{resource}/fields": {"GET"},
}

#: Resources the brief requires corral to serve (their operation exists in corral).
MUST_SERVE = {
    "/", "/version", "/2", "/2/info", "/2/features", "/2/modify", "/2/redistribute-config",
    "/2/tags", "/2/jobs",
    "/2/jobs/{job_id}", "/2/jobs/{job_id}/wait", "/2/filters", "/2/filters/{filter_uuid}",
    "/2/nodes", "/2/nodes/{node_name}", "/2/nodes/{node_name}/role",
    "/2/nodes/{node_name}/modify", "/2/nodes/{node_name}/tags", "/2/groups",
    "/2/groups/{group_name}", "/2/groups/{group_name}/modify",
    "/2/groups/{group_name}/rename", "/2/groups/{group_name}/assign-nodes",
    "/2/groups/{group_name}/tags", "/2/instances", "/2/instances/{instance_name}",
    *(f"/2/instances/{{instance_name}}/{suffix}" for suffix in (
        "info", "startup", "shutdown", "reboot", "reinstall", "rename", "modify", "migrate",
        "failover", "activate-disks", "deactivate-disks", "disk/{disk_index}/grow",
        "console", "tags", "recreate-disks", "replace-disks", "disk-status",
        "repair-disks")),
    "/2/nodes/{node_name}/storage", "/2/nodes/{node_name}/storage/modify",
    "/2/nodes/{node_name}/storage/repair",
    "/2/os", "/2/query/{resource}", "/2/query/{resource}/fields",
}

BY_PATH = {route.path: route for route in ROUTES}


def test_every_ganeti_resource_and_method_is_in_the_table() -> None:
    for path, methods in GANETI_RESOURCES.items():
        assert path in BY_PATH, path
        assert set(BY_PATH[path].methods) == methods, path
    extra = set(BY_PATH) - set(GANETI_RESOURCES)
    # corral's additions: its OpenAPI document, disk status and repair, and change-group
    # (Ganeti 3.0 has the opcode but no path for it)
    assert extra == {"/openapi.json", "/2/instances/{instance_name}/disk-status",
                     "/2/instances/{instance_name}/repair-disks",
                     "/2/instances/{instance_name}/change-group"}


def test_the_required_resources_are_served_with_every_ganeti_method() -> None:
    for path in MUST_SERVE:
        route = BY_PATH[path]
        assert set(route.served) == set(route.methods), path


def test_paths_are_unique_and_use_known_parameters() -> None:
    assert len(BY_PATH) == len(ROUTES)
    for route in ROUTES:
        assert route.path.startswith("/")
        assert set(route.params) <= set(PATH_PARAMS)
        assert set(route.methods) <= set(METHODS)
        assert route.doc


def test_operations_are_consistent() -> None:
    for route in ROUTES:
        for method, op in route.methods.items():
            if isinstance(op, NotServed):
                assert op.reason.startswith("corral has no"), (route.path, method)
                continue
            assert inspect.iscoroutinefunction(op.handler), (route.path, method)
            assert op.access in ACCESS_LEVELS
            assert op.summary
            names = [arg.name for arg in op.args]
            assert len(names) == len(set(names)), (route.path, method)
            assert "reason" in names, "every operation takes reason="
            if op.job:
                assert op.response is JOB_ID
            if method == "GET" and op.body is not None:
                assert route.path.endswith(("/wait", "/info", "/storage", "/disk-status")), \
                    route.path


def test_access_levels_follow_ganeti() -> None:
    def access(path: str, method: str) -> str:
        op = BY_PATH[path].methods[method]
        assert isinstance(op, Operation)
        return op.access

    # Writes need write; a few reads are protected too (Ganeti's exceptions).
    for route in ROUTES:
        for method, op in route.served.items():
            if method != "GET":
                assert op.access == "write" or route.path.startswith("/2/query/"), route.path
    assert access("/2/jobs/{job_id}/wait", "GET") == "write"
    assert access("/2/query/{resource}", "GET") == "read"
    assert access("/2/query/{resource}", "PUT") == "read"
    assert access("/2/instances/{instance_name}/console", "GET") == "read"
    # Listing storage units takes node locks in a job: Ganeti protects it.
    assert access("/2/nodes/{node_name}/storage", "GET") == "write"
    assert access("/2/info", "GET") == "public"
    assert access("/2/query/{resource}/fields", "GET") == "public"


@pytest.mark.parametrize(("path", "expected", "args"), [
    ("/", "/", {}),
    ("/2", "/2", {}),
    ("/2/instances", "/2/instances", {}),
    ("/2/instances/web1.example.com", "/2/instances/{instance_name}",
     {"instance_name": "web1.example.com"}),
    ("/2/instances/web1/disk/3/grow", "/2/instances/{instance_name}/disk/{disk_index}/grow",
     {"instance_name": "web1", "disk_index": "3"}),
    ("/2/jobs/17/wait", "/2/jobs/{job_id}/wait", {"job_id": "17"}),
    ("/2/query/node/fields", "/2/query/{resource}/fields", {"resource": "node"}),
    ("/2/filters/6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e", "/2/filters/{filter_uuid}",
     {"filter_uuid": "6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e"}),
    ("/2/instances-multi-alloc", "/2/instances-multi-alloc", {}),
])
def test_find_matches_paths(path: str, expected: str, args: dict[str, str]) -> None:
    route, found = find(path)
    assert route.path == expected
    assert found == args


@pytest.mark.parametrize("path", [
    "/2/instances/", "/3/info", "/2/jobs/abc", "/2/instances/a b", "/2/filters/not-a-uuid",
    "/2/instances/web1/disk/x/grow", "", "/2/info/extra", "/2/instances/web1\n",
    "/2/jobs/1\n/wait", "/2/nodes/node1.example.com\n",
])
def test_unknown_paths_are_not_found(path: str) -> None:
    with pytest.raises(NotFoundError, match="no resource at"):
        find(path)


def test_route_names_are_ganeti_handler_names() -> None:
    assert BY_PATH["/2/instances/{instance_name}/startup"].name == "instances_name_startup"
    assert BY_PATH["/2/groups/{group_name}/assign-nodes"].name == "groups_name_assign_nodes"
    assert BY_PATH["/2/jobs/{job_id}"].name == "jobs_id"
    assert BY_PATH["/2/tags"].name == "tags"
    assert BY_PATH["/"].name == "root"
    assert BY_PATH["/2"].name == "2"


def test_opcode_bodies_leave_out_what_the_url_sets() -> None:
    def body(path: str, method: str) -> dict[str, object]:
        op = BY_PATH[path].methods[method]
        assert isinstance(op, Operation) and op.body is not None
        return op.body.schema

    startup = body("/2/instances/{instance_name}/shutdown", "PUT")
    assert "instance_name" not in startup["properties"]
    assert "reason" not in startup["properties"] and "OP_ID" not in startup["properties"]
    assert "timeout" in startup["properties"]
    create = body("/2/instances", "POST")
    assert {"name", "os", "__version__", "disks", "disk_template"} <= set(create["properties"])
    assert "instance_name" not in create["properties"] and "os_type" not in create["properties"]
    assert set(create["required"]) == {"name", "__version__", "disks", "mode", "nics"}
    group = body("/2/groups/{group_name}/modify", "PUT")
    assert "group_name" not in group["properties"]
    only_depends = body("/2/instances/{instance_name}/startup", "PUT")
    assert set(only_depends["properties"]) == {"depends"}


def test_opcodes_used_by_handlers_are_implemented() -> None:
    source = "\n".join(
        Path(module.__file__ or "").read_text()
        for module in {inspect.getmodule(op.handler) for route in ROUTES
                       for op in route.served.values()}
    )
    used = set(re.findall(r'"(OP_[A-Z_]+)"', source)) - {"OP_ID"}  # the tag key
    assert used, "handlers name their opcodes"
    assert used <= set(REGISTRY)


def test_readme_lists_every_resource_not_served() -> None:
    text = README.read_text()
    section = text.split("## RAPI", 1)[1].split("\n## ", 1)[0]
    for route in ROUTES:
        for method, op in route.methods.items():
            if isinstance(op, NotServed):
                # Listed as "`/2/nodes/[node_name]/evacuate` (POST)".
                ganeti_path = re.sub(r"\{([a-z_]+)\}", r"[\1]", route.path)
                found = re.search(re.escape(f"`{ganeti_path}`") + r"\s+\(([A-Z, ]+)\)",
                                  section)
                assert found, f"README does not list {ganeti_path}"
                assert method in found.group(1).split(", "), (method, ganeti_path)
