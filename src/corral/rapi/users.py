"""The RAPI users file: who may call the Remote API, with which rights.

The file has Ganeti's format, so an existing file keeps working and one corral
writes can be read by Ganeti's tools::

    # comment
    <user> <password> [<option>[,<option>...]]

Options are ``read`` and ``write`` (a user without options may only read public
resources), and ``placement-token={SHA256}<hex>``: the SHA-256 of a token that
authenticates the user on ``/placement/`` with the ``X-Auth-Token`` header (as
OpenStack clients send it), with the user's rights; :func:`placement_token_option`
makes one and ``python -m corral.rapi.tokens`` adds one to the file. Ganeti ignores
options it does not know, so the file stays readable by its tools.

The password is either plain text or ``{HA1}`` followed by the hex MD5 of
``user:Ganeti Remote API:password`` — the ``H(A1)`` of RFC 2617 with the realm the
RAPI daemon announces — so the file never holds the password itself. corral writes
``{HA1}`` entries; it reads both kinds (``{CLEARTEXT}`` or no scheme is plain text).
:mod:`corral.rapi.auth` checks requests against it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from corral.errors import ParameterError

__all__ = [
    "PLACEMENT_TOKEN_OPTION",
    "RAPI_ACCESS_READ",
    "RAPI_ACCESS_WRITE",
    "RAPI_REALM",
    "RapiUser",
    "check_rapi_password",
    "check_token",
    "generate_rapi_users_file",
    "parse_rapi_users_file",
    "placement_token_option",
    "rapi_ha1",
]

#: The HTTP authentication realm of RAPI; part of every ``{HA1}`` hash.
RAPI_REALM = "Ganeti Remote API"
#: Option granting write access (and read access to everything).
RAPI_ACCESS_WRITE = "write"
#: Option granting read access to protected resources.
RAPI_ACCESS_READ = "read"

#: Prefix of the option holding a ``/placement/`` token's hash.
PLACEMENT_TOKEN_OPTION = "placement-token="
_SHA256 = "{SHA256}"
_HA1 = "{HA1}"
_CLEARTEXT = "{CLEARTEXT}"


def rapi_ha1(user: str, password: str, realm: str = RAPI_REALM) -> str:
    """The hex MD5 of ``user:realm:password`` (RFC 2617 H(A1)) as stored after ``{HA1}``."""
    digest = f"{user}:{realm}:{password}".encode()
    return hashlib.md5(digest, usedforsecurity=False).hexdigest()


def _check_field(what: str, value: str) -> None:
    if not value or any(c.isspace() for c in value) or value.startswith("#"):
        raise ParameterError(
            f"invalid RAPI {what} {value!r}: it must be non-empty, without whitespace,"
            " and not start with '#'"
        )


def generate_rapi_users_file(
    user: str, password: str, access: tuple[str, ...] = (RAPI_ACCESS_WRITE,)
) -> str:
    """The content of a RAPI users file with one user, its password stored as ``{HA1}``."""
    _check_field("user name", user)
    for option in access:
        if option not in (RAPI_ACCESS_READ, RAPI_ACCESS_WRITE):
            raise ParameterError(
                f"invalid RAPI access option {option!r}: use"
                f" {RAPI_ACCESS_READ!r} or {RAPI_ACCESS_WRITE!r}"
            )
    fields = [user, _HA1 + rapi_ha1(user, password)]
    if access:
        fields.append(",".join(access))
    return (
        "# RAPI users: <user> <password or {HA1}md5(user:realm:password)> [read,write]\n"
        + " ".join(fields)
        + "\n"
    )


@dataclass(frozen=True)
class RapiUser:
    """One line of the RAPI users file."""

    name: str
    #: As written in the file, scheme included (``{HA1}...`` or plain text).
    password: str
    options: tuple[str, ...]

    @property
    def can_write(self) -> bool:
        """Whether the user may change the cluster."""
        return RAPI_ACCESS_WRITE in self.options

    @property
    def can_read(self) -> bool:
        """Whether the user may read protected resources."""
        return RAPI_ACCESS_READ in self.options or self.can_write


def parse_rapi_users_file(text: str) -> dict[str, RapiUser]:
    """Read a RAPI users file; blank lines, comments and lines without a password are skipped.

    A later line for the same user wins, as in Ganeti.
    """
    users: dict[str, RapiUser] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        options: tuple[str, ...] = ()
        if len(parts) == 3:
            options = tuple(o.strip() for o in parts[2].split(","))
        users[parts[0]] = RapiUser(parts[0], parts[1], options)
    return users


def check_rapi_password(entry: RapiUser, password: str, realm: str = RAPI_REALM) -> bool:
    """Whether ``password`` is the password of ``entry`` (constant-time comparison)."""
    stored = entry.password
    if not stored.startswith("{"):
        stored = _CLEARTEXT + stored
    end = stored.find("}", 1)
    if end <= 1:
        return False
    scheme, expected = stored[: end + 1].upper(), stored[end + 1 :]
    if scheme == _CLEARTEXT:
        return hmac.compare_digest(expected.encode(), password.encode())
    if scheme == _HA1:
        actual = rapi_ha1(entry.name, password, realm)
        return hmac.compare_digest(expected.lower().encode(), actual.encode())
    return False


def placement_token_option(token: str) -> str:
    """The users-file option that lets ``token`` authenticate its user."""
    if not token or any(c.isspace() or c == "," for c in token):
        raise ParameterError("a placement token must be non-empty, without whitespace "
                             "or commas")
    return PLACEMENT_TOKEN_OPTION + _SHA256 + hashlib.sha256(token.encode()).hexdigest()


def check_token(entry: RapiUser, token: str) -> bool:
    """Whether ``token`` is one of ``entry``'s placement tokens (constant-time)."""
    wanted = hashlib.sha256(token.encode()).hexdigest().encode()
    found = False
    for option in entry.options:
        if not option.startswith(PLACEMENT_TOKEN_OPTION):
            continue
        stored = option[len(PLACEMENT_TOKEN_OPTION):]
        if stored.upper().startswith(_SHA256):
            found |= hmac.compare_digest(stored[len(_SHA256):].lower().encode(), wanted)
        else:
            found |= hmac.compare_digest(stored.encode(), token.encode())
    return found
