"""Handlers of ``/resource_classes`` (1.2) and ``/traits`` (1.6), and the version
document at the root."""

from __future__ import annotations

from typing import Any

from corral.errors import PlacementError
from corral.placement.names import (
    CUSTOM_NAME,
    STANDARD_RESOURCE_CLASSES,
    STANDARD_TRAITS,
    is_valid_custom,
)
from corral.placement.rest.body import check_keys, json_body, need, prop, schema_problem
from corral.placement.rest.context import Call, cache_headers, forbid_read_only
from corral.placement.rest.protocol import (
    MAX_VERSION,
    MIN_VERSION,
    HttpProblem,
    PlacementResponse,
    json_response,
    version_text,
)

__all__ = ["create_resource_class", "delete_resource_class", "delete_trait",
           "get_resource_class", "get_trait", "list_resource_classes", "list_traits",
           "put_trait", "root", "update_resource_class"]


def root(call: Call) -> PlacementResponse:
    """``GET /``: the versions served."""
    return json_response(200, {"versions": [{
        "id": f"v{version_text(MIN_VERSION)}", "max_version": version_text(MAX_VERSION),
        "min_version": version_text(MIN_VERSION), "status": "CURRENT",
        "links": [{"rel": "self", "href": ""}]}]})


def _rc(call: Call, name: str) -> dict[str, Any]:
    return {"name": name, "links": [{"rel": "self",
                                     "href": call.url(f"/resource_classes/{name}")}]}


def list_resource_classes(call: Call) -> PlacementResponse:
    """``GET /resource_classes``."""
    return json_response(200, {"resource_classes": [
        _rc(call, name) for name in call.store.resource_classes()]})


def get_resource_class(call: Call) -> PlacementResponse:
    """``GET /resource_classes/{name}``."""
    name = call.args["name"]
    _known(call, name)
    return json_response(200, _rc(call, name))


def _check_custom(name: str) -> None:
    where = prop("", "name")
    if not CUSTOM_NAME.match(name):
        raise schema_problem(f"{name!r} does not match '^CUSTOM_[A-Z0-9_]+$'", "pattern",
                             where)
    if len(name) > 255:
        raise schema_problem(f"{name!r} is too long", "maxLength", where)


def _known(call: Call, name: str) -> None:
    if not call.store.has_resource_class(name):
        raise HttpProblem(404, f"No such resource class {name}.")


def create_resource_class(call: Call) -> PlacementResponse:
    """``POST /resource_classes``: a new custom class; 409 if it exists."""
    forbid_read_only(call, "resource_classes:create")
    name = need(check_keys(json_body(call.req), ["name"]), "name", str)
    _check_custom(name)
    if call.store.has_resource_class(name):
        raise HttpProblem(409, f"Conflicting resource class already exists: {name}")
    call.store.create_resource_class(name)
    call.changes.resource_classes.add(name)
    return PlacementResponse(201, {"Location": call.url(f"/resource_classes/{name}")})


def update_resource_class(call: Call) -> PlacementResponse:
    """``PUT /resource_classes/{name}``: 1.2-1.6 renames a custom class (body
    ``{"name"}``); from 1.7 a bodiless create (201) or check (204)."""
    forbid_read_only(call, "resource_classes:update")
    name = call.args["name"]
    location = {"Location": call.url(f"/resource_classes/{name}")}
    if not call.at_least(7):
        new = need(check_keys(json_body(call.req), ["name"]), "name", str)
        _check_custom(new)
        _known(call, name)
        if name in STANDARD_RESOURCE_CLASSES:
            raise HttpProblem(400, f"Cannot update standard resource class {name}")
        if new != name and call.store.has_resource_class(new):
            raise HttpProblem(409, f"Resource class already exists: {new}")
        touched = call.store.rename_resource_class(name, new)
        call.changes.resource_classes.update((name, new))
        call.changes.providers.update(touched.providers)
        call.changes.consumers.update(touched.consumers)
        return json_response(200, _rc(call, new))
    _check_custom(name)
    if call.store.has_resource_class(name):
        return PlacementResponse(204, location)
    call.store.create_resource_class(name)
    call.changes.resource_classes.add(name)
    return PlacementResponse(201, location)


def delete_resource_class(call: Call) -> PlacementResponse:
    """``DELETE /resource_classes/{name}``."""
    forbid_read_only(call, "resource_classes:delete")
    name = call.args["name"]
    _known(call, name)
    if name in STANDARD_RESOURCE_CLASSES:
        raise HttpProblem(400, "Error in delete resource class: Cannot delete standard "
                               f"resource class {name}.")
    try:
        call.store.delete_resource_class(name)
    except PlacementError:
        raise HttpProblem(409, f"Error in delete resource class: Cannot delete resource "
                               f"class {name}. Class is in use in inventory.") from None
    call.changes.resource_classes.add(name)
    return PlacementResponse(204)


def list_traits(call: Call) -> PlacementResponse:
    """``GET /traits?name=in:A,B|startswith:P&associated=true|false``."""
    traits = call.store.traits()
    for key, value in call.params:
        if key == "name":
            if value.startswith("startswith:"):
                prefix = value[len("startswith:"):]
                traits = [t for t in traits if t.startswith(prefix)]
            elif value.startswith("in:"):
                wanted = set(value[3:].split(","))
                traits = [t for t in traits if t in wanted]
            else:
                raise HttpProblem(400, "Badly formatted name parameter. Expected name "
                                       "query string parameter in form: "
                                       "?name=[in|startswith]:[name1,name2|prefix]. "
                                       f"Got: \"{value}\"")
        elif key == "associated":
            if value.lower() not in ("true", "false"):
                raise HttpProblem(400, 'The query parameter "associated" only accepts '
                                       '"true" or "false"')
            used = value.lower() == "true"
            traits = [t for t in traits if bool(call.store.trait_bits(t)) == used]
        else:
            raise HttpProblem(400, "Invalid query string parameters: Additional properties "
                                   f"are not allowed ('{key}' was unexpected)")
    return json_response(200, {"traits": traits})


def get_trait(call: Call) -> PlacementResponse:
    """``GET /traits/{name}``: 204 when it exists."""
    name = call.args["name"]
    if not call.store.has_trait(name):
        raise HttpProblem(404, f"No such trait(s): {name}.")
    return PlacementResponse(204, cache_headers(call))


def put_trait(call: Call) -> PlacementResponse:
    """``PUT /traits/{name}``: create a custom trait (201) or find it there (204)."""
    forbid_read_only(call, "traits:update")
    name = call.args["name"]
    location = {"Location": call.url(f"/traits/{name}"), **cache_headers(call)}
    if name in STANDARD_TRAITS:
        return PlacementResponse(204, location)
    if not is_valid_custom(name):
        raise HttpProblem(400, "The trait is invalid. A valid trait must be no longer "
                               "than 255 characters, start with the prefix \"CUSTOM_\" "
                               "and use following characters: \"A\"-\"Z\", \"0\"-\"9\" "
                               "and \"_\"")
    created = call.store.create_trait(name)
    if created:
        call.changes.traits.add(name)
    return PlacementResponse(201 if created else 204, location)


def delete_trait(call: Call) -> PlacementResponse:
    """``DELETE /traits/{name}``."""
    forbid_read_only(call, "traits:delete")
    name = call.args["name"]
    if not call.store.has_trait(name):
        raise HttpProblem(404, f"No such trait(s): {name}.")
    try:
        call.store.delete_trait(name)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.traits.add(name)
    return PlacementResponse(204)
