"""The blocking client of the master daemon's luxi socket, for the command line.

It needs sockets and the standard library's ``json`` only (see
:mod:`corral.luxi.framing`), so a gnt-* tool starts without asyncio or msgspec;
daemons, the testbed and benchmarks use
:class:`~corral.luxi.async_client.AsyncClient`."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError, MasterUnreachableError, ProtocolError
from corral.luxi.framing import EOM, MAX_MESSAGE_BYTES, decode_answer, encode_call

if TYPE_CHECKING:
    from corral.luxi.calls import LuxiArgs

__all__ = ["Client", "unreachable"]

DEFAULT_TIMEOUT = 60.0


def unreachable(path: Path, err: OSError) -> MasterUnreachableError:
    """The error for not reaching the master daemon's socket ``path``."""
    return MasterUnreachableError(
        f"cannot reach the master daemon at {path}: {err.strerror or err}; "
        "is this the master node and is corral-masterd running "
        "(see 'corral-daemons status')?"
    )


#: Turns "cannot connect" into the error the user should see (see :class:`Client`).
Explain = Callable[[MasterUnreachableError], CorralError]


class Client:
    """A blocking luxi client; one connection, reused for every call.

    ``explain`` is called only when connecting fails, with the plain "cannot reach"
    error, and returns the error to raise instead: the command line uses it to say
    which node is the master when it runs elsewhere. Connecting on the master costs
    nothing extra, since the hook runs only on that failure path.
    """

    def __init__(self, path: Path, timeout: float = DEFAULT_TIMEOUT,
                 explain: Explain | None = None) -> None:
        self.path = path
        self.timeout = timeout
        self._explain = explain
        self._sock: socket.socket | None = None
        self._buffer = b""

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.path))
            except OSError as err:
                sock.close()
                failure = unreachable(self.path, err)
                if self._explain is not None:
                    raise self._explain(failure) from None
                raise failure from None
            self._sock = sock
        return self._sock

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` on the master daemon and return its result."""
        sock = self._connect()
        try:
            sock.sendall(encode_call(method, list(args)))
            # Earlier bytes held no EOM, so only each new chunk needs searching.
            found = EOM in self._buffer
            while not found:
                chunk = sock.recv(65536)
                if not chunk:
                    self.close()
                    raise ProtocolError("the master daemon closed the connection mid-answer")
                self._buffer += chunk
                found = EOM in chunk
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    raise ProtocolError("answer from the master daemon is too large")
        except TimeoutError:
            self.close()
            raise MasterUnreachableError(
                f"the master daemon did not answer {method} within {self.timeout:g}s"
            ) from None
        except OSError as err:
            self.close()
            raise unreachable(self.path, err) from None
        frame, _, self._buffer = self._buffer.partition(EOM)
        return decode_answer(frame)

    def send(self, args: LuxiArgs) -> Any:
        """Call the method ``args`` is the arguments of (its class names it), e.g.
        ``send(calls.QueryJobs(None, ["id"]))``."""
        from corral.luxi.calls import encode_args

        return self.call(type(args).__name__, *encode_args(args))

    def close(self) -> None:
        """Close the connection; the next call reconnects."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._buffer = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
