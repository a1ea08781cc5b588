"""The value forms the configuration accepts beyond TOML's own types.

Durations (``"90s"``, ``"1h30m"``), sizes and shares of memory
(``"12GiB"``, ``"75%"``), loopback hosts, host names and patterns
(``"*.example.com"``) and networks (``"10.0.0.0/8"``): parsed here and nowhere
else, both when a config is checked (:mod:`shared.config_loader`) and
where the gateway and the worker use the values. Pure functions; no
I/O, no threads.
"""

from __future__ import annotations

import ipaddress
import re

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?", re.IGNORECASE)


def parse_duration(value: int | float | str) -> float:
    """Seconds in ``value``: a number, or a string such as ``"90s"``,
    ``"5m"``, ``"1h30m"``, ``"250ms"``; negative numbers mean never (-1).

    Raises:
        ValueError: not a duration.
    """
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else -1.0
    text = value.strip().lower()
    try:
        return parse_duration(float(text))
    except ValueError:
        pass
    match = _DURATION.fullmatch(text)
    if not text or not match or not any(match.groups()):
        raise ValueError(f"not a duration: {value!r} (use seconds, or e.g. 30s, 5m, 1h30m)")
    h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


def parse_size(value: int | str, total_memory: int) -> int:
    """Bytes in ``value``: an integer, a size such as ``"12GiB"``/``"800MB"``,
    or a percentage of ``total_memory`` such as ``"75%"``; 0 means no limit.

    Raises:
        ValueError: not a size.
    """
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    text = value.strip()
    if text.endswith("%"):
        share = float(text[:-1])
        if not 0 < share <= 100:
            raise ValueError(f"not a share of memory: {value!r}")
        return int(total_memory * share / 100)
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"not a size: {value!r} (use bytes, e.g. 12GiB, or a share such as 75%)")
    number, unit = float(match.group(1)), (match.group(2) or "").upper()
    base = 1024 if "I" in unit else 1000
    power = {"": 0, "B": 0, "K": 1, "M": 2, "G": 3, "T": 4}[unit[:1] if unit not in ("", "B") else unit]
    return int(number * base**power)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def normalize_host(host: str) -> str:
    """``host`` in the one form it is compared in: an IP address in its
    canonical text (IPv6 without brackets), or a name lower-cased,
    IDNA-encoded (``bücher.example`` → ``xn--bcher-kva.example``) and
    without a trailing dot.

    Raises:
        ValueError: not an IP address or a valid host name.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    text = text.removesuffix(".")
    try:
        name = text.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError(f"not a host name: {host!r}") from None
    if not name or len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"not a host name: {host!r}")
    return name


def host_pattern(pattern: str) -> str:
    """``pattern`` normalised as :func:`normalize_host` does: an exact host
    name or IP address, or ``*.`` and a name (any name below it, not the
    name itself).

    Raises:
        ValueError: anything else (a port, a scheme, a bare ``*``, a
            wildcard elsewhere, a malformed name).
    """
    text = pattern.strip()
    if text.startswith("*."):
        suffix = normalize_host(text[2:])
        try:
            ipaddress.ip_address(suffix)
        except ValueError:
            return "*." + suffix
        raise ValueError(f"not a host pattern: {pattern!r} (a wildcard needs a name after it)")
    try:
        return normalize_host(text)
    except ValueError:
        raise ValueError(
            f"not a host pattern: {pattern!r} (use a host name, an IP address or *.example.com; no scheme or port)"
        ) from None


def parse_network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The network ``cidr`` names (``"192.168.1.0/24"``, ``"fd00::/8"``; a
    bare address is a one-address network).

    Raises:
        ValueError: not a network, or host bits set (``10.0.0.1/8``).
    """
    try:
        return ipaddress.ip_network(cidr.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"not a network: {cidr!r} ({exc})") from None
