"""Unit tests never talk to a terminal: a confirmation question finds none, as under
cron or CI, unless a test hands :func:`corral.cli.prompt.ask_user` its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from corral.cli import prompt


@contextmanager
def _no_tty(device: str = "/dev/tty") -> Iterator[None]:
    yield None


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions are answered with their default, as without a terminal."""
    monkeypatch.setattr(prompt, "open_tty", _no_tty)
