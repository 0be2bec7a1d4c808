"""The client's address behind proxies, and the in-process windows that count while Redis is
unreachable (docs/decisions/0036)."""

import pytest

from memory_platform.client_address import client_address, parse_networks, throttle_key
from memory_platform.ratelimit import LocalWindows, Rate, _Window

PROXIES = ["10.0.0.0/8", "2001:db8:ff::/48"]


def address(peer, forwarded=None, trusted=PROXIES):
    meta = {"REMOTE_ADDR": peer}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_address(meta, trusted)


def test_without_trusted_proxies_the_peer_is_the_client():
    assert address("192.0.2.1", "203.0.113.9", trusted=[]) == "192.0.2.1"
    assert address("192.0.2.1", "203.0.113.9") == "192.0.2.1"  # an untrusted peer's header
    assert address("", trusted=[]) == "unknown"
    assert address("::ffff:192.0.2.1", trusted=[]) == "192.0.2.1"


def test_the_right_most_untrusted_address_of_the_chain_is_the_client():
    assert address("10.0.0.2", "198.51.100.1") == "198.51.100.1"
    # What the client wrote itself sits to the left of what the proxy appended.
    assert address("10.0.0.2", "1.2.3.4, 198.51.100.1") == "198.51.100.1"
    assert address("10.0.0.2", "1.2.3.4, 198.51.100.1, 10.3.3.3") == "198.51.100.1"
    assert address("10.0.0.2", "1.2.3.4,198.51.100.1 , 10.3.3.3") == "198.51.100.1"
    # Ports and brackets as some proxies write them; IPv6 proxies and clients.
    assert address("10.0.0.2", "198.51.100.1:5123") == "198.51.100.1"
    assert address("2001:db8:ff::1", "[2001:db8:1::5]:443") == "2001:db8:1::5"
    # No header, or only proxies in it: a proxy's own request.
    assert address("10.0.0.2") == "10.0.0.2"
    assert address("10.0.0.2", "10.0.0.7, 10.0.0.8") == "10.0.0.7"
    # Not an address, but written by a trusted proxy: it still names the client, cut short.
    assert address("10.0.0.2", "198.51.100.1, unknown") == "unknown"
    assert len(address("10.0.0.2", "x" * 500)) == 64


def test_trusted_proxies_are_checked_and_ipv6_clients_count_by_their_64():
    assert [str(n) for n in parse_networks(["10.0.0.1", " 10.1.0.0/16 ", "", "::1"])] == [
        "10.0.0.1/32",
        "10.1.0.0/16",
        "::1/128",
    ]
    with pytest.raises(ValueError, match="proxy.example"):
        parse_networks(["proxy.example"])
    assert throttle_key("2001:db8:1:2:aaaa::1") == throttle_key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert throttle_key("192.0.2.1") == "192.0.2.1"
    assert throttle_key("unknown") == "unknown"


def test_local_windows_count_fixed_windows_and_stay_bounded():
    rate = Rate(3, 60)
    windows = LocalWindows(size=50)
    now = 6000.0
    hot = _Window.of("hot", rate, now)
    assert [windows.incr([hot], now)[0] for _ in range(4)] == [1, 2, 3, 4]
    # An attacker's thousand fresh names cannot push out a window that is still counting.
    for i in range(1000):
        windows.incr([_Window.of(f"fresh-{i}", rate, now), hot], now)
        assert len(windows) <= 50
    assert windows.get([hot], now) == [1004]
    # The next window starts from nothing, and an ended window is read as empty.
    later = now + 60
    assert windows.incr([_Window.of("hot", rate, later)], later) == [1]
    assert windows.get([hot], later) == [0]
