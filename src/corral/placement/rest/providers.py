"""Handlers of ``/resource_providers`` and what hangs below a provider: inventories,
aggregates, traits, usages and allocations.

Shapes by microversion (Placement's): links ``aggregates`` from 1.1, ``traits`` 1.6,
``allocations`` 1.11; ``parent_provider_uuid``/``root_provider_uuid`` 1.14; ``POST``
answers 201 with ``Location`` before 1.20 and 200 with the provider from 1.20;
aggregates carry the provider generation (and need it to change) from 1.19.
"""

from __future__ import annotations

from typing import Any

from corral.errors import PlacementError
from corral.placement.model import Inventory, ResourceProvider
from corral.placement.providers import parse_resource_providers, resource_providers
from corral.placement.rest.body import (
    check_keys,
    check_uuid,
    json_body,
    need,
    optional,
    schema_problem,
)
from corral.placement.rest.context import Call, forbid_read_only
from corral.placement.rest.protocol import HttpProblem, PlacementResponse, json_response

__all__ = ["INVENTORY_FIELDS", "create_inventory", "create_provider", "delete_inventories",
           "delete_inventory", "delete_provider", "delete_provider_traits",
           "get_aggregates", "get_inventories", "get_inventory", "get_provider",
           "get_provider_traits", "inventory_from", "list_providers",
           "provider_allocations", "provider_usages", "serialize_provider",
           "set_aggregates", "set_inventories", "set_provider_traits", "update_inventory",
           "update_provider"]

INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size",
                     "allocation_ratio")


def serialize_provider(call: Call, rp: ResourceProvider) -> dict[str, Any]:
    """A provider as Placement shows it at the call's microversion."""
    base = f"/resource_providers/{rp.uuid}"
    rels = ["inventories", "usages"]
    if call.at_least(1):
        rels.append("aggregates")
    if call.at_least(6):
        rels.append("traits")
    if call.at_least(11):
        rels.append("allocations")
    links = [{"rel": "self", "href": call.url(base)}]
    links.extend({"rel": rel, "href": call.url(f"{base}/{rel}")} for rel in rels)
    out: dict[str, Any] = {"uuid": rp.uuid, "name": rp.name, "generation": rp.generation,
                           "links": links}
    if call.at_least(14):
        out["parent_provider_uuid"] = rp.parent_uuid
        out["root_provider_uuid"] = rp.root_uuid
    return out


def _provider(call: Call) -> ResourceProvider:
    try:
        return call.store.provider(call.args["uuid"])
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None


def list_providers(call: Call) -> PlacementResponse:
    """``GET /resource_providers`` with Placement's filters."""
    found = resource_providers(call.store, parse_resource_providers(call.params,
                                                                    call.version))
    return json_response(200, {"resource_providers": [serialize_provider(call, rp)
                                                      for rp in found]})


def get_provider(call: Call) -> PlacementResponse:
    """``GET /resource_providers/{uuid}``."""
    return json_response(200, serialize_provider(call, _provider(call)))


def create_provider(call: Call) -> PlacementResponse:
    """``POST /resource_providers``: ``name``, optional ``uuid`` and (1.14)
    ``parent_provider_uuid``."""
    forbid_read_only(call, "resource_providers:create")
    allowed = ["name", "uuid"] + (["parent_provider_uuid"] if call.at_least(14) else [])
    data = check_keys(json_body(call.req), allowed)
    name = need(data, "name", str)
    if not 1 <= len(name) <= 200:
        raise schema_problem(f"'{name}' is not a valid name: 1 to 200 characters "
                             "(field 'name')")
    rp_uuid = optional(data, "uuid", str)
    if rp_uuid is not None:
        rp_uuid = check_uuid(rp_uuid, "uuid")
    parent = optional(data, "parent_provider_uuid", (str, type(None)))
    if parent is not None:
        parent = check_uuid(parent, "parent_provider_uuid")
        if call.store.slot_of(parent) is None:
            raise HttpProblem(400, "The resource provider's parent provider is not a "
                                   f"valid resource provider: {parent}")
    try:
        rp = call.store.create_provider(name, rp_uuid, parent)
    except PlacementError as err:
        if err.http_status == 409 and "uuid" in err.message:
            raise HttpProblem(409, f"Conflicting resource provider uuid: {rp_uuid} "
                                   "already exists.", code=err.placement_code) from None
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    location = {"Location": call.url(f"/resource_providers/{rp.uuid}")}
    if call.at_least(20):
        return json_response(200, serialize_provider(call, rp), location)
    return PlacementResponse(201, location)


