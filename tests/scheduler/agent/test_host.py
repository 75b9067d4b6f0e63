"""Host facts read from a /proc and /sys laid out by the test."""

from __future__ import annotations

from pathlib import Path

from scheduler.agent.backends import Nic, TopologyLabels
from scheduler.agent.host import host_facts


def make_root(root: Path) -> Path:
    """A host with one Xeon model, 2 TiB of memory, a 400G NIC, a down NIC and loopback."""
    (root / "proc").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\n"
        "model name\t: Intel(R) Xeon(R) Platinum 8480+\n\nprocessor\t: 1\n"
    )
    (root / "proc/meminfo").write_text("MemTotal:       2113261568 kB\nMemFree:  1 kB\n")
    for name, speed, state in [("ib0", "400000", "up"), ("eth1", "-1", "down"), ("lo", "", "up")]:
        nic = root / "sys/class/net" / name
        nic.mkdir(parents=True)
        (nic / "speed").write_text(speed + "\n")
        (nic / "operstate").write_text(state + "\n")
    return root


def test_host_facts_come_from_proc_and_sys(tmp_path: Path) -> None:
    labels = TopologyLabels("dc-east", "pod-3", "leaf-12")
    facts = host_facts(labels, make_root(tmp_path), "550.90.07", "12.4", (143, 144))
    assert facts.cpu_model == "Intel(R) Xeon(R) Platinum 8480+"
    assert facts.memory_mb == 2113261568 // 1024
    assert facts.nics == (Nic("eth1", None, False), Nic("ib0", 400000, True))
    message = facts.to_message()
    assert message["nvlink"] == {"up": 143, "total": 144}
    assert (message["datacenter"], message["leaf"]) == ("dc-east", "leaf-12")


def test_a_host_that_shows_nothing_still_has_facts(tmp_path: Path) -> None:
    facts = host_facts(root=tmp_path)
    assert (facts.memory_mb, facts.nics, facts.driver_version) == (0, (), None)
    assert facts.cpu_count > 0  # from the running interpreter, not from /proc
