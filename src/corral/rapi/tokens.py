"""Give a RAPI user a ``/placement/`` token: ``python -m corral.rapi.tokens USER``.

Adds a fresh random token's hash to the user's options in the RAPI users file
(``placement-token={SHA256}...``, :mod:`corral.rapi.users`) and prints the token once;
send SIGHUP to the RAPI daemon (or restart it) to have it read the file again, and run
``gnt-cluster redist-conf`` to copy the file to the master candidates (a new master
after a failover knows the token only then). The
token then authenticates ``X-Auth-Token`` requests to ``/placement/`` as that user,
with the user's rights (``write`` for changes).
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from corral.errors import ParameterError
from corral.paths import Paths
from corral.rapi.users import parse_rapi_users_file, placement_token_option
from corral.utils.files import write_public

__all__ = ["add_token", "main"]

_NEXT_STEPS = ("token added; send SIGHUP to the RAPI daemon so that it reads the users file "
               "again, and run 'gnt-cluster redist-conf' to copy the file to the master "
               "candidates")


def add_token(users_file: Path, user: str, token: str | None = None) -> str:
    """Add a token (``token``, or a new random one) to ``user``'s line; the token."""
    text = users_file.read_text()
    if user not in parse_rapi_users_file(text):
        raise ParameterError(f"no user {user!r} in {users_file}; add the user first")
    token = token or secrets.token_urlsafe(32)
    option = placement_token_option(token)
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):  # the last line of a user wins
        parts = lines[index].split(None, 2)
        if len(parts) >= 2 and parts[0] == user and not parts[0].startswith("#"):
            options = parts[2].strip() + "," if len(parts) == 3 else ""
            lines[index] = f"{parts[0]} {parts[1]} {options}{option}"
            break
    # the file holds passwords: the new one gets the old one's owner, group and mode
    # from its creation on (with privilege separation it is the RAPI daemon's)
    before = users_file.stat()
    write_public(users_file, "\n".join(lines) + "\n", before.st_mode & 0o777,
                 uid=before.st_uid, gid=before.st_gid)
    return token


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m corral.rapi.tokens USER``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m corral.rapi.tokens USER\n"
              "adds a /placement/ token for USER to the RAPI users file and prints it",
              file=sys.stderr)
        return 2
    try:
        print(add_token(Paths.from_env().rapi_users, args[0]))
        print(_NEXT_STEPS, file=sys.stderr)
    except (ParameterError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
