"""The placement constraint options of ``gnt-instance add`` and ``gnt-instance
modify``: ``--member-of``, ``--required-trait``, ``--forbidden-trait``, and the opcode
parameters they become.

On ``modify`` an option replaces that kind of constraint as a whole (the instance's
other kinds stay); an empty value (``--member-of ''``) drops that kind. An option not
given leaves it as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["placement_body", "placement_options"]

F = TypeVar("F", bound=Callable[..., Any])

_MEMBER_OF_HELP = ("Placement constraint, repeatable, all must hold: AGG (in it), in:A,B "
                   "(in one), !AGG (not in it), !in:A,B (in none); an aggregate by name "
                   "(gnt-cluster list-aggregates), node group name or UUID.")
_REPLACES = " Replaces the instance's current ones; '' drops them."


def placement_options(*, modify: bool = False) -> Callable[[F], F]:
    """The three options, with help for ``add`` or (``modify``) for changing them."""
    extra = _REPLACES if modify else ""

    def decorate(func: F) -> F:
        for decorator in reversed([
            click.option("--member-of", "member_of", metavar="AGG", multiple=True,
                         help=_MEMBER_OF_HELP + extra),
            click.option("--required-trait", "required_traits", metavar="TRAIT",
                         multiple=True, help="The primary node must have TRAIT "
                         "(repeatable, or T1,T2)." + extra),
            click.option("--forbidden-trait", "forbidden_traits", metavar="TRAIT",
                         multiple=True, help="The primary node must not have TRAIT "
                         "(repeatable, or T1,T2)." + extra),
        ]):
            func = decorator(func)
        return func
    return decorate


def placement_body(member_of: tuple[str, ...], required_traits: tuple[str, ...],
                   forbidden_traits: tuple[str, ...]) -> dict[str, list[str]]:
    """The opcode parameters of the options given: ``member_of`` values as given
    (blank ones left out), traits split at commas; an option given only with empty
    values becomes an empty list (on ``modify``: drop that kind)."""
    body: dict[str, list[str]] = {}
    if member_of:
        body["member_of"] = [value for value in member_of if value.strip()]
    for key, given in (("required_traits", required_traits),
                       ("forbidden_traits", forbidden_traits)):
        if given:
            body[key] = [t.strip() for item in given for t in item.split(",") if t.strip()]
    return body
