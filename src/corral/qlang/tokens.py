"""What the text form of filters is made of, shared by its parser
(:mod:`corral.qlang.grammar`) and its writer (:mod:`corral.qlang.parser`)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["FIELD_RE", "REGEXP_DELIMITERS", "glob_to_regexp"]

#: A field name in the text form (``and``, ``or`` and ``not`` are not field names).
FIELD_RE: Final = r"(?!(?:and|or|not)(?![A-Za-z0-9_/.]))[A-Za-z][A-Za-z0-9_/.]*"
#: The characters that may delimit a regexp (``m/.../``, ``m#...#`` ...).
REGEXP_DELIMITERS: Final = "/#^|"


def glob_to_regexp(pattern: str) -> str:
    """Ganeti's DNS-name glob: ``*`` and ``?`` never match a dot; the pattern matches
    the leading labels of a name (``node1`` matches ``node1.example.com``)."""
    parts = []
    for chunk in re.split(r"([*?])", pattern):
        if chunk == "*":
            parts.append("[^.]*")
        elif chunk == "?":
            parts.append("[^.]")
        else:
            parts.append(re.escape(chunk))
    return "^" + "".join(parts) + r"(\..*)?$"
