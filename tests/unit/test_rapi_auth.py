"""RAPI authentication: the users file, HTTP Basic credentials and Ganeti's access rules."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from corral.rapi.auth import CHALLENGE, Users, authorize, check_credentials, may
from corral.rapi.errors import HttpError
from corral.rapi.users import rapi_ha1

USERS_FILE = """\
# comment
writer  {HA1}%(ha1)s  write
reader  {cleartext}readpw  read
nobody  plainpw
both    bothpw   read,write
"""


@pytest.fixture
def users(tmp_path: Path) -> Users:
    path = tmp_path / "users"
    path.write_text(USERS_FILE % {"ha1": rapi_ha1("writer", "s3cret")})
    users = Users(path)
    assert users.load()
    return users


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_password_schemes(users: Users) -> None:
    assert len(users) == 4
    assert check_credentials(users, basic("writer", "s3cret")) is not None
    assert check_credentials(users, basic("writer", "wrong")) is None
    assert check_credentials(users, basic("reader", "readpw")) is not None
    assert check_credentials(users, basic("nobody", "plainpw")) is not None
    assert check_credentials(users, basic("ghost", "plainpw")) is None
    # A password may contain colons: only the first one separates the user.
    assert check_credentials(users, basic("nobody", "plainpw:x")) is None


@pytest.mark.parametrize("header", [
    "Digest username=writer", "Basic", "Basic !!!notbase64", "Bearer abc",
    "Basic " + base64.b64encode(b"no-colon").decode(), "",
])
def test_malformed_or_foreign_credentials_prove_nothing(users: Users, header: str) -> None:
    assert check_credentials(users, header) is None


def test_scheme_name_is_case_insensitive(users: Users) -> None:
    assert check_credentials(users, basic("writer", "s3cret").replace("Basic", "bAsIc"))


def test_options_grant_access_levels(users: Users) -> None:
    def user(name: str, password: str):  # type: ignore[no-untyped-def]
        found = check_credentials(users, basic(name, password))
        assert found is not None
        return found

    writer, reader = user("writer", "s3cret"), user("reader", "readpw")
    nobody, both = user("nobody", "plainpw"), user("both", "bothpw")
    assert [may(u, "write") for u in (writer, reader, nobody, both)] == [True, False, False, True]
    assert [may(u, "read") for u in (writer, reader, nobody, both)] == [True, True, False, True]
    assert all(may(u, "public") for u in (writer, reader, nobody, both))


def test_anonymous_public_requests_pass_unless_authentication_is_required(users: Users) -> None:
    assert authorize(users, "public", None, require_auth=False, what="GET /2/info") is None
    with pytest.raises(HttpError) as caught:
        authorize(users, "public", None, require_auth=True, what="GET /2/info")
    assert caught.value.status == 401
    assert caught.value.headers == {"WWW-Authenticate": 'Basic realm="Ganeti Remote API"'}
    assert "GET /2/info needs authentication" in caught.value.message


@pytest.mark.parametrize("access", ["read", "write"])
def test_protected_operations_need_credentials(users: Users, access: str) -> None:
    with pytest.raises(HttpError) as caught:
        authorize(users, access, None, require_auth=False, what="PUT /2/x")  # type: ignore[arg-type]
    assert caught.value.status == 401 and caught.value.headers["WWW-Authenticate"] == CHALLENGE


def test_credentials_sent_anyway_are_checked(users: Users) -> None:
    with pytest.raises(HttpError) as caught:
        authorize(users, "public", basic("writer", "bad"), require_auth=False, what="GET /")
    assert caught.value.status == 401
    user = authorize(users, "public", basic("nobody", "plainpw"), require_auth=True,
                     what="GET /")
    assert user is not None and user.name == "nobody"


def test_missing_rights_are_forbidden_not_unauthorized(users: Users) -> None:
    with pytest.raises(HttpError) as caught:
        authorize(users, "write", basic("reader", "readpw"), require_auth=False,
                  what="PUT /2/instances/[instance_name]/startup")
    assert caught.value.status == 403 and not caught.value.headers
    assert "'reader'" in caught.value.message and "'write' option" in caught.value.message
    with pytest.raises(HttpError) as caught:
        authorize(users, "read", basic("nobody", "plainpw"), require_auth=False,
                  what="GET /2/query/[resource]")
    assert caught.value.status == 403 and "'read' or 'write'" in caught.value.message
    assert authorize(users, "read", basic("reader", "readpw"), require_auth=False, what="x")
    assert authorize(users, "write", basic("writer", "s3cret"), require_auth=False, what="x")


def test_reload_picks_up_changes_and_keeps_users_when_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "users"
    users = Users(path)
    assert not users.load() and len(users) == 0, "a missing file means no users"
    path.write_text("alice pw write\n")
    assert users.load() and users.get("alice") is not None
    path.write_text("bob pw read\n")
    assert users.load()
    assert users.get("alice") is None and users.get("bob") is not None
    path.unlink()
    path.mkdir()  # unreadable as a file: the users read before stay
    assert not users.load()
    assert users.get("bob") is not None
