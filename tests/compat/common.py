"""What the recorder, the replay test and the report share: the cases, the placeholders
each side's names are mapped onto, the normalisation of text and JSON bodies, and the
comparison of one case's observation with what Ganeti answered.

A case is one line of ``tests/data/ganeti-compat/cases.json``::

    {"id": "instance.list.unknown", "tool": "gnt-instance", "argv": ["list", "compat-x"]}
    {"id": "rapi.instance.404", "method": "GET", "path": "/2/instances/compat-x"}

``capture`` names a placeholder that takes what the case answered (see :func:`capture`).
``fields`` (RAPI) names keys of the body recorded whole as the ``fields`` aspect.
``argv``, ``path``, ``query`` and ``body`` may hold ``{node1}``, ``{cluster}``, ``{os}``,
``{filter}``: each side substitutes its own values. ``check`` names the aspects that
are compared (see :data:`DEFAULT_CLI_CHECKS`, :data:`DEFAULT_RAPI_CHECKS`); every
aspect is recorded whatever ``check`` says, so a case can be made stricter without
recording again.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "ganeti-compat"
CASES_FILE = DATA / "cases.json"
DIFFERENCES_FILE = DATA / "differences.json"
RECORDED_DIR = DATA / "recorded"

DEFAULT_CLI_CHECKS = ("exit", "stdout_head", "stderr_head")
DEFAULT_RAPI_CHECKS = ("status", "shape")
CLI_ASPECTS = ("exit", "stdout_head", "stderr_head", "stdout", "stderr", "job_status")
RAPI_ASPECTS = ("status", "shape", "error", "body", "job_status", "fields")
FINISHED = ("success", "error", "canceled")

#: Placeholders and what they are called in case texts.
PLACEHOLDERS = ("cluster", "node1", "node1_short", "node1_ip", "os", "filter", "rapi",
                "lastjob")


@dataclass
class Side:
    """One cluster the cases run against: its names (for the cases' placeholders and
    for normalising output) and how to reach its RAPI."""

    name: str
    values: dict[str, str]
    rapi_url: str
    rapi_user: str
    rapi_password: str
    extra_literals: dict[str, str] = field(default_factory=dict)

    def fill(self, text: str) -> str:
        """``text`` with every ``{placeholder}`` replaced by this side's value."""
        for key, value in self.values.items():
            text = text.replace("{" + key + "}", value)
        return text

    def fill_json(self, value: Any) -> Any:
        """:meth:`fill` applied to every string inside a JSON value."""
        if isinstance(value, str):
            return self.fill(value)
        if isinstance(value, list):
            return [self.fill_json(v) for v in value]
        if isinstance(value, dict):
            return {self.fill(k): self.fill_json(v) for k, v in value.items()}
        return value

    def literals(self) -> list[tuple[str, str]]:
        """Run-specific strings of this side and their placeholders, longest first."""
        pairs = {v: f"<{k}>" for k, v in self.values.items()
                 if v and k not in ("filter", "lastjob")}
        pairs.update(self.extra_literals)
        return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


# -- normalisation ------------------------------------------------------------------------

