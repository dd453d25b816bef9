"""The address pool of a network: reservations, next free address, limits."""

from __future__ import annotations

import pytest

from corral.errors import OpPrereqError, ParameterError
from corral.objects.network_pool import AddressPool, check_mac_prefix, initial_reservations


def _pool(used: tuple[str, ...] = ()) -> AddressPool:
    return AddressPool("net-a", "10.0.0.0/29",
                       initial_reservations("10.0.0.0/29", "10.0.0.1", "net-a"), used)


def test_a_new_pool_reserves_network_broadcast_and_gateway() -> None:
    pool = _pool()
    assert pool.external_list() == ["10.0.0.0", "10.0.0.1", "10.0.0.7"]
    assert (pool.size, pool.free_count, pool.reserved_count) == (8, 5, 3)
    assert pool.usage_map() == "XX.....X"


def test_next_free_skips_used_reserved_and_excluded_addresses() -> None:
    pool = _pool(used=("10.0.0.2",))
    assert pool.next_free() == "10.0.0.3"
    assert pool.next_free(exclude=["10.0.0.3", "10.0.0.4"]) == "10.0.0.5"
    assert pool.is_reserved("10.0.0.2", external=False)
    assert not pool.is_reserved("10.0.0.2", external=True)


def test_a_full_pool_names_the_network() -> None:
    pool = _pool(used=tuple(f"10.0.0.{i}" for i in range(2, 7)))
    assert pool.free_count == 0
    with pytest.raises(OpPrereqError, match=r"net-a \(10.0.0.0/29\) is full"):
        pool.next_free()


def test_an_address_is_reserved_once() -> None:
    pool = _pool(used=("10.0.0.2",))
    pool.reserve_external("10.0.0.5")
    with pytest.raises(ParameterError, match="already reserved"):
        pool.reserve_external("10.0.0.5")
    with pytest.raises(ParameterError, match="used by an instance"):
        pool.reserve_external("10.0.0.2")
    with pytest.raises(ParameterError, match=r"does not contain 10\.0\.1\.1"):
        pool.reserve_external("10.0.1.1")
    pool.release_external("10.0.0.5")
    with pytest.raises(ParameterError, match="not externally reserved"):
        pool.release_external("10.0.0.5")


@pytest.mark.parametrize("subnet", ["10.0.0.0/15", "10.0.0.0/31", "10.0.0.1/24", "10.0.0.0/33",
                                    "nonsense"])
def test_subnets_outside_the_limits_are_refused(subnet: str) -> None:
    with pytest.raises(ParameterError, match=subnet.split("/")[0]):
        AddressPool("n", subnet, [])


def test_gateway_outside_the_subnet_and_bad_mac_prefix_are_refused() -> None:
    with pytest.raises(ParameterError, match=r"does not contain 10\.1\.0\.1"):
        initial_reservations("10.0.0.0/24", "10.1.0.1", "n")
    assert check_mac_prefix("AA:00:01") == "aa:00:01"
    with pytest.raises(ParameterError, match="Invalid MAC address prefix 'zz'"):
        check_mac_prefix("zz")
