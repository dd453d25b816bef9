"""``python -m corral.testbed up|down|status|demo --dir DIR``, ``... guest build --dir DIR``,
``... pair-up|pair-down --dir DIR`` (two clusters for moves)."""

from __future__ import annotations

import base64
import os
import re
import shlex
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import click

from corral import serializer
from corral.cli.common import CorralGroup
from corral.daemons import status as daemon_status
from corral.errors import NotFoundError
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.paths import Paths
from corral.testbed import STATE_FILE, Testbed, down, failover, load, up
from corral.testbed import guest as tiny_guest

#: Where the demo's second cluster (the target of its inter-cluster move) lives.
MOVED_TO = "moved-to"

_dir_option = click.option(
    "--dir", "directory", type=click.Path(file_okay=False, path_type=Path), required=True,
    help="Directory that holds the testbed's nodes and testbed.json.",
)


@click.group(cls=CorralGroup)
def cli() -> None:
    """Run a whole corral cluster locally, unprivileged, on loopback addresses."""


@cli.command("up")
@_dir_option
@click.option("--nodes", default=3, show_default=True, help="Number of nodes.")
@click.option("--hypervisors", default="fake", show_default=True, metavar="NAME[,NAME]",
              help="The cluster's enabled hypervisors, the first the default (fake, kvm).")
@click.option("--tiny-guest", type=click.Path(file_okay=False, path_type=Path),
              help="Build the tiny guest in this directory and make its kernel and initrd"
                   " the cluster's kvm kernel_path and initrd_path.")
def up_command(directory: Path, nodes: int, hypervisors: str,
               tiny_guest: Path | None) -> None:
    """Create the cluster in DIR and start its daemons."""
    testbed = up(directory, nodes,
                 hypervisors=[name.strip() for name in hypervisors.split(",") if name.strip()],
                 tiny_guest=tiny_guest)
    click.echo(f"testbed up: {len(testbed.nodes)} node(s), master {testbed.master}; "
               f"state in {Path(testbed.dir) / STATE_FILE}")


@cli.command("pair-up")
@_dir_option
@click.option("--nodes", default=2, show_default=True, help="Number of nodes of each cluster.")
def pair_up_command(directory: Path, nodes: int) -> None:
    """Create two clusters in DIR/source and DIR/destination sharing one cluster domain
    secret, for moves between them (move-instance)."""
    from corral.testbed.pair import up_pair

    pair = up_pair(directory, nodes)
    for testbed in (pair.source, pair.destination):
        click.echo(f"{testbed.cluster_name}: {len(testbed.nodes)} node(s), RAPI "
                   f"{testbed.rapi['url']}; state in {Path(testbed.dir) / STATE_FILE}")


@cli.command("pair-down")
@_dir_option
def pair_down_command(directory: Path) -> None:
    """Stop the processes of both clusters of the pair in DIR."""
    from corral.testbed.pair import down_pair

    stopped = down_pair(directory)
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@cli.command("down")
@_dir_option
def down_command(directory: Path) -> None:
    """Stop the processes the testbed in DIR started (and only those)."""
    stopped = down(directory)
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@cli.command("running")
@_dir_option
def running_command(directory: Path) -> None:
    """Exit 0 and list the live daemons if the testbed in DIR runs, else exit 1."""
    testbed = load(directory.resolve())
    live = [] if testbed is None else [
        f"corral-{name} on {node.name} (pid {pid})" for node in testbed.nodes
        for name, pid in daemon_status(Paths(Path(node.root))).items() if pid is not None]
    if not live:
        sys.exit(1)
    click.echo(", ".join(live))


@cli.command("failover")
@_dir_option
@click.option("--to", "node", required=True, metavar="NODE",
              help="The node to make the master: its name or its number (1, 2, ...).")
def failover_command(directory: Path, node: str) -> None:
    """Make NODE the master (gnt-cluster master-failover run there)."""
    testbed = failover(directory, node)
    click.echo(f"testbed master is now {testbed.master}; testbed.json updated")


@cli.group("guest")
def guest_group() -> None:
    """The tiny guest that tests and the demo boot (a kernel and an initramfs)."""


@guest_group.command("build")
@_dir_option
def guest_build_command(directory: Path) -> None:
    """Build the tiny guest into DIR (again only when its inputs changed); print the
    kernel and initramfs paths and the kernel command line that configures it."""
    guest = tiny_guest.build(directory)
    click.echo(f"kernel: {guest.kernel}\ninitrd: {guest.initrd}\n"
               f"kernel_args: {tiny_guest.kernel_args(ip='192.0.2.10/24', gateway='192.0.2.1')}")