_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.MULTILINE), r) for p, r in (
        (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>"),
        (r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
         r" [ \d]\d \d\d:\d\d:\d\d \d{4}\b", "<time>"),
        (r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?\b", "<time>"),
        (r"\b(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\b", "<mac>"),
        (r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?:/\d+)?\b", "<ip>"),
        (r"\b\d+\.\d+\.\d+(?:[.~-][0-9a-z]+)*\b", "<version>"),
        (r"\b\d{9,}(?:\.\d+)?\b", "<ts>"),
        (r"(JobID:|[Jj]ob ID:|[Jj]ob ID|[Jj]ob|[Jj]obs) \d+", r"\1 <job>"),
        (r"\b\d+(?:\.\d+)? seconds\b", "<secs> seconds"),
        (r"\bjob=\d+", "job=<job>"),
        (r"^(Watermark:)[ \t]+\d+", r"\1 <job>"),
        (r"^\d+(:)", r"<job>\1"),
        (r"^\d+$", "<n>"),
        (r"\b\d+(?:\.\d+)?[KMGT]\b", "<size>"),
        (r"[ \t]+", " "),
        (r" +$", ""),
        (r"^ ", ""),
    ))


def normalise(text: str, side: Side) -> str:
    """``text`` with run-specific values replaced by placeholders, runs of blanks made
    one space and lines stripped of leading blanks (column widths and alignment follow
    the values)."""
    for literal, placeholder in side.literals():
        text = re.sub(r"(?<![\w.<-])" + re.escape(literal) + r"(?![\w>-])", placeholder, text)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text.strip("\n")


def normalise_json(value: Any, side: Side) -> Any:
    """:func:`normalise` applied to every string and key inside a JSON value."""
    if isinstance(value, str):
        return normalise(value, side)
    if isinstance(value, list):
        return [normalise_json(v, side) for v in value]
    if isinstance(value, dict):
        return {normalise(k, side): normalise_json(v, side) for k, v in value.items()}
    return value


def scrub_times(value: Any) -> Any:
    """A JSON value with epoch timestamps (numbers past 10^9) replaced by ``<ts>``,
    the microseconds of a job's ``[seconds, microseconds]`` times by ``<usec>``, and a
    job's own ``id`` and a filter's ``watermark`` by ``<job>``."""
    if isinstance(value, list):
        items = [scrub_times(v) for v in value]
        if len(items) == 2 and items[0] == "<ts>" and isinstance(items[1], int):
            items[1] = "<usec>"
        return items
    if isinstance(value, dict):
        scrubbed = {k: scrub_times(v) for k, v in value.items()}
        if "ops" in scrubbed and isinstance(scrubbed.get("id"), int | str):
            scrubbed["id"] = "<job>"
        if isinstance(scrubbed.get("watermark"), int):  # a filter's: a job id
            scrubbed["watermark"] = "<job>"
        return scrubbed
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 1e9:
        return "<ts>"
    return value


def shape(value: Any) -> Any:
    """The shape of a (normalised) JSON value: types instead of values, a dict's keys
    kept, a list as the distinct shapes of its elements."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        seen: list[Any] = []
        for item in value:
            s = shape(item)
            if s not in seen:
                seen.append(s)
        return sorted(seen, key=lambda s: json.dumps(s, sort_keys=True))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def first_line(text: str) -> str:
    """The first line of ``text`` ('' when empty)."""
    return text.split("\n", 1)[0] if text else ""


# -- running cases ------------------------------------------------------------------------

def load_cases() -> list[dict[str, Any]]:
    """Every case, in the order they run."""
    cases: list[dict[str, Any]] = json.loads(CASES_FILE.read_text())["cases"]
    return cases


def case_group(case: Mapping[str, Any]) -> str:
    """The data file a case's recording lives in: its tool, or ``rapi``."""
    return str(case.get("tool", "rapi"))


def checks(case: Mapping[str, Any]) -> tuple[str, ...]:
    """The aspects compared for ``case``."""
    default = DEFAULT_CLI_CHECKS if "tool" in case else DEFAULT_RAPI_CHECKS
    return tuple(case.get("check", default))


def cli_observation(exit_code: int, stdout: str, stderr: str, side: Side,
                    job_statuses: list[str] | None = None) -> dict[str, Any]:
    """What a CLI case recorded, normalised."""
    out = normalise(stdout, side)
    err = normalise(stderr, side)
    return {"exit": exit_code, "stdout_head": first_line(out), "stderr_head": first_line(err),
            "stdout": out, "stderr": err, "job_status": job_statuses or []}


def rapi_observation(status: int, body: Any, side: Side,
                     job_status: str | None = None) -> dict[str, Any]:
    """What a RAPI case recorded, normalised; ``error`` holds an error body's code and
    the first line of its message."""
    norm = normalise_json(body, side)
    error = None
    if isinstance(norm, dict) and "code" in norm and "message" in norm:
        error = {"code": norm["code"], "message": first_line(str(norm["message"]))}
    form = shape(norm)
    if job_status is not None:
        norm = "<job>"  # a job id, which is run-specific (its type stays in the shape)
    norm = scrub_times(norm)
    text = json.dumps(norm, sort_keys=True)
    return {"status": status, "shape": form, "error": error,
            "body": norm if len(text) <= 4000 else None, "job_status": job_status}


def job_ids_in(text: str) -> list[int]:
    """Job ids a gnt-* command printed (``JobID: N``, a bare ``N``, ``N: NAME``)."""
    found = re.findall(r"JobID: (\d+)", text)
    found += re.findall(r"^(\d+)(?::.*)?$", text, re.MULTILINE)
    return sorted({int(n) for n in found})


class Rapi:
    """A minimal RAPI client (the recorder's and the replay's: the same requests)."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE

    def request(self, method: str, path: str, query: Mapping[str, Any] | None = None,
                body: Any = None, auth: str = "ok", raw_body: str | None = None,
                ) -> tuple[int, Any, dict[str, str]]:
        """Send one request; the status, the decoded body (text when not JSON) and the
        response headers."""
        url = self.side.rapi_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = None
        if raw_body is not None:
            data = raw_body.encode()
        elif body is not None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        if auth != "none":
            password = self.side.rapi_password if auth == "ok" else "compat-wrong-password"
            token = base64.b64encode(f"{self.side.rapi_user}:{password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=60) as resp:
                status, payload, headers = resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as err:
            status, payload, headers = err.code, err.read(), dict(err.headers)
        try:
            decoded: Any = json.loads(payload) if payload else None
        except ValueError:
            decoded = payload.decode(errors="replace")
        return status, decoded, headers

    def wait_job(self, job_id: int, timeout: float = 60) -> str:
        """Poll a job until it ends; its final status (``timeout`` if it did not)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body, _ = self.request("GET", f"/2/jobs/{job_id}")
            if status == 200 and isinstance(body, dict) and body.get("status") in FINISHED:
                return str(body["status"])
            time.sleep(0.1)
        return "timeout"


def capture(side: Side, case: Mapping[str, Any], answer: Any) -> None:
    """For a case with ``"capture": NAME``: remember what it answered (a RAPI string,
    or the last line a CLI command printed) as the placeholder ``{NAME}`` of later
    cases, e.g. the UUID of a filter it added."""
    name = case.get("capture")
    if not name:
        return
    if isinstance(answer, str) and "tool" in case:
        lines = answer.strip().splitlines()
        answer = lines[-1].strip() if lines else ""
    side.values[str(name)] = answer if isinstance(answer, str) else ""


def cli_jobs(rapi: Rapi, case: Mapping[str, Any], stdout: str, stderr: str) -> list[str]:
    """For a case that submits jobs (``"jobs": true``): wait for the jobs the command
    printed, remember the last as ``{lastjob}``, and return their final statuses."""
    if not case.get("jobs"):
        return []
    ids = job_ids_in(stdout + "\n" + stderr)
    if ids:
        rapi.side.values["lastjob"] = str(ids[-1])
    return [rapi.wait_job(j) for j in ids]


def job_id_of(body: Any) -> int | None:
    """The job id a RAPI call answered with, if it answered with one."""
    if isinstance(body, bool):
        return None
    if isinstance(body, int):
        return body
    if isinstance(body, str) and body.isdigit():
        return int(body)
    return None


def run_rapi_case(rapi: Rapi, case: Mapping[str, Any]) -> dict[str, Any]:
    """Send a RAPI case on ``rapi``'s side; its normalised observation."""
    side = rapi.side
    query = side.fill_json(case.get("query")) if case.get("query") else None
    body = side.fill_json(case["body"]) if "body" in case else None
    raw = side.fill(case["raw_body"]) if "raw_body" in case else None
    status, decoded, _ = rapi.request(case["method"], side.fill(case["path"]), query, body,
                                      case.get("auth", "ok"), raw)
    job_status = None
    job = job_id_of(decoded) if case["method"] != "GET" else None
    if status == 200 and job is not None:
        side.values["lastjob"] = str(job)
        job_status = rapi.wait_job(job)
    if status == 200:
        capture(side, case, decoded)
    observed = rapi_observation(status, decoded, side, job_status)
    if case.get("fields"):
        # chosen keys of a large body (a job's status, opstatus ...), whole
        norm = scrub_times(normalise_json(decoded, side))
        observed["fields"] = {k: norm.get(k) for k in case["fields"]} \
            if isinstance(norm, dict) else None
    return observed


# -- comparison ---------------------------------------------------------------------------

def compare_shape(want: Any, got: Any, where: str = "$") -> list[str]:
    """Where ``got`` lacks what ``want`` has. Extra keys in ``got`` are allowed (a
    client ignores what it does not know); a recorded ``null`` accepts anything."""
    if want == "null":
        return []
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: object expected, got {json.dumps(got)[:60]}"]
        problems = []
        missing = sorted(set(want) - set(got))
        if missing:
            problems.append(f"{where}: missing keys {missing}")
        for key in sorted(set(want) & set(got)):
            problems += compare_shape(want[key], got[key], f"{where}.{key}")
        return problems
    if isinstance(want, list):
        if not isinstance(got, list):
            return [f"{where}: list expected, got {json.dumps(got)[:60]}"]
        if not want or not got:
            return [] if not want and not got else [
                f"{where}: {'empty' if not got else 'non-empty'} list, expected "
                f"{'empty' if not want else 'non-empty'}"]
        problems = []
        for item in want:
            if not any(not compare_shape(item, g) for g in got):
                best = min((compare_shape(item, g, f"{where}[]") for g in got), key=len)
                problems += best
        return problems
    if want != got and not (want in ("int", "float") and got in ("int", "float")):
        return [f"{where}: {want} expected, got {json.dumps(got)[:60]}"]
    return []


def compare(case: Mapping[str, Any], want: Mapping[str, Any],
            got: Mapping[str, Any]) -> list[str]:
    """The differences between the recorded and the observed aspects a case checks."""
    problems: list[str] = []
    for aspect in checks(case):
        if aspect == "shape":
            problems += [f"shape {p}" for p in compare_shape(want["shape"], got["shape"])]
        elif aspect == "stderr" and _ganeti_lines_first(want.get(aspect), got.get(aspect)):
            continue
        elif want.get(aspect) != got.get(aspect):
            problems.append(f"{aspect}: Ganeti {json.dumps(want.get(aspect))[:300]} "
                            f"!= corral {json.dumps(got.get(aspect))[:300]}")
    return problems


def _ganeti_lines_first(want: Any, got: Any) -> bool:
    """Whether an error text is Ganeti's, whole lines, followed only by lines of corral's
    own: the issue's rule for errors ("keep Ganeti's first lines, add corral's detail
    after them"). What scripts read, the first lines, is Ganeti's; a line of Ganeti's
    that corral changed or extended still differs."""
    if not isinstance(want, str) or not isinstance(got, str) or not want:
        return False
    ganeti, corral = want.splitlines(), got.splitlines()
    return len(corral) > len(ganeti) and corral[:len(ganeti)] == ganeti


def load_recorded() -> dict[str, dict[str, Any]]:
    """Every recorded observation by case id."""
    recorded: dict[str, dict[str, Any]] = {}
    for path in sorted(RECORDED_DIR.glob("*.json")):
        recorded.update(json.loads(path.read_text())["cases"])
    return recorded


def load_differences() -> dict[str, dict[str, str]]:
    """The annotations by case id."""
    if not DIFFERENCES_FILE.exists():
        return {}
    data: dict[str, dict[str, str]] = json.loads(DIFFERENCES_FILE.read_text())["cases"]
    return data
