"""A raw luxi connection for the fuzz tests, and the checks every answer must pass.

The tests talk to the master daemon's socket byte by byte (the project's clients
would refuse to send most of what is fuzzed), so this module frames nothing itself
beyond the end-of-message byte.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

EOM = b"\x03"
#: A request every healthy master daemon answers with success.
VALID = b'{"method":"QueryClusterInfo","args":[],"version":1}' + EOM


class LuxiConnection:
    """One connection to a master daemon's luxi socket."""

    def __init__(self, path: Path, timeout: float = 60.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._buffer = b""

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def __enter__(self) -> LuxiConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        """Send ``data`` as it is."""
        self.sock.sendall(data)

    def answer(self) -> dict[str, Any] | None:
        """The next answer, decoded and checked for luxi's shape; None when the
        server closed the connection instead."""
        while EOM not in self._buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                assert not self._buffer, f"connection closed mid-answer: {self._buffer[:200]!r}"
                return None
            self._buffer += chunk
        frame, _, self._buffer = self._buffer.partition(EOM)
        return check_answer(frame)

    def call(self, data: bytes) -> dict[str, Any] | None:
        """Send ``data`` and read one answer."""
        self.send(data)
        return self.answer()


def check_answer(frame: bytes) -> dict[str, Any]:
    """``frame`` decoded; fails unless it is luxi's answer shape and, if a failure, a
    clear error (a code and a message), not an internal error."""
    answer = json.loads(frame)
    assert isinstance(answer, dict), frame[:300]
    assert isinstance(answer.get("success"), bool), frame[:300]
    if not answer["success"]:
        error = answer.get("result")
        assert isinstance(error, dict), frame[:300]
        assert isinstance(error.get("code"), str) and error["code"], frame[:300]
        assert isinstance(error.get("message"), str) and error["message"], frame[:300]
        assert error["code"] != "internal-error", f"internal error: {error['message']}"
    return answer


def assert_serves(path: Path) -> None:
    """A new connection gets a valid request answered with success."""
    with LuxiConnection(path) as conn:
        answer = conn.call(VALID)
    assert answer is not None and answer["success"], answer