@cli.command("status")
@_dir_option
def status_command(directory: Path) -> None:
    """Show the testbed's nodes and daemons."""
    testbed = load(directory.resolve())
    if testbed is None:
        raise NotFoundError(f"no testbed in {directory} (no {STATE_FILE})")
    for node in testbed.nodes:
        daemons = ", ".join(f"{n} pid {p}" for n, p in node.daemons.items()) or "no daemons"
        role = "master" if node.master else "node"
        click.echo(f"{node.name:16} {node.ip:12} {role:6} {daemons}")


def _rapi_get(rapi: dict[str, str], path: str) -> str:
    """GET ``path`` from the testbed's RAPI (its CA, its write user); the JSON text."""
    context = ssl.create_default_context(cafile=rapi["ca"])
    token = base64.b64encode(f"{rapi['user']}:{rapi['password']}".encode()).decode()
    request = urllib.request.Request(rapi["url"] + path,
                                     headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        text: str = answer.read().decode()
        return text


#: Terminal control sequences (CSI ... letter) and other control characters but newline.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x09\x0b-\x1f\x7f]")


def _show_console(testbed: Testbed, node: str, instance: str, ticks: int = 3,
                  timeout: float = 180.0) -> None:
    """Wait until ``instance``'s guest has written ``ticks`` counter lines on its serial
    console on ``node`` (the kvm hypervisor logs it there), then print the console."""
    root = next(Path(n.root) for n in testbed.nodes if n.name == node)
    log = InstanceRuntime(Paths(root), instance).serial_log
    click.echo(f"\n$ cat {log}   # {instance}'s serial console on {node}")
    sys.stdout.flush()
    deadline = time.monotonic() + timeout
    tick = re.compile(re.escape(tiny_guest.TICK) + r"\d+")
    text = ""
    ends: list[int] = []
    while len(ends) < ticks:
        if time.monotonic() > deadline:
            click.echo(_CONTROL.sub("", text))
            raise click.ClickException(f"{instance} wrote fewer than {ticks} counter lines "
                                       f"within {timeout:.0f} s (see {log})")
        time.sleep(0.2)
        try:
            text = log.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            text = ""
        ends = [match.end() for match in tick.finditer(text)]
    # Without terminal control sequences (the guest's shell asks the terminal where its
    # cursor is, and a real terminal would type the answer into this one).
    click.echo(_CONTROL.sub("", text[:ends[ticks - 1]].replace("\r\n", "\n")).strip("\n"))


@cli.command("demo")
@_dir_option
def demo_command(directory: Path) -> None:
    """Show what the demo cluster looks like and what to try next."""
    testbed = load(directory.resolve())
    if testbed is None:
        raise NotFoundError(f"no testbed in {directory}; run 'make demo'")
    env = {**os.environ, **testbed.env}
    root = testbed.env["CORRAL_ROOT"]

    def show(*args: str) -> str:
        click.echo(f"\n$ {' '.join(shlex.quote(a) for a in args)}")
        sys.stdout.flush()
        proc = subprocess.run(args, env=env, capture_output=True, text=True)
        click.echo(proc.stdout, nl=False)
        if proc.returncode != 0:
            click.echo(proc.stderr, err=True, nl=False)
            raise click.ClickException(f"{args[0]} exited with {proc.returncode}")
        return proc.stdout

    show("gnt-cluster", "info")
    show("gnt-node", "list")
    show("gnt-os", "list")
    # Instances through their life cycle: the bundled OS formats a real ext4 file system
    # in a sparse file disk; a sharedfile instance migrates without copying its disk.
    show("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n", "node2.testbed",
         "--disk", "0:size=256M", "--net", "0:mode=routed,ip=192.0.2.11,link=100",
         "--reason", "demo", "web1.testbed")
    # Routed NICs: a move or migration to a node without the bridge of a bridged NIC
    # is refused, and the testbed's host need not have any bridge.
    show("gnt-instance", "add", "-t", "sharedfile", "-o", "corral-ext4+minimal", "-n",
         "node1.testbed", "--disk", "0:size=128M", "-B", "vcpus=2,maxmem=256M",
         "--net", "0:mode=routed,ip=192.0.2.12,link=100", "db1.testbed")
    show("gnt-instance", "add", "-t", "diskless", "--no-install", "-n", "node3.testbed",
         "--net", "0:mode=routed,ip=192.0.2.10,link=100", "--no-start", "light1.testbed")
    # External storage: the ExtStorage provider corral ships (share/extstorage/corral-file)
    # keeps volumes as files in a directory every testbed node sees, so an instance on it
    # migrates without copying its disk, like one on Ceph (docs/extstorage.md, docs/rbd.md).
    show("gnt-cluster", "modify", "--enabled-disk-templates", "file,sharedfile,diskless,ext",
         "--ipolicy-disk-templates", "file,sharedfile,diskless,ext")
    show("gnt-storage", "info")
    show("gnt-instance", "add", "-t", "ext", "-o", "corral-ext4+default", "-n", "node1.testbed",
         "--disk", "0:size=128M,provider=corral-file", "--net",
         "0:mode=routed,ip=192.0.2.13,link=100", "files1.testbed")
    # A real virtual machine next to the pretend ones: the kvm hypervisor runs the tiny
    # guest in qemu (under TCG, software emulation, where the host has no usable KVM), and
    # the corral-tiny OS definition wrote the guest's host name and address on its disk.
    # Its NIC is a tap device routed to it (table 100 of the host, design 2.1's routed
    # mode), which needs root and /dev/net/tun; without them the guest has no NIC.
    can_tap = os.geteuid() == 0 and os.path.exists("/dev/net/tun")
    show("gnt-instance", "add", "-t", "file", "-o", "corral-tiny", "-H", "kvm", "-n",
         "node2.testbed", "--disk", "0:size=16M", "-B", "maxmem=128M,minmem=128M",
         *(["--net", "0:mode=routed,ip=192.0.2.20,link=100"] if can_tap else ["--no-nics"]),
         "tiny1.testbed")
    _show_console(testbed, "node2.testbed", "tiny1.testbed")
    show("gnt-instance", "list", "-o",
         "name,hypervisor,pnode,status,disk_template,os,disk.sizes,nic.ips")
    # Live migration of the running guest with its local disk (qemu mirrors the disk to
    # the target over NBD, then the memory): it keeps counting on the other node.
    show("gnt-instance", "migrate", "-f", "-n", "node3.testbed", "tiny1.testbed")
    _show_console(testbed, "node3.testbed", "tiny1.testbed", ticks=2)
    show("gnt-instance", "migrate", "-f", "-n", "node3.testbed", "db1.testbed")
    show("gnt-instance", "migrate", "-f", "-n", "node2.testbed", "files1.testbed")
    show("gnt-instance", "shutdown", "--reason", "demo maintenance window", "web1.testbed")
    show("gnt-instance", "move", "-f", "-n", "node3.testbed", "web1.testbed")
    show("gnt-instance", "startup", "web1.testbed")
    show("gnt-instance", "info", "web1.testbed")
    show("gnt-instance", "list", "-o", "name,pnode,status,oper_ram,be/vcpus")
    show("gnt-instance", "remove", "-f", "light1.testbed")
    # Without -n an allocator chooses the node: the cluster's default, the built-in
    # 'corral' (docs/iallocator.md), within the instance policy (gnt-cluster info).
    show("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-start", "--net",
         "0:mode=routed,ip=192.0.2.10,link=100", "light2.testbed")
    show("gnt-cluster", "modify", "-B", "maxmem=1G,vcpus=2", "--reason", "demo")
    # A job and its reason trail: the CLI's entry, the user's, the queue's.
    job = show("gnt-debug", "delay", "--submit", "--print-jobid", "--reason", "demo delay",
               "0.5").split()[0]
    show("gnt-job", "watch", job)
    show("gnt-job", "info", job)
    # A PAUSE filter holds new jobs in the queue until it is deleted.
    uuid = show("gnt-filter", "add", "--action", "PAUSE", "--reason", "demo maintenance",
                "--predicates", '[["jobid", [">", "id", "watermark"]]]').strip()
    held = show("gnt-debug", "delay", "--submit", "--print-jobid", "0").split()[0]
    show("gnt-filter", "list")
    show("gnt-job", "list", "-o", "id,status,summary,paused_by", held)
    show("gnt-filter", "delete", uuid)
    show("gnt-job", "wait", held)
    show("gnt-job", "list", held)
    # confd on every master candidate; RAPI on the master.
    show("corral-confd-query", "cluster-master")
    show("corral-confd-query", "instance-primary-node", "web1.testbed")
    rapi = testbed.rapi
    click.echo(f"\n$ curl --cacert {rapi['ca']} -u {rapi['user']}:... {rapi['url']}/2/info")
    info = serializer.loads(_rapi_get(rapi, "/2/info"))
    click.echo(serializer.dumps_pretty({key: info[key] for key in (
        "name", "master", "software_version", "protocol_version", "enabled_hypervisors")})
        + "\n(and more)")
    _show_move(testbed, show)
    click.echo(f"""
The demo cluster runs under {testbed.dir}. Try it yourself:

  export CORRAL_ROOT={root} PATH={Path(sys.executable).parent}:$PATH
  gnt-cluster info --json
  gnt-node list && gnt-instance list
  gnt-instance add -t file -o corral-ext4+default -n node3.testbed --disk 0:size=1G web2.testbed
  gnt-instance console tiny1.testbed   # the real guest's shell; Ctrl-] detaches
  gnt-os diagnose && gnt-storage diagnose
  gnt-cluster modify -H kvm:kernel_path=/boot/vmlinuz --dry-run
  gnt-debug delay --repeat 3 1 && gnt-job list
  gnt-filter add --action REJECT --predicates '[["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]]'
  gnt-cluster queue drain && gnt-cluster queue info
  gnt-cluster add-tags prod && gnt-cluster list-tags
  corral-daemons status && corral-confd-query node-role node2.testbed
  curl --cacert {testbed.rapi['ca']} -u admin:$(cat {root}/var/lib/corral/rapi/admin-password) \\
    {testbed.rapi['url']}/2/instances?bulk=1
  python -m corral.testbed failover --dir {testbed.dir} --to 2

Stop it with 'make demo-down'.""")


def _show_move(testbed: Testbed, show: Callable[..., str]) -> None:
    """An inter-cluster move (docs/moves.md): a second, one-node cluster gets the demo
    cluster's domain secret, and move-instance moves an instance to it over both RAPIs."""
    from corral.testbed.pair import share_domain_secret

    other_dir = Path(testbed.dir) / MOVED_TO
    click.echo(f"\n# A second cluster in {other_dir}, with the demo cluster's domain secret")
    other = up(other_dir, 1, domain="moved-to.testbed", addresses=["127.0.2.1"])
    share_domain_secret(testbed, other)
    show("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
         "node1.testbed", "--disk", "0:size=64M", "--net",
         "0:mode=routed,ip=192.0.2.14,link=100", "moving1.testbed")
    secrets_dir = Path(testbed.dir) / "move-credentials"
    secrets_dir.mkdir(mode=0o700, exist_ok=True)
    (secrets_dir / "source").write_text(testbed.rapi["password"] + "\n")
    (secrets_dir / "destination").write_text(other.rapi["password"] + "\n")
    src_host, src_port = testbed.rapi["url"].removeprefix("https://").rsplit(":", 1)
    dst_host, dst_port = other.rapi["url"].removeprefix("https://").rsplit(":", 1)
    move = ["move-instance", "-v", f"--src-ca-file={testbed.rapi['ca']}",
            f"--dest-ca-file={other.rapi['ca']}", f"--src-rapi-port={src_port}",
            f"--dest-rapi-port={dst_port}", "--src-username=admin",
            f"--src-password-file={secrets_dir / 'source'}",
            f"--dest-password-file={secrets_dir / 'destination'}", "--compress=zstd",
            "--dest-primary-node=node1.moved-to.testbed", src_host, dst_host,
            "moving1.testbed"]
    click.echo(f"\n$ {' '.join(shlex.quote(a) for a in move)}")
    moved = subprocess.run(move, env={**os.environ, **testbed.env}, capture_output=True,
                           text=True)
    click.echo(moved.stderr, nl=False)  # the tool logs its steps on stderr, as Ganeti's
    if moved.returncode != 0:
        raise click.ClickException(f"move-instance exited with {moved.returncode}")
    click.echo(f"\n$ CORRAL_ROOT={other.env['CORRAL_ROOT']} gnt-instance list")
    listing = subprocess.run(["gnt-instance", "list"], env={**os.environ, **other.env},
                             capture_output=True, text=True)
    click.echo(listing.stdout, nl=False)


cli(prog_name="python -m corral.testbed")
