"""The /placement/ REST API without HTTP: microversion negotiation, routing and
microversion gates, body validation, error bodies and the shapes of each microversion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.placement import PlacementStore
from corral.placement.rest import PlacementRequest, PlacementResponse, handle, negotiate
from corral.placement.rest.protocol import HttpProblem

AGG = "11111111-1111-1111-1111-111111111111"
CONSUMER = "22222222-2222-2222-2222-222222222222"
RP = "33333333-3333-3333-3333-333333333333"


class Api:
    """One store and a way to call the API on it."""

    def __init__(self) -> None:
        self.store = PlacementStore()

    def call(self, method: str, path: str, body: Any = None, *, version: str | None = "latest",
             query: str = "", read_only: bool = False, raw: str | None = None,
             content_type: str | None = "application/json") -> PlacementResponse:
        text = raw if raw is not None else ("" if body is None else json.dumps(body))
        response, _changes = handle(self.store, PlacementRequest(
            method, path, query, None if version is None else f"placement {version}",
            text, content_type if text else None, "tester", read_only))
        return response

    def json(self, *args: Any, status: int = 200, **kwargs: Any) -> Any:
        response = self.call(*args, **kwargs)
        assert response.status == status, response.body
        return json.loads(response.body) if response.body else None

    def provider(self, name: str = "cn1", rp_uuid: str = RP) -> str:
        self.json("POST", "/resource_providers", {"name": name, "uuid": rp_uuid})
        self.json("PUT", f"/resource_providers/{rp_uuid}/inventories",
                  {"resource_provider_generation": 0,
                   "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 2048}}})
        return rp_uuid


def error_of(response: PlacementResponse) -> dict[str, Any]:
    body = json.loads(response.body)
    assert list(body) == ["errors"] and len(body["errors"]) == 1
    error: dict[str, Any] = body["errors"][0]
    return error


@pytest.mark.parametrize(("header", "expected"), [
    (None, (1, 0)), ("placement latest", (1, 39)), ("placement 1.5", (1, 5)),
    ("compute 2.1, placement 1.20", (1, 20)), ("PLACEMENT 1.2", (1, 2)),
    ("placement 1.3, placement 1.7", (1, 7)), ("compute 2.50", (1, 0)),
    ("placement 1.05", (1, 5)),
])
def test_negotiation_picks_the_version_asked_for_placement(header: str | None,
                                                           expected: tuple[int, int]) -> None:
    assert negotiate(header) == expected


@pytest.mark.parametrize(("header", "status"), [
    ("placement 1.40", 406), ("placement 2.0", 406), ("placement 0.9", 406),
    ("placement abc", 400), ("placement 1", 400), ("placement 1.x", 400),
])
def test_negotiation_refuses_unknown_and_malformed_versions(header: str, status: int) -> None:
    with pytest.raises(HttpProblem) as caught:
        negotiate(header)
    assert caught.value.status == status


def test_406_names_the_range_and_carries_no_version_header() -> None:
    response = Api().call("GET", "/resource_providers", version="1.99")
    assert response.status == 406
    error = error_of(response)
    assert (error["min_version"], error["max_version"]) == ("1.0", "1.39")
    assert "Unacceptable version header: 1.99" in error["detail"]
    assert "OpenStack-API-Version" not in response.headers


def test_answers_carry_the_version_vary_and_request_id() -> None:
    response = Api().call("GET", "/resource_providers", version="1.14")
    assert response.status == 200
    assert response.headers["OpenStack-API-Version"] == "placement 1.14"
    assert response.headers["Vary"] == "openstack-api-version"
    assert response.headers["openstack-request-id"].startswith("req-")


def test_root_document() -> None:
    body = Api().json("GET", "/", version=None)
    assert body == {"versions": [{"id": "v1.0", "min_version": "1.0", "max_version": "1.39",
                                  "status": "CURRENT",
                                  "links": [{"rel": "self", "href": ""}]}]}


def test_error_body_shape_and_code_from_1_23() -> None:
    api = Api()
    for version, has_code in (("1.22", False), ("1.23", True)):
        response = api.call("GET", f"/resource_providers/{RP}", version=version)
        assert response.status == 404
        error = error_of(response)
        expected = {"status", "title", "detail", "request_id"} | ({"code"} if has_code
                                                                 else set())
        assert set(error) == expected
        assert error["title"] == "Not Found"
        assert error["request_id"] == response.headers["openstack-request-id"]
        assert f"No resource provider with uuid {RP} found" in error["detail"]
        assert response.headers["OpenStack-API-Version"] == f"placement {version}"


def test_routing_404_405_and_microversion_gates() -> None:
    api = Api()
    assert api.call("GET", "/nowhere").status == 404
    refused = api.call("DELETE", "/resource_providers")
    assert refused.status == 405 and refused.headers["Allow"] == "GET, POST"
    assert api.call("GET", "/traits", version="1.5").status == 404
    assert api.call("GET", "/traits", version="1.6").status == 200
    assert api.call("GET", "/resource_classes", version="1.1").status == 404
    assert api.call("GET", "/allocation_candidates", version="1.9",
                    query="resources=VCPU:1").status == 404
    api.provider()
    assert api.call("DELETE", f"/resource_providers/{RP}/inventories",
                    version="1.4").status == 405
    assert api.call("GET", f"/resource_providers/{RP}/aggregates", version="1.0").status == 404
    assert api.call("POST", "/reshaper", {}, version="1.29").status == 404


@pytest.mark.parametrize(("body", "field"), [
    ({}, "'name' is a required property"),
    ({"name": 5}, "Failed validating 'type' in schema['properties']['name']"),
    ({"name": "x", "uuid": "not-a-uuid"},
     "Failed validating 'format' in schema['properties']['uuid']"),
    ({"name": "x", "colour": "red"}, "'colour' was unexpected"),
])
def test_bad_bodies_are_400_naming_the_field(body: dict[str, Any], field: str) -> None:
    response = Api().call("POST", "/resource_providers", body)
    assert response.status == 400
    assert "JSON does not validate" in error_of(response)["detail"]
    assert field in error_of(response)["detail"]


def test_malformed_json_and_wrong_media_type() -> None:
    api = Api()
    bad = api.call("POST", "/resource_providers", raw="{not json")
    assert bad.status == 400 and "Malformed JSON" in error_of(bad)["detail"]
    text = api.call("POST", "/resource_providers", raw='{"name": "x"}',
                    content_type="text/plain")
    assert text.status == 415
    assert api.store.providers() == []


def test_inventory_field_checked() -> None:
    api = Api()
    api.json("POST", "/resource_providers", {"name": "cn1", "uuid": RP})
    response = api.call("PUT", f"/resource_providers/{RP}/inventories",
                        {"resource_provider_generation": 0,
                         "inventories": {"VCPU": {"total": "many"}}})
    assert response.status == 400 and "['total']" in error_of(response)["detail"]
    assert api.store.inventories(RP) == {}


def test_generation_conflict_is_409_concurrent_update_and_changes_nothing() -> None:
    api = Api()
    api.provider()
    response = api.call("PUT", f"/resource_providers/{RP}/inventories",
                        {"resource_provider_generation": 0,
                         "inventories": {"VCPU": {"total": 1}}})
    assert response.status == 409
    assert error_of(response)["code"] == "placement.concurrent_update"
    assert api.store.inventories(RP)["VCPU"].total == 8


def test_provider_shapes_by_microversion() -> None:
    api = Api()
    assert api.call("POST", "/resource_providers", {"name": "a", "uuid": RP},
                    version="1.19").status == 201
    old = api.json("GET", f"/resource_providers/{RP}", version="1.0")
    assert [link["rel"] for link in old["links"]] == ["self", "inventories", "usages"]
    assert "root_provider_uuid" not in old
    new = api.json("GET", f"/resource_providers/{RP}", version="1.14")
    assert new["root_provider_uuid"] == RP and new["parent_provider_uuid"] is None
    assert [link["rel"] for link in new["links"]] == [
        "self", "inventories", "usages", "aggregates", "traits", "allocations"]
    created = api.json("POST", "/resource_providers", {"name": "b"}, version="1.20")
    assert created["name"] == "b" and created["generation"] == 0


def test_aggregates_list_before_1_19_and_generation_after() -> None:
    api = Api()
    api.provider()
    assert api.json("PUT", f"/resource_providers/{RP}/aggregates", [AGG],
                    version="1.1") == {"aggregates": [AGG]}
    stale = api.call("PUT", f"/resource_providers/{RP}/aggregates",
                     {"aggregates": [], "resource_provider_generation": 0}, version="1.19")
    assert stale.status == 409
    gen = api.store.provider(RP).generation
    assert api.json("PUT", f"/resource_providers/{RP}/aggregates",
                    {"aggregates": [], "resource_provider_generation": gen},
                    version="1.19") == {"aggregates": [],
                                        "resource_provider_generation": gen + 1}


def test_allocations_list_form_dict_form_and_consumer_generation() -> None:
    api = Api()
    api.provider()
    url = f"/allocations/{CONSUMER}"
    api.json("PUT", url, {"allocations": [{"resource_provider": {"uuid": RP},
                                            "resources": {"VCPU": 2}}],
                          "project_id": "p", "user_id": "u"}, version="1.8", status=204)
    assert api.json("GET", url, version="1.11") == {
        "allocations": {RP: {"generation": 2, "resources": {"VCPU": 2}}}}
    full = api.json("GET", url, version="1.38")
    assert (full["project_id"], full["consumer_generation"],
            full["consumer_type"]) == ("p", 1, "unknown")
    missing_gen = api.call("PUT", url, {"allocations": {RP: {"resources": {"VCPU": 1}}},
                                        "project_id": "p", "user_id": "u"}, version="1.28")
    assert missing_gen.status == 400
    assert "consumer_generation" in error_of(missing_gen)["detail"]
    stale = api.call("PUT", url, {"allocations": {RP: {"resources": {"VCPU": 1}}},
                                  "project_id": "p", "user_id": "u",
                                  "consumer_generation": None}, version="1.28")
    assert stale.status == 409 and error_of(stale)["code"] == "placement.concurrent_update"
    api.json("PUT", url, {"allocations": {RP: {"resources": {"VCPU": 1}}},
                          "project_id": "p", "user_id": "u", "consumer_generation": 1,
                          "consumer_type": "INSTANCE"}, version="1.38", status=204)
    assert api.json("GET", "/usages", query="project_id=p", version="1.38") == {
        "usages": {"INSTANCE": {"consumer_count": 1, "VCPU": 1}}}
    assert api.json("GET", "/usages", query="project_id=p", version="1.9") == {
        "usages": {"VCPU": 1}}
    assert api.json("GET", "/usages", query="project_id=p&consumer_type=all") == {
        "usages": {"all": {"consumer_count": 1, "VCPU": 1}}}
    assert api.json("GET", "/usages", query="project_id=p&consumer_type=MIGRATION") == {
        "usages": {}}
    api.json("DELETE", url, status=204)
    assert api.call("DELETE", url).status == 404


def test_capacity_exceeded_is_409() -> None:
    api = Api()
    api.provider()
    first = "66666666-6666-6666-6666-666666666666"
    api.json("PUT", f"/allocations/{first}",
             {"allocations": {RP: {"resources": {"VCPU": 6}}}, "project_id": "p",
              "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"},
             status=204)
    response = api.call("PUT", f"/allocations/{CONSUMER}",
                        {"allocations": {RP: {"resources": {"VCPU": 6}}},
                         "project_id": "p", "user_id": "u", "consumer_generation": None,
                         "consumer_type": "INSTANCE"})
    assert response.status == 409 and "capacity" in error_of(response)["detail"]
    assert api.store.consumer(CONSUMER) is None


def test_candidates_shapes_by_microversion() -> None:
    api = Api()
    api.provider()
    q = "resources=VCPU:1"
    old = api.json("GET", "/allocation_candidates", query=q, version="1.10")
    assert old["allocation_requests"] == [{"allocations": [
        {"resource_provider": {"uuid": RP}, "resources": {"VCPU": 1}}]}]
    assert old["provider_summaries"] == {RP: {"resources": {
        "VCPU": {"capacity": 8, "used": 0}}}}
    new = api.json("GET", "/allocation_candidates", query=q, version="1.34")
    assert new["allocation_requests"] == [{"allocations": {RP: {"resources": {"VCPU": 1}}},
                                           "mappings": {"": [RP]}}]
    summary = new["provider_summaries"][RP]
    assert set(summary["resources"]) == {"VCPU", "MEMORY_MB"}
    assert summary["root_provider_uuid"] == RP and summary["traits"] == []


def test_forbidden_member_of_over_rest() -> None:
    api = Api()
    api.provider()
    other = "44444444-4444-4444-4444-444444444444"
    api.provider("cn2", other)
    api.json("PUT", f"/resource_providers/{RP}/aggregates",
             {"aggregates": [AGG], "resource_provider_generation": 1})
    found = api.json("GET", "/allocation_candidates", query=f"resources=VCPU:1&member_of=!{AGG}")
    assert [list(r["allocations"]) for r in found["allocation_requests"]] == [[other]]
    too_old = api.call("GET", "/allocation_candidates",
                       query=f"resources=VCPU:1&member_of=!{AGG}", version="1.31")
    assert too_old.status == 400
    assert "Forbidden member_of" in error_of(too_old)["detail"]


def test_read_only_user_gets_403_and_may_read() -> None:
    api = Api()
    refused = api.call("POST", "/resource_providers", {"name": "x"}, read_only=True)
    assert refused.status == 403 and error_of(refused)["title"] == "Forbidden"
    assert api.store.providers() == []
    assert api.call("GET", "/resource_providers", read_only=True).status == 200


def test_resource_classes_and_traits() -> None:
    api = Api()
    api.json("POST", "/resource_classes", {"name": "CUSTOM_GPU"}, status=201)
    assert api.call("POST", "/resource_classes", {"name": "CUSTOM_GPU"}).status == 409
    assert api.call("PUT", "/resource_classes/CUSTOM_GPU").status == 204
    assert api.call("PUT", "/resource_classes/CUSTOM_NEW").status == 201
    assert api.json("GET", "/resource_classes/CUSTOM_GPU")["name"] == "CUSTOM_GPU"
    bad = api.call("POST", "/resource_classes", {"name": "GPU"})
    assert bad.status == 400 and "['properties']['name']" in error_of(bad)["detail"]
    assert api.call("PUT", "/traits/CUSTOM_FAST").status == 201
    assert api.call("PUT", "/traits/CUSTOM_FAST").status == 204
    assert api.call("GET", "/traits/CUSTOM_FAST").status == 204
    assert api.json("GET", "/traits", query="name=startswith:CUSTOM_") == {
        "traits": ["CUSTOM_FAST"]}
    api.provider()
    api.json("PUT", f"/resource_providers/{RP}/traits",
             {"traits": ["CUSTOM_FAST"], "resource_provider_generation": 1})
    assert api.json("GET", "/traits", query="associated=true") == {"traits": ["CUSTOM_FAST"]}
    assert api.call("DELETE", "/traits/CUSTOM_FAST").status == 409
    assert api.call("DELETE", "/resource_classes/CUSTOM_GPU").status == 204


def test_reshaper_moves_allocations_to_a_child() -> None:
    api = Api()
    api.provider()
    child = "55555555-5555-5555-5555-555555555555"
    api.json("POST", "/resource_providers", {"name": "numa0", "uuid": child,
                                              "parent_provider_uuid": RP})
    api.json("PUT", f"/allocations/{CONSUMER}",
             {"allocations": {RP: {"resources": {"VCPU": 2}}}, "project_id": "p",
              "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"},
             status=204)
    root_gen = api.store.provider(RP).generation
    api.json("POST", "/reshaper", {
        "inventories": {
            RP: {"resource_provider_generation": root_gen,
                 "inventories": {"MEMORY_MB": {"total": 2048}}},
            child: {"resource_provider_generation": 0,
                    "inventories": {"VCPU": {"total": 8}}}},
        "allocations": {CONSUMER: {
            "allocations": {child: {"resources": {"VCPU": 2}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": 1, "consumer_type": "INSTANCE"}}},
        status=204)
    assert api.store.usages(child) == {"VCPU": 2}
    assert "VCPU" not in api.store.inventories(RP)


def test_checks_before_the_handler() -> None:
    api = Api()
    no_type = api.call("POST", "/resource_providers", raw='{"name": "x"}', content_type=None)
    assert no_type.status == 400
    assert "content-type header required" in error_of(no_type)["detail"]
    # 415 comes before the provider is looked up, as in Placement.
    missing = api.call("PUT", f"/resource_providers/{RP}", raw="hello",
                       content_type="text/plain")
    assert missing.status == 415
    response, _ = handle(api.store, PlacementRequest("GET", "/resource_providers",
                                                     accept="text/plain"))
    assert response.status == 406 and "Only application/json" in error_of(response)["detail"]
    response, _ = handle(api.store, PlacementRequest(
        "GET", "/resource_providers", accept="text/html,application/xml;q=0.9,*/*;q=0.8"))
    assert response.status == 200


def test_html_error_for_a_browser() -> None:
    response, _ = handle(PlacementStore(), PlacementRequest("GET", "/nowhere",
                                                            accept="text/html"))
    assert response.status == 404
    assert response.headers["Content-Type"].startswith("text/html")
    assert "The resource could not be found" in response.body


def test_cache_headers_from_1_15_on_answers_with_a_body() -> None:
    api = Api()
    old = api.call("GET", "/resource_providers", version="1.14")
    assert "Cache-Control" not in old.headers and "Last-Modified" not in old.headers
    new = api.call("GET", "/resource_providers", version="1.15")
    assert new.headers["Cache-Control"] == "no-cache"
    assert new.headers["Last-Modified"].endswith(" GMT")
    created = api.call("POST", "/resource_classes", {"name": "CUSTOM_X"}, version="1.15")
    assert created.status == 201 and "Last-Modified" not in created.headers
    trait = api.call("PUT", "/traits/CUSTOM_T", version="1.15")
    assert trait.status == 201 and trait.headers["Cache-Control"] == "no-cache"


def test_schema_errors_name_rule_and_field() -> None:
    api = Api()
    api.provider()
    response = api.call("POST", f"/resource_providers/{RP}/inventories",
                        {"resource_class": "DISK_GB", "total": 0})
    detail = error_of(response)["detail"]
    assert response.status == 400
    assert "JSON does not validate: 0 is less than the minimum of 1" in detail
    assert "Failed validating 'minimum' in schema['properties']['total']" in detail


def test_generation_kept_by_rename_and_old_aggregates() -> None:
    api = Api()
    api.provider()
    assert api.json("PUT", f"/resource_providers/{RP}", {"name": "renamed"})["generation"] == 1
    api.json("PUT", f"/resource_providers/{RP}/aggregates", [AGG], version="1.18")
    assert api.store.provider(RP).generation == 1
    body = api.json("PUT", f"/resource_providers/{RP}/aggregates",
                    {"aggregates": [AGG], "resource_provider_generation": 1}, version="1.19")
    assert body["resource_provider_generation"] == 2


def test_default_max_unit_is_placements_largest_integer() -> None:
    api = Api()
    api.json("POST", "/resource_providers", {"name": "cn1", "uuid": RP})
    body = api.json("POST", f"/resource_providers/{RP}/inventories",
                    {"resource_class": "VCPU", "total": 4}, status=201)
    assert body["max_unit"] == 2147483647


def test_mappings_checked_from_1_34() -> None:
    api = Api()
    api.provider()
    body = {"allocations": {RP: {"resources": {"VCPU": 1}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": None, "mappings": {"alpha": "beta"}}
    bad = api.call("PUT", f"/allocations/{CONSUMER}", body, version="1.34")
    assert bad.status == 400
    assert "JSON does not validate: 'beta' is not of type 'array'" in error_of(bad)["detail"]
    early = api.call("PUT", f"/allocations/{CONSUMER}", {**body, "mappings": {"": [RP]}},
                     version="1.33")
    assert early.status == 400 and "'mappings' was unexpected" in error_of(early)["detail"]
    api.json("PUT", f"/allocations/{CONSUMER}", {**body, "mappings": {"": [RP]}},
             version="1.34", status=204)


def test_query_schema_errors_name_the_rule() -> None:
    response = Api().call("GET", "/allocation_candidates", query="resources=VCPU:1&limit=0")
    assert response.status == 400
    assert "Failed validating 'pattern'" in error_of(response)["detail"]


def test_summary_traits_standard_ones_first() -> None:
    api = Api()
    api.provider()
    api.call("PUT", "/traits/CUSTOM_AAA")
    api.json("PUT", f"/resource_providers/{RP}/traits",
             {"traits": ["CUSTOM_AAA", "HW_NUMA_ROOT"], "resource_provider_generation": 1})
    found = api.json("GET", "/allocation_candidates", query="resources=VCPU:1")
    assert found["provider_summaries"][RP]["traits"] == ["HW_NUMA_ROOT", "CUSTOM_AAA"]


def test_a_write_between_two_identical_queries_changes_the_answer() -> None:
    """Summaries are cached per provider: a change that moves a usage or a parent
    without a new generation (Placement keeps the generation of a provider a consumer
    leaves, and of a re-parented one) still shows in the next identical query."""
    api = Api()
    other = "44444444-4444-4444-4444-444444444444"
    api.provider("x", RP)
    api.provider("y", other)

    def summaries() -> dict[str, Any]:
        found: dict[str, Any] = api.json("GET", "/allocation_candidates",
                                         query="resources=VCPU:1")["provider_summaries"]
        return found

    def allocate(allocations: dict[str, int], generation: int | None) -> None:
        api.json("PUT", f"/allocations/{CONSUMER}", {
            "allocations": {rp: {"resources": {"VCPU": n}} for rp, n in allocations.items()},
            "project_id": "p", "user_id": "u", "consumer_type": "INSTANCE",
            "consumer_generation": generation}, status=204)

    allocate({RP: 2, other: 1}, None)
    assert summaries()[RP]["resources"]["VCPU"]["used"] == 2
    generation = api.json("GET", f"/resource_providers/{RP}")["generation"]
    allocate({other: 1}, 1)  # the consumer leaves RP, whose generation stays
    assert api.json("GET", f"/resource_providers/{RP}")["generation"] == generation
    assert summaries()[RP]["resources"]["VCPU"]["used"] == 0
    child = "55555555-5555-5555-5555-555555555555"
    api.json("POST", "/resource_providers", {"name": "c", "uuid": child,
                                             "parent_provider_uuid": RP})
    api.json("PUT", f"/resource_providers/{child}/inventories", {
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}})
    assert summaries()[child]["parent_provider_uuid"] == RP
    api.json("PUT", f"/resource_providers/{child}", {"name": "c",
                                                     "parent_provider_uuid": None})
    assert summaries()[child]["parent_provider_uuid"] is None


def test_names_stay_unique_on_create_and_rename() -> None:
    api = Api()
    other = "44444444-4444-4444-4444-444444444444"
    api.provider("x", RP)
    api.provider("y", other)
    taken = api.call("POST", "/resource_providers", {"name": "x"})
    assert taken.status == 409 and error_of(taken)["code"] == "placement.duplicate_name"
    renamed = api.call("PUT", f"/resource_providers/{other}", {"name": "x"})
    assert renamed.status == 409 and error_of(renamed)["code"] == "placement.duplicate_name"
    api.json("PUT", f"/resource_providers/{other}", {"name": "z"})
    api.json("POST", "/resource_providers", {"name": "y"})
