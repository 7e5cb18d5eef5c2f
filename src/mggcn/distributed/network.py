"""Which network interface gloo binds to when a job spans hosts.

Gloo binds a rank to the address its host's name resolves to, unless ``GLOO_SOCKET_IFNAME`` names an interface.
Many hosts resolve their own name to a loopback address (Debian's and Ubuntu's ``127.0.1.1``, many virtual machines
and containers ``127.0.0.1``): a rank there tells the others an address that only its own host can reach, and the
job waits on connections that never come until its timeout. Where a job spans hosts, its rendezvous host
(``MASTER_ADDR``) is another host's address, this host's name resolves to a loopback one and the variable is unset,
:func:`gloo_interface` names the interface of this host's route to the rendezvous host instead. NCCL picks a
non-loopback interface by itself (``NCCL_SOCKET_IFNAME`` overrides it).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Mapping

__all__ = ["GLOO_IFNAME_ENV", "gloo_interface", "interface_of", "route_address"]

GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"
_SIOCGIFADDR = 0x8915  # Linux's ioctl for an interface's IPv4 address


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def route_address(host: str) -> str | None:
    """This host's IPv4 address on its route to ``host``: a UDP socket connected there sends nothing, and says
    which local address the kernel would send from. None where there is no such route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def interface_of(address: str) -> str | None:
    """The name of the interface holding the IPv4 ``address`` (Linux; None elsewhere or where none does)."""
    try:
        import fcntl
    except ImportError:  # not a Unix
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:  # an interface without an IPv4 address
                continue
            if socket.inet_ntoa(packed[20:24]) == address:
                return name
    return None


def gloo_interface(env: Mapping[str, str] | None = None) -> str | None:
    """The interface gloo should bind to for a rank of a job that spans hosts (``env``: the rank's environment,
    default ``os.environ``), or None where gloo's own choice is right: ``GLOO_SOCKET_IFNAME`` set, no
    ``MASTER_ADDR``, a rendezvous host on a loopback address (a job on this host alone), or this host's name
    resolving to an address others can reach."""
    env = os.environ if env is None else env
    master = env.get("MASTER_ADDR", "")
    if env.get(GLOO_IFNAME_ENV) or not master:
        return None
    try:
        master_ip = socket.gethostbyname(master)
    except OSError:  # torch's rendezvous will say it cannot reach the host
        return None
    if _is_loopback(master_ip):
        return None
    try:
        own = socket.gethostbyname(socket.gethostname())
    except OSError:
        own = None
    if own is not None and not _is_loopback(own):
        return None
    local = route_address(master_ip)
    return None if local is None or _is_loopback(local) else interface_of(local)
