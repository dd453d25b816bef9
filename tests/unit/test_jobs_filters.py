"""Job filter rules: checking rules, their order, and what they decide for a job."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from corral.errors import ParameterError, QueryFilterError, UnknownFieldError
from corral.jobs.filters import (
    Decision,
    FilterChain,
    action_from_text,
    validate_rule,
)
from corral.objects import FilterRule
from corral.opcodes.reason import client_entry, queue_entry, user_entry
from corral.qlang import compile_filter as real_compile_filter

MAINT = ("gnt:user", "maintenance pink bunny", 1_700_000_000_000_000_000)
OTHER = ("gnt:user", "routine", 1_700_000_000_000_000_001)


def cli_trail(text: str | None, job_id: int, index: int = 0) -> list[list[Any]]:
    """A trail as ``gnt-debug delay [--reason TEXT]`` and the queue make it."""
    trail = [user_entry(text)] if text is not None else []
    trail += [client_entry("gnt-debug", "delay"), queue_entry("OP_TEST_DELAY", job_id, index)]
    return [list(entry) for entry in trail]


def rule(
    uuid: str,
    *,
    priority: int = 0,
    watermark: int = 0,
    predicates: list[Any] | None = None,
    action: str | list[Any] = "REJECT",
) -> FilterRule:
    return FilterRule(
        uuid=uuid,
        priority=priority,
        watermark=watermark,
        predicates=predicates or [],
        action=action,
    )


def op(
    op_id: str = "OP_TEST_DELAY", reason: list[Any] | None = None, **params: Any
) -> dict[str, Any]:
    return {"OP_ID": op_id, "reason": list(reason or []), "priority": 0, **params}


def decide(
    rules: list[FilterRule], job_id: int = 1, ops: list[dict[str, Any]] | None = None
) -> Decision:
    return FilterChain.from_rules(rules).decide(job_id, ops if ops is not None else [op()])


# --- actions ------------------------------------------------------------------------------


def test_no_rule_accepts_with_no_rule_uuid() -> None:
    assert decide([]) == Decision("ACCEPT", None, None)


@pytest.mark.parametrize("action", ["ACCEPT", "PAUSE", "REJECT"])
def test_matching_rule_decides_with_its_action_and_uuid(action: str) -> None:
    assert decide([rule("u1", action=action)]) == Decision(action, "u1", None)  # type: ignore[arg-type]


def test_rate_limit_decision_carries_the_limit() -> None:
    assert decide([rule("u1", action=["RATE_LIMIT", 3])]) == Decision("RATE_LIMIT", "u1", 3)


def test_continue_goes_on_to_the_next_rule() -> None:
    rules = [
        rule("a", priority=0, action="CONTINUE"),
        rule("b", priority=1, action="PAUSE"),
    ]
    assert decide(rules) == Decision("PAUSE", "b", None)


def test_only_continue_rules_accept_by_default() -> None:
    assert decide([rule("a", action="CONTINUE"), rule("b", action="CONTINUE")]) == Decision(
        "ACCEPT"
    )


def test_rule_whose_predicates_do_not_all_hold_is_skipped() -> None:
    rules = [
        rule(
            "a",
            priority=0,
            predicates=[["jobid", [">", "id", 5]], ["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]],
        ),
        rule("b", priority=1, action="PAUSE"),
    ]
    assert decide(rules, job_id=3) == Decision("PAUSE", "b")
    assert decide(rules, job_id=6) == Decision("REJECT", "a")
    assert decide(rules, job_id=6, ops=[op("OP_CLUSTER_QUERY")]) == Decision("PAUSE", "b")


# --- order --------------------------------------------------------------------------------

ORDERED = [
    rule("z", priority=0, watermark=9, action="PAUSE"),
    rule("c", priority=1, watermark=1, action="REJECT"),
    rule("a", priority=1, watermark=2, action="ACCEPT"),
    rule("b", priority=1, watermark=2, action=["RATE_LIMIT", 1]),
    rule("a", priority=2, watermark=0, action="CONTINUE"),
]


@pytest.mark.parametrize("perm", list(itertools.permutations(range(len(ORDERED))))[::7])
def test_rules_are_ordered_by_priority_then_watermark_then_uuid(perm: tuple[int, ...]) -> None:
    chain = FilterChain.from_rules([ORDERED[i] for i in perm])
    assert chain.uuids == ("z", "c", "a", "b", "a")


def test_lower_priority_number_wins_even_with_higher_watermark() -> None:
    rules = [
        rule("a", priority=5, watermark=0, action="REJECT"),
        rule("b", priority=0, watermark=99, action="PAUSE"),
    ]
    assert decide(rules) == Decision("PAUSE", "b")


def test_lower_watermark_wins_at_equal_priority() -> None:
    rules = [
        rule("a", priority=1, watermark=7, action="REJECT"),
        rule("b", priority=1, watermark=3, action="PAUSE"),
    ]
    assert decide(rules) == Decision("PAUSE", "b")


def test_uuid_breaks_remaining_ties() -> None:
    rules = [
        rule("bbb", priority=1, watermark=3, action="REJECT"),
        rule("aaa", priority=1, watermark=3, action="PAUSE"),
    ]
    assert decide(rules) == Decision("PAUSE", "aaa")


# --- jobid and watermark ------------------------------------------------------------------


def test_watermark_is_substituted_in_value_position() -> None:
    chain = FilterChain.from_rules(
        [rule("d", watermark=10, predicates=[["jobid", [">", "id", "watermark"]]])]
    )
    assert chain.decide(10, [op()]) == Decision("ACCEPT")
    assert chain.decide(11, [op()]) == Decision("REJECT", "d")


def test_watermark_is_substituted_in_nested_positions() -> None:
    expr = [
        "&",
        ["!", ["<", "id", "watermark"]],
        ["|", ["==", "id", "watermark"], ["&", [">", "id", 100], ["!=", "id", "watermark"]]],
    ]
    chain = FilterChain.from_rules([rule("n", watermark=50, predicates=[["jobid", expr]])])
    decided = {jid: chain.decide(jid, [op()]).action for jid in (49, 50, 51, 100, 101)}
    assert decided == {49: "ACCEPT", 50: "REJECT", 51: "ACCEPT", 100: "ACCEPT", 101: "REJECT"}


def test_watermark_is_per_rule() -> None:
    rules = [
        rule(
            "lo",
            priority=0,
            watermark=5,
            predicates=[["jobid", ["<=", "id", "watermark"]]],
            action="PAUSE",
        ),
        rule("hi", priority=1, watermark=8, predicates=[["jobid", ["<=", "id", "watermark"]]]),
    ]
    chain = FilterChain.from_rules(rules)
    assert [chain.decide(j, [op()]).rule_uuid for j in (5, 6, 8, 9)] == ["lo", "hi", "hi", None]


def test_watermark_in_field_position_is_not_a_field() -> None:
    with pytest.raises(UnknownFieldError, match=r"predicate 1 \('jobid'\).*'watermark'.*'id'"):
        validate_rule(0, [["jobid", ["==", "watermark", 5]]], "REJECT")


def test_jobid_compared_with_a_string_is_false_not_an_error() -> None:
    assert decide([rule("s", predicates=[["jobid", ["<", "id", "abc"]]])]) == Decision("ACCEPT")


# --- opcode -------------------------------------------------------------------------------


def test_opcode_predicate_holds_if_any_opcode_matches() -> None:
    rules = [rule("o", predicates=[["opcode", ["=", "OP_ID", "OP_CLUSTER_QUERY"]]])]
    assert decide(rules, ops=[op(), op("OP_CLUSTER_QUERY")]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op(), op()]) == Decision("ACCEPT")
    assert decide(rules, ops=[]) == Decision("ACCEPT")


def test_opcode_predicate_sees_every_field() -> None:
    rules = [rule("o", predicates=[["opcode", ["&", [">=", "duration", 10], ["?", "on_master"]]]])]
    assert decide(rules, ops=[op(duration=10.0, on_master=True)]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op(duration=10.0, on_master=False)]) == Decision("ACCEPT")
    assert decide(rules, ops=[op(duration=9.0, on_master=True)]) == Decision("ACCEPT")


def test_opcode_missing_a_field_does_not_match_under_a_nested_negation() -> None:
    # Below the top level a negation is evaluated per opcode (as Ganeti): an opcode
    # lacking 'duration' matches neither ['=', 'duration', 5] nor its negation.
    rules = [rule("o", predicates=[["opcode", ["&", ["!", ["=", "duration", 5]]]]])]
    assert decide(rules, ops=[op("OP_CLUSTER_QUERY")]) == Decision("ACCEPT")
    assert decide(rules, ops=[op(duration=3)]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op("OP_CLUSTER_QUERY"), op(duration=3)]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op(duration=5), op(duration=3)]) == Decision("REJECT", "o")


def test_opcode_top_level_negation_means_no_opcode_matches() -> None:
    rules = [rule("o", predicates=[["opcode", ["!", ["=", "duration", 5]]]])]
    # An opcode lacking the field does not match the inner expression either.
    assert decide(rules, ops=[op("OP_CLUSTER_QUERY")]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op(duration=3), op("OP_CLUSTER_QUERY")]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op(duration=3), op(duration=5)]) == Decision("ACCEPT")
    assert decide(rules, ops=[]) == Decision("REJECT", "o")


def test_opcode_dotted_field_reaches_into_nested_dicts() -> None:
    rules = [rule("o", predicates=[["opcode", ["=", "beparams.memory", 512]]])]
    assert decide(rules, ops=[op(beparams={"memory": 512})]) == Decision("REJECT", "o")
    assert decide(rules, ops=[op(beparams={"vcpus": 1})]) == Decision("ACCEPT")
    assert decide(rules, ops=[op(beparams=5)]) == Decision("ACCEPT")


def test_opcode_impossible_comparison_does_not_match() -> None:
    rules = [rule("o", predicates=[["opcode", ["<", "duration", "abc"]]])]
    assert decide(rules, ops=[op(duration=1.0)]) == Decision("ACCEPT")


# --- reason -------------------------------------------------------------------------------


def test_reason_predicate_holds_if_any_entry_of_any_opcode_matches() -> None:
    rules = [rule("r", predicates=[["reason", ["=~", "reason", "pink bunny"]]])]
    assert decide(rules, ops=[op(reason=[OTHER]), op(reason=[OTHER, MAINT])]) == Decision(
        "REJECT", "r"
    )
    assert decide(rules, ops=[op(reason=[OTHER]), op(reason=[])]) == Decision("ACCEPT")


def test_reason_fields_source_and_timestamp() -> None:
    rules = [
        rule(
            "r",
            predicates=[
                ["reason", ["&", ["=", "source", "gnt:user"], [">", "timestamp", MAINT[2]]]]
            ],
        )
    ]
    assert decide(rules, ops=[op(reason=[list(MAINT)])]) == Decision("ACCEPT")
    assert decide(rules, ops=[op(reason=[list(OTHER)])]) == Decision("REJECT", "r")


def test_reason_top_level_negation_means_no_entry_matches() -> None:
    rules = [rule("r", predicates=[["reason", ["!", ["=", "source", "user"]]]])]
    assert decide(rules, ops=[op(reason=cli_trail(None, 7))]) == Decision("REJECT", "r")
    assert decide(rules, ops=[op(reason=cli_trail("x", 7))]) == Decision("ACCEPT")
    # The entry may be in any opcode of the job.
    two = [op(reason=cli_trail(None, 7)), op(reason=cli_trail("x", 7, index=1))]
    assert decide(rules, ops=two) == Decision("ACCEPT")
    assert decide(rules, ops=[op(reason=[])]) == Decision("REJECT", "r")


def test_reason_nested_negation_is_per_entry() -> None:
    # Inside '&' the negation relates fields of the same entry: "a user entry whose
    # text is not 'x'"; corral's own entries are not user entries.
    expr = ["&", ["=", "source", "user"], ["!", ["=", "reason", "x"]]]
    rules = [rule("r", predicates=[["reason", expr]])]
    assert decide(rules, ops=[op(reason=cli_trail("x", 7))]) == Decision("ACCEPT")
    assert decide(rules, ops=[op(reason=cli_trail("y", 7))]) == Decision("REJECT", "r")
    assert decide(rules, ops=[op(reason=cli_trail(None, 7))]) == Decision("ACCEPT")


def test_reason_double_negation_means_every_entry_matches() -> None:
    rules = [rule("r", predicates=[["reason", ["!", ["!", ["=~", "source", "^gnt:"]]]]])]
    assert decide(rules, ops=[op(reason=cli_trail(None, 7))]) == Decision("REJECT", "r")
    assert decide(rules, ops=[op(reason=cli_trail("x", 7))]) == Decision("ACCEPT")


@pytest.mark.parametrize("expr", [["!"], ["!", ["=", "source", "user"], ["=", "reason", "x"]]])
@pytest.mark.parametrize("name", ["opcode", "reason"])
def test_malformed_negation_is_still_refused(name: str, expr: list[Any]) -> None:
    with pytest.raises(QueryFilterError, match=rf"^predicate 1 \('{name}'\): .*'!'"):
        validate_rule(0, [[name, expr]], "REJECT")


def test_reason_conditions_must_hold_for_one_entry() -> None:
    # source of one entry and text of another do not combine.
    expr = ["&", ["=", "source", "gnt:client"], ["=", "reason", "maintenance pink bunny"]]
    rules = [rule("r", predicates=[["reason", expr]])]
    ops = [op(reason=[("gnt:client", "gnt-job submit", 1), MAINT])]
    assert decide(rules, ops=ops) == Decision("ACCEPT")


# --- the seed's examples ------------------------------------------------------------------


def test_seed_example_draining_the_queue() -> None:
    chain = FilterChain.from_rules(
        [rule("drain", priority=0, watermark=20, predicates=[["jobid", [">", "id", "watermark"]]])]
    )
    assert chain.decide(20, [op()]) == Decision("ACCEPT")
    assert chain.decide(21, [op()]) == Decision("REJECT", "drain")


def test_seed_example_pausing_jobs_not_of_a_maintenance() -> None:
    chain = FilterChain.from_rules(
        [
            rule(
                "pink",
                priority=1,
                watermark=20,
                predicates=[
                    ["jobid", [">", "id", "watermark"]],
                    ["reason", ["!", ["=~", "reason", "maintenance pink bunny"]]],
                ],
                action="PAUSE",
            )
        ]
    )
    # Trails as the CLI and the queue make them: the user's text, then corral's own
    # entries, which never mention the maintenance.
    assert chain.decide(21, [op(reason=cli_trail("routine", 21))]) == Decision("PAUSE", "pink")
    assert chain.decide(21, [op(reason=cli_trail(None, 21))]) == Decision("PAUSE", "pink")
    assert chain.decide(19, [op(reason=cli_trail("routine", 19))]) == Decision("ACCEPT")
    maintenance = cli_trail("maintenance pink bunny", 21)
    assert chain.decide(21, [op(reason=maintenance)]) == Decision("ACCEPT")
    # One opcode of the job carrying the maintenance reason is enough.
    ops = [op(reason=cli_trail(None, 22)), op(reason=cli_trail("maintenance pink bunny", 22, 1))]
    assert chain.decide(22, ops) == Decision("ACCEPT")


def test_seed_example_rejecting_instance_creations() -> None:
    chain = FilterChain.from_rules(
        [
            rule(
                "nocreate",
                priority=1,
                predicates=[["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]],
            )
        ]
    )
    assert chain.decide(5, [op("OP_INSTANCE_CREATE", instance_name="web1")]) == Decision(
        "REJECT", "nocreate"
    )
    assert chain.decide(5, [op("OP_INSTANCE_REMOVE", instance_name="web1")]) == Decision("ACCEPT")


# --- validate_rule ------------------------------------------------------------------------


def test_validate_rule_returns_normalised_predicates_and_action() -> None:
    predicates, action = validate_rule(
        3,
        (("jobid", (">", "id", "watermark")), ["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]),
        ("RATE_LIMIT", 2),
    )
    assert predicates == [
        ["jobid", [">", "id", "watermark"]],
        ["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]],
    ]
    assert action == ["RATE_LIMIT", 2]
    assert validate_rule(0, [], "CONTINUE") == ([], "CONTINUE")


@pytest.mark.parametrize("priority", [-1, "1", 1.0, True, None])
def test_priority_must_be_a_non_negative_integer(priority: Any) -> None:
    with pytest.raises(ParameterError, match="priority: expected a non-negative integer"):
        validate_rule(priority, [], "ACCEPT")


@pytest.mark.parametrize(
    ("action", "pattern"),
    [
        ("DROP", r"action: unknown action 'DROP'; expected one of 'ACCEPT', 'PAUSE'"),
        ("accept", r"upper case"),
        ("RATE_LIMIT 5", r"the list \['RATE_LIMIT', n\]"),
        (["RATE_LIMIT", 0], r"action: RATE_LIMIT takes exactly one positive integer"),
        (["RATE_LIMIT", "5"], r"action: RATE_LIMIT takes exactly one positive integer"),
        (["RATE_LIMIT", True], r"action: RATE_LIMIT takes exactly one positive integer"),
        (["RATE_LIMIT"], r"action: RATE_LIMIT takes exactly one positive integer"),
        (["RATE_LIMIT", 1, 2], r"action: RATE_LIMIT takes exactly one positive integer"),
        (["PAUSE"], r"action: malformed action \['PAUSE'\]"),
        (5, r"action: malformed action 5"),
    ],
)
def test_malformed_action_is_named(action: Any, pattern: str) -> None:
    with pytest.raises(ParameterError, match=pattern):
        validate_rule(0, [], action)


@pytest.mark.parametrize(
    ("predicates", "error", "pattern"),
    [
        ("jobid", QueryFilterError, r"predicates: expected a list of \[name, expression\] pairs"),
        (
            [["jobid", []], "opcode"],
            QueryFilterError,
            r"predicate 2: expected a list \[name, expression\]",
        ),
        (
            [["job", []]],
            QueryFilterError,
            r"predicate 1: unknown predicate 'job'; accepted: 'jobid', 'opcode', 'reason'",
        ),
        (
            [["reason"]],
            QueryFilterError,
            r"predicate 1 \('reason'\): expected exactly one expression",
        ),
        (
            [["jobid", [], []]],
            QueryFilterError,
            r"predicate 1 \('jobid'\): expected exactly one expression",
        ),
        (
            [["jobid", [">", "id", 1]], ["opcode", ["=>", "OP_ID", "X"]]],
            QueryFilterError,
            r"^predicate 2 \('opcode'\): .*'=>'",
        ),
        (
            [["jobid", ["=", "status", "running"]]],
            UnknownFieldError,
            r"^predicate 1 \('jobid'\): .*'status'.*'id'",
        ),
        (
            [["reason", ["=", "text", "x"]]],
            UnknownFieldError,
            r"^predicate 1 \('reason'\): .*'text'.*'source', 'reason', 'timestamp'",
        ),
    ],
)
def test_malformed_predicate_is_named(
    predicates: Any, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        validate_rule(0, predicates, "REJECT")


def test_any_opcode_field_is_accepted() -> None:
    validate_rule(0, [["opcode", ["=", "no_such_param_anywhere", 1]]], "REJECT")


def test_stored_rule_that_does_not_compile_names_the_rule() -> None:
    bad = rule("bad-uuid", predicates=[["opcode", ["=>", "OP_ID", "X"]]])
    with pytest.raises(QueryFilterError, match=r"^filter bad-uuid: predicate 1 \('opcode'\)"):
        FilterChain.from_rules([rule("good"), bad])
    with pytest.raises(ParameterError, match=r"^filter bad-action: action: "):
        FilterChain.from_rules([rule("bad-action", action="DROP")])


def test_action_from_text() -> None:
    assert action_from_text("RATE_LIMIT 4") == ["RATE_LIMIT", 4]
    assert action_from_text("PAUSE") == "PAUSE"
    assert action_from_text("RATE_LIMIT 4x") == "RATE_LIMIT 4x"


# --- compiled once ------------------------------------------------------------------------


def test_predicates_compile_once_and_decide_never_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"compile": 0, "resolve": 0}

    def counting(expr: Any, resolve: Callable[[str], Any]) -> Any:
        calls["compile"] += 1

        def counted_resolve(name: str) -> Any:
            calls["resolve"] += 1
            return resolve(name)

        return real_compile_filter(expr, counted_resolve)

    monkeypatch.setattr("corral.jobs.filters.compile_filter", counting)
    rules = [
        rule(
            "a",
            priority=1,
            watermark=3,
            predicates=[
                ["jobid", [">", "id", "watermark"]],
                ["opcode", ["&", ["=", "OP_ID", "OP_TEST_DELAY"], [">", "duration", 1]]],
                ["reason", ["=~", "reason", "bunny"]],
            ],
        ),
        rule("b", priority=2, predicates=[["opcode", ["?", "on_master"]]], action="CONTINUE"),
    ]
    chain = FilterChain.from_rules(rules)
    assert calls["compile"] == 4
    after_compile = dict(calls)
    for jid in range(20):
        chain.decide(jid, [op(duration=jid, on_master=True, reason=[MAINT])])
    assert calls == after_compile
    assert chain.decide(5, [op(duration=2, reason=[MAINT])]) == Decision("REJECT", "a")
    assert calls == after_compile


# --- with real opcodes --------------------------------------------------------------------


def test_decides_on_the_dict_form_of_real_opcodes() -> None:
    from corral.opcodes import op_from_dict, op_to_dict

    delay = op_to_dict(
        op_from_dict({"OP_ID": "OP_TEST_DELAY", "duration": 30.0, "reason": [list(MAINT)]})
    )
    rules = [
        rule(
            "long",
            predicates=[
                ["opcode", ["&", ["=", "OP_ID", "OP_TEST_DELAY"], [">", "duration", 10]]],
                ["reason", ["=", "source", "gnt:user"]],
            ],
            action="PAUSE",
        )
    ]
    assert decide(rules, ops=[delay]) == Decision("PAUSE", "long")
    assert decide(rules, ops=[{**delay, "duration": 1.0}]) == Decision("ACCEPT")


def test_regexp_pattern_watermark_is_not_substituted() -> None:
    validate_rule(
        0, [["jobid", ["|", ["=~", "id", "watermark"], ["=", "id", "watermark"]]]], "PAUSE"
    )


def test_decision_is_frozen() -> None:
    with pytest.raises(AttributeError):
        Decision("ACCEPT").action = "REJECT"  # type: ignore[misc]
