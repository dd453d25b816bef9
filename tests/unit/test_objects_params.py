"""Parameter families: filling layers, validation and coercion, sizes, updates."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import ParameterError, UnknownParameterError
from corral.objects.params import (
    BE_PARAMS,
    HV_GLOBALS,
    HV_PARAMS,
    ND_PARAMS,
    NIC_PARAMS,
    VALUE_DEFAULT,
    ParamSpec,
    coerce,
    defaults,
    fill_hv_params,
    fill_params,
    parse_size,
    update_params,
    upgrade_beparams,
    validate_params,
)

# -- fill_params ---------------------------------------------------------------------


def test_fill_params_layers_override_in_order() -> None:
    cluster = {"maxmem": 128, "minmem": 128, "vcpus": 1}
    group = {"maxmem": 256, "vcpus": 2}
    instance = {"vcpus": 4}
    assert fill_params(cluster, group, instance) == {"maxmem": 256, "minmem": 128, "vcpus": 4}


def test_fill_params_skips_none_layers_and_none_values() -> None:
    cluster = {"maxmem": 128, "vcpus": 1}
    assert fill_params(cluster, None, {"vcpus": None, "maxmem": 512}) == {
        "maxmem": 512,
        "vcpus": 1,
    }
    assert fill_params(cluster, None, None) == cluster
    assert fill_params(cluster, {}) == cluster


def test_fill_params_returns_a_new_dict() -> None:
    base = {"a": 1}
    layer = {"b": 2}
    result = fill_params(base, layer)
    result["a"] = 99
    assert base == {"a": 1}
    assert layer == {"b": 2}


def test_fill_params_adds_keys_not_in_base() -> None:
    assert fill_params({}, {"kernel_path": "/vmlinuz"}) == {"kernel_path": "/vmlinuz"}


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers()),
    st.dictionaries(st.sampled_from("abcdef"), st.none() | st.integers()),
)
def test_fill_params_last_non_none_wins(base: dict[str, int], layer: dict[str, int | None]) -> None:
    result = fill_params(base, layer)
    for key in set(base) | set(layer):
        value = layer.get(key)
        if value is not None:
            assert result[key] == value
        elif key in base:
            assert result[key] == base[key]
        else:
            assert key not in result


# -- validate_params -----------------------------------------------------------------


def test_legacy_memory_sets_maxmem_and_minmem_and_wins() -> None:
    """Ganeti's ``memory`` becomes maxmem and minmem, overriding either given with it."""
    assert validate_params("backend", BE_PARAMS, {"memory": "1G"}) == \
        {"maxmem": 1024, "minmem": 1024}
    assert upgrade_beparams({"memory": 512, "maxmem": 2048, "vcpus": 2}) == \
        {"maxmem": 512, "minmem": 512, "vcpus": 2}
    assert validate_params("backend", BE_PARAMS, {"memory": "default"}) == \
        {"maxmem": None, "minmem": None}


@pytest.mark.parametrize(("values", "message"), [
    ({"vcpus": 0}, "backend parameter 'vcpus': 0 is out of range; accepted: 1 or more"),
    ({"vcpus": "-1"}, "'vcpus': -1 is out of range"),
    ({"maxmem": 0}, "'maxmem': 0 MiB is out of range; accepted: 1 MiB or more"),
    ({"memory": "0"}, "'maxmem': 0 MiB is out of range"),
    ({"spindle_use": -1}, "'spindle_use': -1 is out of range; accepted: 0 or more"),
])
def test_backend_values_out_of_range_are_refused(values: dict[str, object],
                                                 message: str) -> None:
    with pytest.raises(ParameterError, match=re.escape(message)):
        validate_params("backend", BE_PARAMS, values, instance_level=True)


def test_validate_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(UnknownParameterError) as info:
        validate_params("backend", BE_PARAMS, {"mem": 512})
    message = str(info.value)
    assert "'mem'" in message
    for name in BE_PARAMS:
        assert name in message


def test_validate_coerces_strings() -> None:
    result = validate_params(
        "backend", BE_PARAMS,
        {"auto_balance": "true", "always_failover": "no", "maxmem": "512M", "minmem": "2G",
         "vcpus": "4"},
    )
    assert result == {
        "auto_balance": True, "always_failover": False, "maxmem": 512, "minmem": 2048,
        "vcpus": 4,
    }


def test_validate_keeps_typed_json_values() -> None:
    assert validate_params("backend", BE_PARAMS, {"maxmem": 1024, "auto_balance": False}) == {
        "maxmem": 1024, "auto_balance": False,
    }
    assert validate_params("node", ND_PARAMS, {"cpu_speed": "1.5"}) == {"cpu_speed": 1.5}