def update_provider(call: Call) -> PlacementResponse:
    """``PUT /resource_providers/{uuid}``: a new name and (1.14) parent."""
    forbid_read_only(call, "resource_providers:update")
    rp = _provider(call)
    allowed = ["name"] + (["parent_provider_uuid"] if call.at_least(14) else [])
    data = check_keys(json_body(call.req), allowed)
    name = need(data, "name", str)
    parent = (optional(data, "parent_provider_uuid", (str, type(None)))
              if "parent_provider_uuid" in data else rp.parent_uuid)
    if parent is not None:
        parent = check_uuid(parent, "parent_provider_uuid")
    if parent is not None and call.store.slot_of(parent) is None:
        raise HttpProblem(400, "The resource provider's parent provider is not a valid "
                               f"resource provider: {parent}")
    try:
        updated = call.store.update_provider(rp.uuid, name, parent)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.update(p.uuid for p in call.store.providers()
                                  if p.root_uuid == updated.root_uuid)
    return json_response(200, serialize_provider(call, updated))


def delete_provider(call: Call) -> PlacementResponse:
    """``DELETE /resource_providers/{uuid}``."""
    forbid_read_only(call, "resource_providers:delete")
    rp = _provider(call)
    try:
        call.store.delete_provider(rp.uuid)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    return PlacementResponse(204)


# ----- inventories -----

def _serialize_inventory(inv: Inventory) -> dict[str, Any]:
    return {"total": inv.total, "reserved": inv.reserved, "min_unit": inv.min_unit,
            "max_unit": inv.max_unit if inv.max_unit is not None else inv.total,
            "step_size": inv.step_size, "allocation_ratio": inv.allocation_ratio}


def inventory_from(call: Call, data: dict[str, Any], rc: str) -> Inventory:
    """An inventory of ``rc`` from a body's fields, checked as Placement checks it."""
    total = need(data, "total", int)
    values: dict[str, Any] = {"total": total}
    for key in ("reserved", "min_unit", "max_unit", "step_size"):
        value = optional(data, key, int)
        if value is not None:
            values[key] = value
    ratio = optional(data, "allocation_ratio", float)
    if ratio is not None:
        values["allocation_ratio"] = float(ratio)
    if total < 1 or total > 0x7FFFFFFF:
        raise schema_problem(f"{total} is less than the minimum of 1 (field 'total')"
                             if total < 1 else
                             f"{total} is greater than the maximum of 2147483647 "
                             "(field 'total')")
    reserved = values.get("reserved", 0)
    if reserved > total or (reserved == total and not call.at_least(26)):
        raise HttpProblem(400, f"Unable to update inventory for resource provider "
                               f"{call.args['uuid']}: Invalid inventory for '{rc}' on "
                               f"resource provider '{call.args['uuid']}'. The reserved "
                               "value is greater than or equal to total.")
    try:
        return Inventory(**values)
    except (PlacementError, ValueError) as err:
        raise HttpProblem(400, f"Bad inventory {rc} for resource provider "
                               f"{call.args['uuid']}: {err}") from None


def _inventories_answer(call: Call, status: int = 200) -> PlacementResponse:
    rp = _provider(call)
    inventories = call.store.inventories(rp.uuid)
    return json_response(status, {
        "inventories": {rc: _serialize_inventory(inv) for rc, inv in inventories.items()},
        "resource_provider_generation": rp.generation})


def get_inventories(call: Call) -> PlacementResponse:
    """``GET .../inventories``."""
    return _inventories_answer(call)


def _set(call: Call, generation: int | None, inventories: dict[str, Inventory]) -> None:
    try:
        call.store.set_inventories(call.args["uuid"], generation, inventories)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(call.args["uuid"])


