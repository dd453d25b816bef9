"""``/2/os``: the OS definitions instances can be created with."""

from __future__ import annotations

from corral.rapi.request import RapiRequest

__all__ = ["index"]


async def index(req: RapiRequest) -> list[str]:
    """OS names, one per variant (``name+variant``) when an OS has variants.

    Like Ganeti, this runs ``OP_OS_DIAGNOSE`` as a job and waits for it, so hidden,
    blacklisted and invalid OSes are left out.
    """
    (rows,) = await req.run(req.opcode("OP_OS_DIAGNOSE", {
        "output_fields": ["name", "variants"], "names": []}, from_body=False))
    names: list[str] = []
    for name, variants in rows:
        if variants:
            names.extend(f"{name}+{variant}" for variant in variants)
        else:
            names.append(name)
    return names