def test_validate_default_and_none_mean_remove() -> None:
    assert validate_params("backend", BE_PARAMS, {"maxmem": VALUE_DEFAULT, "vcpus": None}) == {
        "maxmem": None, "vcpus": None,
    }


def test_validate_refuses_global_params_at_instance_level() -> None:
    kvm = HV_PARAMS["kvm"]
    with pytest.raises(ParameterError, match=r"migration_port.*global"):
        validate_params("kvm", kvm, {"migration_port": 9000}, instance_level=True)
    assert validate_params("kvm", kvm, {"migration_port": "9000"}) == {"migration_port": 9000}
    # Non-global ones are fine per instance.
    assert validate_params("kvm", kvm, {"acpi": "off"}, instance_level=True) == {"acpi": False}


def test_hv_globals_are_ganetis() -> None:
    # Ganeti 3.0's hvcGlobals (src/Ganeti/Constants.hs).
    assert sorted(HV_GLOBALS) == ["migration_bandwidth", "migration_mode", "migration_port"]


def test_fill_hv_params_takes_globals_from_the_cluster_only() -> None:
    cluster = {"migration_port": 8102, "acpi": True, "kernel_path": "/k"}
    os_layer = {"migration_port": 1, "kernel_path": "/os"}
    instance = {"migration_port": 2, "migration_mode": "non-live", "acpi": False}
    assert fill_hv_params(cluster, os_layer, None, instance) == {
        "migration_port": 8102, "acpi": False, "kernel_path": "/os"}
    # A global the cluster layer lacks is not filled from elsewhere either.
    assert "migration_mode" not in fill_hv_params(cluster, instance)


@pytest.mark.parametrize(
    ("family", "specs", "values", "fragment"),
    [
        ("backend", BE_PARAMS, {"vcpus": "many"},
         "backend parameter 'vcpus': 'many' is not an int"),
        # A bare flag (-B vcpus) arrives as True: it lacks its value.
        ("backend", BE_PARAMS, {"vcpus": True}, "'vcpus' needs a value, as in vcpus=<int>"),
        ("backend", BE_PARAMS, {"auto_balance": "perhaps"}, "is not a boolean"),
        ("backend", BE_PARAMS, {"maxmem": "lots"}, "backend parameter 'maxmem': invalid size"),
        ("nic", NIC_PARAMS, {"mode": "tunnel"}, "'tunnel' is not one of"),
        ("nic", NIC_PARAMS, {"link": 5}, "is not a string"),
        ("node", ND_PARAMS, {"cpu_speed": "fast"}, "is not a float"),
    ],
)
def test_validate_refuses_bad_values(
    family: str, specs: dict[str, ParamSpec], values: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ParameterError) as info:
        validate_params(family, specs, values)
    assert fragment in str(info.value)


def test_coerce_maybe_string_accepts_none() -> None:
    spec = HV_PARAMS["kvm"]["root_path"]
    assert coerce("kvm", "root_path", spec, None) is None
    assert coerce("kvm", "root_path", spec, "/dev/sda1") == "/dev/sda1"


def test_defaults_cover_every_param() -> None:
    assert defaults(BE_PARAMS) == {name: spec.default for name, spec in BE_PARAMS.items()}
    assert defaults({}) == {}


# -- sizes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("512", 512), ("512M", 512), ("512m", 512), ("2G", 2048), ("2g", 2048),
        ("2GiB", 2048), ("2gb", 2048), ("1.5G", 1536), ("1T", 1024 * 1024),
        ("1.5T", 1536 * 1024), (" 3 G ", 3072), ("0.5", 1), ("0.1G", 103), ("0", 0),
        (100, 100), (1.2, 2), (0, 0),
    ],
)
def test_parse_size(text: str | int | float, mib: int) -> None:
    assert parse_size(text) == mib


@pytest.mark.parametrize("bad", ["", "G", "12X", "-5", "1.2.3G", "five", True, -1, -0.5])
def test_parse_size_refuses(bad: str | int | float) -> None:
    with pytest.raises(ParameterError, match="invalid size"):
        parse_size(bad)


# -- update_params -------------------------------------------------------------------


def test_update_params_sets_and_removes() -> None:
    current = {"maxmem": 512, "vcpus": 2}
    assert update_params(current, {"maxmem": None, "minmem": 256}) == {"vcpus": 2, "minmem": 256}
    assert current == {"maxmem": 512, "vcpus": 2}


def test_update_params_removing_missing_key_is_fine() -> None:
    assert update_params({}, {"vcpus": None}) == {}


def test_validate_then_update_drops_defaults() -> None:
    changes = validate_params("backend", BE_PARAMS, {"vcpus": "default", "maxmem": "1G"})
    assert update_params({"vcpus": 8}, changes) == {"maxmem": 1024}
