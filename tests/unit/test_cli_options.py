"""The options every gnt-* command shares, driven through click."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from corral.cli.options import (
    FieldSelection,
    IdentKeyValType,
    KeyValType,
    common_list_options,
    dry_run_option,
    force_option,
    ident_keyval_option,
    print_jobid_option,
    priority_option,
    reason_option,
    resolve_fields,
    submit_option,
    yes_do_it_option,
)

DEFAULT_FIELDS = ["name", "status"]


@click.command()
@common_list_options
@reason_option
@submit_option
@print_jobid_option
@priority_option
@dry_run_option
@force_option
@yes_do_it_option
@click.option("-B", "--backend-parameters", "beparams", type=KeyValType())
@click.option("-D", "--disk-parameters", "diskparams", type=IdentKeyValType(), multiple=True)
@ident_keyval_option("-H", "--hypervisor-parameters", "hvparams")
def command(**kwargs: Any) -> None:
    kwargs["fields"] = resolve_fields(kwargs["output"], DEFAULT_FIELDS)
    SEEN.append(kwargs)


SEEN: list[dict[str, Any]] = []


def run(*args: str) -> tuple[int, dict[str, Any], str]:
    SEEN.clear()
    result = CliRunner().invoke(command, list(args))
    values = SEEN[0] if result.exit_code == 0 else {}
    return result.exit_code, values, result.output


def test_defaults() -> None:
    code, values, _ = run()
    assert code == 0
    assert values == {
        "output": None,
        "fields": DEFAULT_FIELDS,
        "no_headers": False,
        "separator": None,
        "units": None,
        "as_json": False,
        "reason": None,
        "submit_only": False,
        "print_jobid": False,
        "priority": None,
        "dry_run": False,
        "force": False,
        "yes_do_it": False,
        "beparams": None,
        "diskparams": (),
        "hvparams": {},
    }


def test_list_options() -> None:
    code, values, _ = run("-o", "name,pnode", "--no-headers", "--separator", "|", "--units", "g")
    assert code == 0
    assert values["output"] == FieldSelection(("name", "pnode"))
    assert values["fields"] == ["name", "pnode"]
    assert (values["no_headers"], values["separator"], values["units"]) == (True, "|", "g")


def test_plus_adds_to_default_fields() -> None:
    code, values, _ = run("--output", "+oper_ram,tags")
    assert code == 0
    assert values["fields"] == ["name", "status", "oper_ram", "tags"]


def test_empty_field_is_a_usage_error() -> None:
    code, _, output = run("-o", "name,,status")
    assert code == 2
    assert "-o/--output" in output and "'name,,status'" in output


def test_units_choices() -> None:
    code, _, output = run("--units", "k")
    assert code == 2
    assert "--units" in output


@pytest.mark.parametrize(("name", "number"), [("low", 10), ("normal", 0), ("high", -10)])
def test_priority(name: str, number: int) -> None:
    code, values, _ = run("--priority", name)
    assert code == 0
    assert values["priority"] == number


def test_priority_refuses_other_names() -> None:
    assert run("--priority", "urgent")[0] == 2


def test_flags() -> None:
    code, values, _ = run(
        "--submit", "--print-jobid", "--dry-run", "-f", "--yes-do-it", "--json", "--reason", "why"
    )
    assert code == 0
    for name in ("submit_only", "print_jobid", "dry_run", "force", "yes_do_it", "as_json"):
        assert values[name] is True, name
    assert values["reason"] == "why"


def test_ya_rly_alias_and_long_force() -> None:
    code, values, _ = run("--ya-rly", "--force")
    assert code == 0
    assert values["yes_do_it"] and values["force"]


def test_keyval_option() -> None:
    code, values, _ = run("-B", "maxmem=1024,no_auto_balance,-vcpus")
    assert code == 0
    assert values["beparams"] == {"maxmem": "1024", "auto_balance": False, "vcpus": None}


def test_keyval_error_names_option_and_item() -> None:
    code, _, output = run("-B", "vcpus=1,vcpus=2")
    assert code == 2
    assert "-B/--backend-parameters" in output
    assert "'vcpus'" in output


def test_ident_keyval_repeatable() -> None:
    code, values, _ = run("-D", "plain:stripes=2", "-D", "-file")
    assert code == 0
    assert values["diskparams"] == (("plain", {"stripes": "2"}), ("file", None))


def test_ident_keyval_option_merges() -> None:
    code, values, _ = run("-H", "kvm:acpi=true", "-H", "no_fake")
    assert code == 0
    assert values["hvparams"] == {"kvm": {"acpi": "true"}, "fake": False}


def test_ident_keyval_option_refuses_repeated_ident() -> None:
    code, _, output = run("-H", "kvm:acpi=true", "-H", "kvm:kernel_path=")
    assert code == 2
    assert "-H/--hypervisor-parameters" in output and "'kvm'" in output


def test_ident_keyval_error() -> None:
    code, _, output = run("-H", "no_kvm:acpi=true")
    assert code == 2
    assert "-H/--hypervisor-parameters" in output and "'no_kvm'" in output


def test_help_lists_ganeti_option_names() -> None:
    output = CliRunner().invoke(command, ["--help"]).output
    for name in (
        "--no-headers",
        "--separator",
        "-o, --output",
        "--units",
        "--json",
        "--reason",
        "--submit",
        "--print-jobid",
        "--priority",
        "--dry-run",
        "-f, --force",
        "--yes-do-it, --ya-rly",
    ):
        assert name in output, name
