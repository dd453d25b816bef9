"""msgspec's validation details in words, for the messages of opcode and shape checks.

Its own module so that :mod:`corral.opcodes.base` and :mod:`corral.opcodes.checks`,
which base imports, can both use it without importing each other.
"""

from __future__ import annotations

import re

__all__ = ["plain_detail"]

_EXPECTED_RE = re.compile(r"^Expected `(?P<types>[^`]*)`, got `(?P<got>[^`]*)`")
_TYPE_WORDS = {"str": "a string", "int": "an integer", "float": "a number",
               "bool": "true or false", "array": "a list", "object": "an object",
               "null": "null"}


def plain_detail(text: str) -> str:
    """msgspec's ``Expected `str | null`, got `int``` in words: "expected a string or
    null, got an integer"; other details with their backquotes dropped."""
    match = _EXPECTED_RE.match(text)
    if match:
        wanted = " or ".join(_TYPE_WORDS.get(t, t) for t in match.group("types").split(" | "))
        got = _TYPE_WORDS.get(match.group("got"), match.group("got"))
        text = f"expected {wanted}, got {got}{text[match.end():]}"
    return text.replace("`", "")
