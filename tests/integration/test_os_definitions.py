"""OS definitions as designs 2.1 and 2.2 describe them, on the 3-node testbed through
gnt-instance, gnt-os and RAPI: one variant exactly (unless forced), the script
environment, OS states per OS, OS parameters by their lower-cased names, the OS
version and the listing of blacklisted OSes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import TestbedHandle
from tests.integration.test_instances import DATA, install_os, list_instances
from tests.integration.test_rapi import _client

pytestmark = pytest.mark.integration

NODE = "node2.testbed"


def _env(dump: Path) -> dict[str, str]:
    """What dumpenv's script wrote: its environment, one ``NAME=value`` a line."""
    return dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)


def _add(testbed: TestbedHandle, name: str, os_name: str, *extra: str,
         check: bool = True) -> str:
    proc = testbed.run("gnt-instance", "add", "-t", "file", "-o", os_name, "-n", NODE,
                       "--disk", "0:size=4M", "--no-start", *extra, name, check=check)
    return proc.stderr if proc.returncode else ""


def test_variants_force_variant_and_hypervisor_variables(testbed: TestbedHandle,
                                                         tmp_path: Path) -> None:
    """An OS with variants needs exactly one (CLI add, reinstall, modify and RAPI
    create alike); --force-variant lets an undeclared or missing one through; the
    scripts see INSTANCE_HYPERVISOR next to HYPERVISOR."""
    install_os(testbed, DATA / "dumpenv")
    dump = tmp_path / "env.txt"

    # No variant: refused before anything is created, naming the variants to use.
    error = _add(testbed, "bare.testbed", "dumpenv", check=False)
    assert "variant" in error and "dumpenv+alpha" in error and "dumpenv+beta" in error, error
    error = _add(testbed, "bare.testbed", "dumpenv+zeta", check=False)
    assert "zeta" in error and "dumpenv+alpha" in error, error
    assert list_instances(testbed, "name") == []

    # Forced: an undeclared variant reaches the scripts as given, although the OS
    # has parameters (they are verified with that variant too).
    _add(testbed, "forced.testbed", "dumpenv+zeta", "--force-variant", "-O",
         f"dump_file={dump}")
    env = _env(dump)
    assert (env["OS_NAME"], env["OS_VARIANT"], env["INSTANCE_OS"]) == \
        ("dumpenv", "zeta", "dumpenv+zeta")
    assert env["INSTANCE_HYPERVISOR"] == env["HYPERVISOR"] == "fake"
    # Forced without a variant: the scripts get the first declared one (as Ganeti).
    _add(testbed, "first.testbed", "dumpenv", "--force-variant", "-O", f"dump_file={dump}")
    assert _env(dump)["OS_VARIANT"] == "alpha"

    # Reinstall and modify ask for a variant the same way.
    refused = testbed.run("gnt-instance", "reinstall", "-f", "-o", "dumpenv",
                          "forced.testbed", check=False)
    assert refused.returncode != 0 and "dumpenv+alpha" in refused.stderr, refused.stderr
    testbed.run("gnt-instance", "reinstall", "-f", "-o", "dumpenv+omega", "--force-variant",
                "forced.testbed")
    assert _env(dump)["OS_VARIANT"] == "omega"
    for os_name in ("dumpenv", "dumpenv+omicron"):
        refused = testbed.run("gnt-instance", "modify", "--os-type", os_name,
                              "forced.testbed", check=False)
        assert refused.returncode != 0 and "dumpenv+beta" in refused.stderr, refused.stderr
    testbed.run("gnt-instance", "modify", "--os-type", "dumpenv+omicron", "--force-variant",
                "forced.testbed")
    rows = dict(list_instances(testbed, "name,os"))
    assert rows == {"forced.testbed": "dumpenv+omicron", "first.testbed": "dumpenv"}

    # RAPI create: the same rule, and force_variant the same way out.
    api = _client(testbed)
    body = {"__version__": 1, "mode": "create", "name": "rapi.testbed",
            "disk_template": "file", "disks": [{"size": 4}], "nics": [],
            "os": "dumpenv", "pnode": NODE, "start": False,
            "osparams": {"dump_file": str(dump)}}
    job = api.wait(api.ok("POST", "/2/instances", body))
    assert job["status"] == "error" and "dumpenv+alpha" in str(job["opresult"]), job
    job = api.wait(api.ok("POST", "/2/instances",
                          {**body, "os": "dumpenv+kappa", "force_variant": True}))
    assert job["status"] == "success", job
    assert _env(dump)["OS_VARIANT"] == "kappa"


def test_os_states_version_listing_and_parameter_case(testbed: TestbedHandle,
                                                      tmp_path: Path) -> None:
    """Hidden/blacklisted are per OS (a variant is refused); blacklisted OSes can be
    listed; os_version is shown by info and diagnose; a parameter declared TRACK is
    set as ``track`` and reaches the scripts as OSP_TRACK."""
    source = tmp_path / "caseos"
    shutil.copytree(DATA / "dumpenv", source)
    with (source / "parameters.list").open("a") as params:
        params.write("TRACK      Distribution track, declared in upper case\n")
    install_os(testbed, source)

    for state in ("--hidden", "--blacklisted"):
        refused = testbed.run("gnt-os", "modify", state, "yes", "caseos+alpha", check=False)
        assert refused.returncode != 0, refused
        assert "per OS" in refused.stderr and "caseos" in refused.stderr, refused.stderr
    settings = testbed.info()
    assert settings["hidden_os"] == settings["blacklisted_os"] == []

    testbed.run("gnt-os", "modify", "--blacklisted", "yes", "caseos")
    listed = testbed.run("gnt-os", "list", "--no-headers").stdout.split()
    assert "caseos+alpha" not in listed and "corral-ext4+default" in listed, listed
    blacklisted = testbed.run("gnt-os", "list", "--no-headers", "--blacklisted").stdout.split()
    assert {"caseos+alpha", "caseos+beta"} <= set(blacklisted), blacklisted
    # As in Ganeti, info and diagnose show it too, marked.
    assert "caseos:\n  - valid: True\n  - hidden: False\n  - blacklisted: True\n" in \
        testbed.run("gnt-os", "info", "caseos").stdout
    assert "OS: caseos [global status: valid] [blacklisted]\n" in \
        testbed.run("gnt-os", "diagnose").stdout
    # Every variant is refused, since the state belongs to the OS.
    error = _add(testbed, "black.testbed", "caseos+beta", check=False)
    assert "blacklisted" in error, error
    testbed.run("gnt-os", "modify", "--blacklisted", "no", "caseos")

    info = testbed.run("gnt-os", "info", "caseos").stdout
    assert "  - OS version: test-1\n" in info, info
    assert "    - track: Distribution track, declared in upper case\n" in info, info
    diagnose = testbed.run("gnt-os", "diagnose").stdout
    block = diagnose.split("OS: caseos ", 1)[1].split("\n\n", 1)[0]
    assert "  OS version: test-1\n" in block, block
    assert "[parameters: dump_file, fail, extra, color, track]" in block, block

    dump = tmp_path / "env.txt"
    testbed.run("gnt-os", "modify", "-O", "track=testing", "caseos+alpha")
    assert testbed.info()["osparams"] == {"caseos+alpha": {"track": "testing"}}
    _add(testbed, "track.testbed", "caseos+alpha", "-O", f"dump_file={dump}")
    assert _env(dump)["OSP_TRACK"] == "testing"
    testbed.run("gnt-instance", "reinstall", "-f", "-O", "track=unstable", "track.testbed")
    assert _env(dump)["OSP_TRACK"] == "unstable"