def set_inventories(call: Call) -> PlacementResponse:
    """``PUT .../inventories``: replace them all, at a provider generation."""
    forbid_read_only(call, "resource_providers:inventories:update")
    rp = _provider(call)
    data = check_keys(json_body(call.req), ["inventories", "resource_provider_generation"])
    generation = need(data, "resource_provider_generation", int)
    raw = need(data, "inventories", dict)
    inventories = {}
    for rc, fields in raw.items():
        inventories[rc] = inventory_from(call, check_keys(fields, INVENTORY_FIELDS,
                                                           f"inventory of {rc}"), rc)
    _check_classes(call, rp.uuid, inventories)
    _set(call, generation, inventories)
    return _inventories_answer(call)


def _check_classes(call: Call, rp_uuid: str, inventories: dict[str, Inventory]) -> None:
    for rc in inventories:
        if not call.store.has_resource_class(rc):
            raise HttpProblem(400, f"Unknown resource class in inventory for resource "
                                   f"provider {rp_uuid}: {rc}")


def create_inventory(call: Call) -> PlacementResponse:
    """``POST .../inventories``: add one class; 409 if the provider has it already."""
    forbid_read_only(call, "resource_providers:inventories:create")
    rp = _provider(call)
    data = check_keys(json_body(call.req), ("resource_class", *INVENTORY_FIELDS))
    rc = need(data, "resource_class", str)
    inventory = inventory_from(call, {k: v for k, v in data.items()
                                       if k != "resource_class"}, rc)
    current = call.store.inventories(rp.uuid)
    _check_classes(call, rp.uuid, {rc: inventory})
    if rc in current:
        raise HttpProblem(409, f"Update conflict: Inventory for '{rc}' on resource "
                               f"provider '{rp.uuid}' already exists.")
    _set(call, rp.generation, {**current, rc: inventory})
    gen = call.store.provider(rp.uuid).generation
    return json_response(201, {**_serialize_inventory(inventory),
                               "resource_provider_generation": gen},
                         {"Location": call.url(f"/resource_providers/{rp.uuid}"
                                               f"/inventories/{rc}")})


def get_inventory(call: Call) -> PlacementResponse:
    """``GET .../inventories/{resource_class}``."""
    rp = _provider(call)
    rc = call.args["resource_class"]
    inventory = call.store.inventories(rp.uuid).get(rc)
    if inventory is None:
        raise HttpProblem(404, f"No inventory of class {rc} for {rp.uuid}")
    return json_response(200, {**_serialize_inventory(inventory),
                               "resource_provider_generation": rp.generation})


def update_inventory(call: Call) -> PlacementResponse:
    """``PUT .../inventories/{resource_class}``."""
    forbid_read_only(call, "resource_providers:inventories:update")
    rp = _provider(call)
    rc = call.args["resource_class"]
    data = check_keys(json_body(call.req), ("resource_provider_generation",
                                            *INVENTORY_FIELDS))
    generation = need(data, "resource_provider_generation", int)
    inventory = inventory_from(call, {k: v for k, v in data.items()
                                       if k != "resource_provider_generation"}, rc)
    current = call.store.inventories(rp.uuid)
    if rc not in current:
        raise HttpProblem(400, f"No inventory record with resource class for resource "
                               f"provider {rp.uuid}: {rc}")
    _set(call, generation, {**current, rc: inventory})
    gen = call.store.provider(rp.uuid).generation
    return json_response(200, {**_serialize_inventory(inventory),
                               "resource_provider_generation": gen})


def delete_inventory(call: Call) -> PlacementResponse:
    """``DELETE .../inventories/{resource_class}``."""
    forbid_read_only(call, "resource_providers:inventories:delete")
    rp = _provider(call)
    rc = call.args["resource_class"]
    current = call.store.inventories(rp.uuid)
    if rc not in current:
        raise HttpProblem(404, f"No inventory of class {rc} found for delete")
    del current[rc]
    _set(call, rp.generation, current)
    return PlacementResponse(204)


