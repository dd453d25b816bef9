"""Answers kept a while and asked once for concurrent tasks; errors and answers not
worth keeping are asked again."""

from __future__ import annotations

import asyncio

import pytest

from corral.utils.recent import RecentAnswers


async def test_concurrent_tasks_share_one_question_and_keep_its_answer() -> None:
    asked: list[str] = []

    async def ask() -> str:
        asked.append("n1")
        await asyncio.sleep(0.01)
        return "yes"

    answers = RecentAnswers[str, str](ttl=60.0)
    assert await asyncio.gather(*(answers.get("n1", ask) for _ in range(10))) == ["yes"] * 10
    assert await answers.get("n1", ask) == "yes"
    assert asked == ["n1"]


async def test_errors_and_unkept_answers_are_asked_again() -> None:
    calls = 0

    async def failing() -> str:
        nonlocal calls
        calls += 1
        raise RuntimeError("node down")

    answers = RecentAnswers[str, str](ttl=60.0, keep=lambda answer: answer == "yes")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="node down"):
            await answers.get("n1", failing)
    assert calls == 2

    async def no() -> str:
        nonlocal calls
        calls += 1
        return "no"

    assert await answers.get("n1", no) == "no"
    assert await answers.get("n1", no) == "no"
    assert calls == 4
