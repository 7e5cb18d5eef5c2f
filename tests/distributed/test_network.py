"""Gloo's interface on a job over several hosts whose names resolve to a loopback address
(mggcn.distributed.network): the interface toward the rendezvous host, chosen only where gloo's own choice would
tell the other hosts an address they cannot reach."""

import socket

import pytest
from test_launch import _env, _node_results, _torchrun_nodes

from mggcn.distributed import network
from mggcn.distributed.network import gloo_interface, interface_of, route_address

# an address of a documentation network (RFC 5737): never this host's, and routed through its default route
_AWAY = "198.51.100.7"


def _own_address() -> str | None:
    """A non-loopback IPv4 address of this host (its default route's), or None."""
    local = route_address(_AWAY)
    return None if local is None or local.startswith("127.") else local


def _host_name_resolves_to(monkeypatch, address: str) -> None:
    real = socket.gethostbyname
    name = socket.gethostname()
    monkeypatch.setattr(network.socket, "gethostbyname", lambda host: address if host == name else real(host))


def test_the_interface_toward_the_rendezvous_host_where_this_hosts_name_is_loopback(monkeypatch):
    own = _own_address()
    if own is None:
        pytest.skip("this host has no route off loopback")
    _host_name_resolves_to(monkeypatch, "127.0.1.1")  # Debian's and Ubuntu's /etc/hosts
    interface = interface_of(own)
    assert interface is not None and interface != "lo"
    assert gloo_interface({"MASTER_ADDR": own}) == interface
    assert gloo_interface({"MASTER_ADDR": _AWAY}) == interface  # another host, reached the same way


@pytest.mark.parametrize("env, own_name", [
    ({"MASTER_ADDR": "127.0.0.1"}, "127.0.1.1"),  # a job on this host alone: loopback is right
    ({"MASTER_ADDR": "localhost"}, "127.0.1.1"),
    ({}, "127.0.1.1"),  # no rendezvous host: nothing to route toward
    ({"MASTER_ADDR": _AWAY, "GLOO_SOCKET_IFNAME": "lo"}, "127.0.1.1"),  # the user's choice stands
    ({"MASTER_ADDR": "no-such-host.invalid"}, "127.0.1.1"),  # torch's rendezvous says it cannot reach it
    ({"MASTER_ADDR": _AWAY}, "192.0.2.50"),  # the name resolves to an address others can reach: gloo's own choice
])
def test_gloo_chooses_for_itself_elsewhere(monkeypatch, env, own_name):
    _host_name_resolves_to(monkeypatch, own_name)
    assert gloo_interface(env) is None


def test_a_torchrun_job_over_two_nodes_with_a_routable_rendezvous_address_trains(tmp_path):
    """Two torchrun "nodes" on this host, the rendezvous at this host's routable address: where the host's name
    resolves to loopback, each node's first rank says which interface gloo takes, and the job trains."""
    own = _own_address()
    if own is None:
        pytest.skip("this host has no route off loopback")
    env, _ = _env(tmp_path)
    nodes = _torchrun_nodes(tmp_path, env, "synthetic:n=300,features=8", "--epochs", "2", "--quiet",
                            "--timeout", "60", master_addr=own)
    codes, logs = _node_results(tmp_path, nodes)
    assert codes == [0, 0], logs
    said = f"gloo uses {interface_of(own)}, the interface toward MASTER_ADDR"
    loopback_name = socket.gethostbyname(socket.gethostname()).startswith("127.")
    assert all((said in log) is loopback_name for log in logs), logs
    assert "trained model" in logs[0] or "trained model" in logs[1], logs
