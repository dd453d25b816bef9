"""The one helper that cuts "unknown NAME" messages to the nearest known names."""

from __future__ import annotations

import pytest

from corral.errors import LIST_ALL_UP_TO, UnknownParameterError, did_you_mean
from corral.objects.params import BE_PARAMS, HV_PARAMS, validate_params

MANY = [f"field{i}" for i in range(20)] + ["kernel_path", "kernel_args"]


def test_few_known_names_are_all_listed() -> None:
    assert did_you_mean("x", ["b", "a"]) == "valid ones: b, a"
    assert did_you_mean("x", []) == "valid ones: (none)"


def test_many_are_cut_to_the_nearest_and_the_listing_command() -> None:
    hint = did_you_mean("kernel_pat", MANY, listing="gnt-cluster info")
    assert hint == ("did you mean 'kernel_path' or 'kernel_args'? "
                    "('gnt-cluster info' lists all 22 valid ones)")
    assert "field0" not in hint


def test_no_near_name_points_to_the_listing_only() -> None:
    assert did_you_mean("zzz", MANY, listing="gnt-node list-fields",
                        noun="known fields") == "'gnt-node list-fields' lists all 22 known fields"


def test_without_a_listing_command_some_examples_are_shown() -> None:
    hint = did_you_mean("zzz", MANY)
    assert hint.startswith("22 valid ones, for example field0, field1") and len(hint) < 100


def test_several_unknown_names_each_get_their_nearest() -> None:
    hint = did_you_mean(["kernel_pat", "field13x"], MANY)
    assert "'kernel_path'" in hint and "'field13'" in hint


def test_unknown_hypervisor_parameter_message_is_short() -> None:
    assert len(HV_PARAMS["kvm"]) > LIST_ALL_UP_TO
    with pytest.raises(UnknownParameterError) as caught:
        validate_params("kvm hypervisor", HV_PARAMS["kvm"], {"kernel_pat": "/x"})
    message = caught.value.message
    assert "did you mean 'kernel_path'" in message and "'gnt-cluster info'" in message
    assert len(message) < 200
    assert "vnc_tls" not in message


def test_few_backend_parameters_are_still_listed_in_full() -> None:
    with pytest.raises(UnknownParameterError) as caught:
        validate_params("backend", BE_PARAMS, {"maxmen": 1})
    assert caught.value.message.endswith("valid ones: " + ", ".join(sorted(BE_PARAMS)))
