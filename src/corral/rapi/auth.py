"""Who may call what: the RAPI users file and HTTP Basic authentication.

The rules are Ganeti's, so existing users files and clients behave the same:

- an operation's access level is ``public``, ``read`` or ``write``
  (:data:`corral.rapi.spec.Access`);
- credentials are checked when the operation is not public, when the daemon runs
  with ``--require-authentication``, or whenever the client sends them anyway;
- unknown users, wrong passwords and malformed or non-Basic credentials get 401 with
  ``WWW-Authenticate: Basic realm="Ganeti Remote API"``;
- a known user without the right option gets 403: ``write`` for write operations,
  ``read`` or ``write`` for read-protected ones; any user may call public ones.

The users file is read at start and again on SIGHUP (:meth:`Users.load`); a file that
cannot be read leaves the users known so far in place.
"""

from __future__ import annotations

import base64
import binascii
import logging
from pathlib import Path
from typing import Final

from corral.rapi.errors import HttpError
from corral.rapi.spec import Access
from corral.rapi.users import (
    RAPI_ACCESS_READ,
    RAPI_ACCESS_WRITE,
    RAPI_REALM,
    RapiUser,
    check_rapi_password,
    check_token,
    parse_rapi_users_file,
)

__all__ = ["CHALLENGE", "Users", "authorize", "check_credentials", "may"]

log = logging.getLogger(__name__)

#: The challenge sent with every 401 answer.
CHALLENGE: Final = f'Basic realm="{RAPI_REALM}"'


class Users:
    """The users of the RAPI users file at ``path``, as last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._users: dict[str, RapiUser] = {}

    def load(self) -> bool:
        """(Re)read the file; on failure keep the users known so far and return False.

        A missing file means no users: every authenticated request is refused.
        """
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            log.warning("no RAPI users file at %s: every request that needs a user is refused",
                        self.path)
            self._users = {}
            return False
        except (OSError, UnicodeError) as err:
            log.error("cannot read the RAPI users file %s (%s); keeping the %d user(s) read "
                      "before", self.path, err, len(self._users))
            return False
        self._users = parse_rapi_users_file(text)
        log.info("read %d RAPI user(s) from %s", len(self._users), self.path)
        return True

    def get(self, name: str) -> RapiUser | None:
        """The user called ``name``, if there is one."""
        return self._users.get(name)

    def by_token(self, token: str) -> RapiUser | None:
        """The user whose ``placement-token=`` option matches ``token``
        (:func:`corral.rapi.users.check_token`), if there is one."""
        for user in self._users.values():
            if check_token(user, token):
                return user
        return None

    def __len__(self) -> int:
        return len(self._users)


def check_credentials(users: Users, header: str) -> RapiUser | None:
    """The user an ``Authorization`` header proves to be, or None if it proves nothing."""
    scheme, _, data = header.strip().partition(" ")
    if scheme.lower() != "basic" or not data.strip():
        return None
    try:
        decoded = base64.b64decode(data.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        return None
    name, colon, password = decoded.partition(":")
    if not colon:
        return None
    user = users.get(name)
    if user is None or not check_rapi_password(user, password):
        return None
    return user


def may(user: RapiUser, access: Access) -> bool:
    """Whether ``user`` may call an operation of ``access`` level."""
    if access == "write":
        return RAPI_ACCESS_WRITE in user.options
    if access == "read":
        return bool({RAPI_ACCESS_READ, RAPI_ACCESS_WRITE} & set(user.options))
    return True


def authorize(users: Users, access: Access, header: str | None, *, require_auth: bool,
              what: str) -> RapiUser | None:
    """Decide a request to ``what`` (``"PUT /2/..."``): the user, None for an anonymous
    public request, or an :class:`HttpError` 401 / 403."""
    if header is None:
        if access == "public" and not require_auth:
            return None
        raise HttpError(
            401, f"{what} needs authentication: send HTTP Basic credentials of a user "
                 "from the RAPI users file", {"WWW-Authenticate": CHALLENGE})
    user = check_credentials(users, header)
    if user is None:
        raise HttpError(
            401, "authentication failed: unknown user, wrong password or credentials that "
                 "are not HTTP Basic", {"WWW-Authenticate": CHALLENGE})
    if not may(user, access):
        needed = "'write'" if access == "write" else "'read' or 'write'"
        raise HttpError(
            403, f"user {user.name!r} may not call {what}: that needs the {needed} option "
                 "in the RAPI users file")
    return user
