import ipaddress

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.netguard import AddressPolicy

REFUSED = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "224.0.0.1",
    "0.0.0.0",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "2002:7f00:1::1",
]


@pytest.mark.parametrize("addr", REFUSED)
def test_special_addresses_are_refused(addr: str) -> None:
    policy = AddressPolicy()
    assert not policy.is_allowed(ipaddress.ip_address(addr))
    with pytest.raises(InvalidRequest) as info:
        policy.check(ipaddress.ip_address(addr), param="image_url")
    assert info.value.status == 400 and info.value.param == "image_url"


@pytest.mark.parametrize("addr", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(addr: str) -> None:
    assert AddressPolicy().is_allowed(ipaddress.ip_address(addr))


def test_allow_list_opens_only_its_cidr() -> None:
    policy = AddressPolicy(["127.0.0.0/8", "10.20.0.0/16"])
    assert policy.is_allowed(ipaddress.ip_address("127.0.0.1"))
    assert policy.is_allowed(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert policy.is_allowed(ipaddress.ip_address("10.20.5.5"))
    assert not policy.is_allowed(ipaddress.ip_address("10.21.0.1"))
    assert not policy.is_allowed(ipaddress.ip_address("::1"))