def delete_inventories(call: Call) -> PlacementResponse:
    """``DELETE .../inventories`` (1.5)."""
    forbid_read_only(call, "resource_providers:inventories:delete")
    rp = _provider(call)
    _set(call, rp.generation, {})
    return PlacementResponse(204)


# ----- aggregates and traits of a provider -----

def _aggregates_answer(call: Call) -> PlacementResponse:
    rp = _provider(call)
    out: dict[str, Any] = {"aggregates": sorted(call.store.provider_aggregates(rp.uuid))}
    if call.at_least(19):
        out["resource_provider_generation"] = rp.generation
    return json_response(200, out)


def get_aggregates(call: Call) -> PlacementResponse:
    """``GET .../aggregates`` (1.1)."""
    return _aggregates_answer(call)


def set_aggregates(call: Call) -> PlacementResponse:
    """``PUT .../aggregates`` (1.1): a list before 1.19, then an object with the
    provider generation."""
    forbid_read_only(call, "resource_providers:aggregates:update")
    rp = _provider(call)
    data = json_body(call.req)
    generation: int | None = None
    if call.at_least(19):
        data = check_keys(data, ["aggregates", "resource_provider_generation"])
        generation = need(data, "resource_provider_generation", int)
        aggregates = need(data, "aggregates", list)
    else:
        if not isinstance(data, list):
            raise schema_problem(f"{data!r} is not of type 'array'")
        aggregates = data
    for agg in aggregates:
        if not isinstance(agg, str):
            raise schema_problem(f"{agg!r} is not of type 'string' (field 'aggregates')")
        check_uuid(agg, "aggregates")
    if len(set(aggregates)) != len(aggregates):
        raise schema_problem(f"{aggregates!r} has non-unique elements")
    try:
        call.store.set_provider_aggregates(rp.uuid, generation, aggregates)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    return _aggregates_answer(call)


def _traits_answer(call: Call) -> PlacementResponse:
    rp = _provider(call)
    return json_response(200, {"traits": sorted(call.store.provider_traits(rp.uuid)),
                               "resource_provider_generation": rp.generation})


def get_provider_traits(call: Call) -> PlacementResponse:
    """``GET .../traits`` (1.6)."""
    return _traits_answer(call)


def set_provider_traits(call: Call) -> PlacementResponse:
    """``PUT .../traits`` (1.6)."""
    forbid_read_only(call, "resource_providers:traits:update")
    rp = _provider(call)
    data = check_keys(json_body(call.req), ["traits", "resource_provider_generation"])
    generation = need(data, "resource_provider_generation", int)
    traits = need(data, "traits", list)
    for trait in traits:
        if not isinstance(trait, str):
            raise schema_problem(f"{trait!r} is not of type 'string' (field 'traits')")
    try:
        call.store.set_provider_traits(rp.uuid, generation, traits)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    return _traits_answer(call)


def delete_provider_traits(call: Call) -> PlacementResponse:
    """``DELETE .../traits`` (1.6)."""
    forbid_read_only(call, "resource_providers:traits:delete")
    rp = _provider(call)
    call.store.set_provider_traits(rp.uuid, rp.generation, [])
    call.changes.providers.add(rp.uuid)
    return PlacementResponse(204)


# ----- usages and allocations of a provider -----

def provider_usages(call: Call) -> PlacementResponse:
    """``GET .../usages``."""
    rp = _provider(call)
    return json_response(200, {"resource_provider_generation": rp.generation,
                               "usages": call.store.usages(rp.uuid)})


def provider_allocations(call: Call) -> PlacementResponse:
    """``GET .../allocations``: what each consumer holds on the provider."""
    rp = _provider(call)
    out: dict[str, Any] = {}
    for consumer_uuid in sorted(call.store.at(call.store.slot_of(rp.uuid) or 0).consumers):
        consumer = call.store.consumer(consumer_uuid)
        if consumer is None or rp.uuid not in consumer.allocations:
            continue
        entry: dict[str, Any] = {"resources": dict(consumer.allocations[rp.uuid])}
        if call.at_least(28):
            entry["consumer_generation"] = consumer.generation
        out[consumer_uuid] = entry
    return json_response(200, {"allocations": out,
                               "resource_provider_generation": rp.generation})
