"""A small client of RAPI v2 (Ganeti's and corral's): requests, jobs and their logs.

Used by the tools that drive a cluster from outside over RAPI (``move-instance``).
Synchronous (``urllib``) so that a tool can run one client per thread; HTTPS with
basic authentication, the server certificate verified against the CA file given
(without one it is not verified, as Ganeti's tools do without ``--*-ca-file``).
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from corral.errors import CorralError

__all__ = ["JOB_WAIT_FIELDS", "JobFailed", "RapiClient", "RapiError", "read_password_file"]

#: What a job wait asks for.
JOB_WAIT_FIELDS = ["status", "opresult"]

#: ``on_log(log_type, message)`` gets each new entry of a job's log.
LogCallback = Callable[[str, Any], None]


class RapiError(CorralError):
    """A RAPI request failed: the server's status and message, or no answer."""

    code = "rapi-client"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class JobFailed(CorralError):
    """A job submitted over RAPI ended in error or was canceled."""

    code = "rapi-job-failed"


def read_password_file(path: str) -> str:
    """The password in ``path``: its one line, stripped (Ganeti's form)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as err:
        raise RapiError(f"cannot read the password file {path}: {err.strerror}") from None
    if not lines or not lines[0].strip():
        raise RapiError(f"the password file {path} is empty")
    return lines[0].strip()


class RapiClient:
    """One RAPI server at ``https://host:port``."""

    def __init__(self, host: str, port: int, *, username: str = "",
                 password: str | None = None, ca_file: str | None = None,
                 timeout: float = 60.0) -> None:
        self.host, self.port = host, port
        shown = f"[{host}]" if ":" in host else host
        self.base = f"https://{shown}:{port}"
        self.timeout = timeout
        self._auth: str | None = None
        if password is not None:
            token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
            self._auth = f"Basic {token}"
        if ca_file:
            try:
                self._context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as err:
                raise RapiError(f"cannot use the CA file {ca_file}: {err}") from None
            self._context.check_hostname = False  # a cluster certificate names the cluster
        else:
            self._context = ssl.create_default_context()
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE

    def request(self, method: str, path: str, query: Mapping[str, Any] | None = None,
                body: Any = None) -> Any:
        """Send one request; the decoded JSON answer, or :class:`RapiError`."""
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(
                {k: (int(v) if isinstance(v, bool) else v) for k, v in query.items()})
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self._auth:
            request.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self._context) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            try:
                message = json.loads(text).get("message", text)
            except (ValueError, AttributeError):
                message = text
            raise RapiError(f"{method} {path}: HTTP {err.code}: {message}", err.code) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise RapiError(f"cannot reach RAPI at {self.base}: {reason}") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise RapiError(f"{method} {path}: the answer is not JSON") from None

    # -- jobs ---------------------------------------------------------------------------

    def wait_for_job(self, job_id: int, on_log: LogCallback | None = None,
                     should_stop: Callable[[], bool] | None = None) -> list[Any]:
        """Follow a job to its end, handing each new log entry to ``on_log``; the
        results of its opcodes, or :class:`JobFailed` with the job's error.
        ``should_stop`` is asked between waits; when true the job is left running and
        :class:`JobFailed` is raised."""
        serial = -1
        previous: list[Any] | None = None
        while True:
            if should_stop is not None and should_stop():
                raise JobFailed(f"job {job_id}: stopped waiting (the other side failed)")
            answer = self.request("GET", f"/2/jobs/{job_id}/wait", body={
                "fields": JOB_WAIT_FIELDS, "previous_job_info": previous,
                "previous_log_serial": serial})
            if not answer:
                continue
            for entry in answer.get("log_entries") or []:
                serial = max(serial, int(entry[0]))
                if on_log is not None:
                    on_log(str(entry[2]), entry[3])
            previous = answer.get("job_info")
            status, result = previous if previous else (None, None)
            if status == "success":
                return list(result or [])
            if status in ("error", "canceled"):
                raise JobFailed(f"job {job_id} {status}: {_job_error(result)}")
            if not answer.get("log_entries"):
                time.sleep(0.05)


def _job_error(result: Any) -> str:
    """The message of a failed job's first failed opcode (Ganeti's error form)."""
    for entry in result or []:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list):
            details = entry[1]
            return str(details[0]) if details else str(entry[0])
        if entry is not None:
            return str(entry)
    return "no error message"
