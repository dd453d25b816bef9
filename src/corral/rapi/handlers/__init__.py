"""The RAPI resource handlers, one module per resource family.

Handlers are thin: they read the request's path and query arguments, build opcodes
or luxi calls and return plain data; the route table (:mod:`corral.rapi.routes`)
says which handler answers which method of which path.
"""
