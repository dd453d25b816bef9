"""The iallocator protocol, master side: the request built from the configuration in
Ganeti's shape (:mod:`.request`), allocators run by name (:mod:`.runner`: the built-in
``corral`` or a plugin such as Ganeti's ``hail``) and their answers checked
(:mod:`.answer`)."""

from __future__ import annotations

from corral.iallocator.answer import JOB_OPCODES, Answer, parse_answer
from corral.iallocator.request import (
    EVAC_MODES,
    IALLOCATOR_VERSION,
    MODES,
    ClusterView,
    NodeLive,
    allocate_request,
    build_input,
    change_group_request,
    multi_allocate_request,
    node_evacuate_request,
    relocate_request,
    reported_storage,
)
from corral.iallocator.runner import BUILTIN, DEFAULT_TIMEOUT, PluginRunner, plugin_arguments

__all__ = [
    "BUILTIN",
    "DEFAULT_TIMEOUT",
    "EVAC_MODES",
    "IALLOCATOR_VERSION",
    "JOB_OPCODES",
    "MODES",
    "Answer",
    "ClusterView",
    "NodeLive",
    "PluginRunner",
    "allocate_request",
    "build_input",
    "change_group_request",
    "multi_allocate_request",
    "node_evacuate_request",
    "parse_answer",
    "plugin_arguments",
    "relocate_request",
    "reported_storage",
]
