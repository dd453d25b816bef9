"""The network side of a kvm guest: one tap device per NIC, set up on this node.

noded creates a *persistent* tap for each NIC (``ip tuntap add``) before qemu starts and
qemu opens it by name (``-netdev tap,ifname=…,script=no,downscript=no``). Named taps
rather than inherited file descriptors because the tap must outlive the call that made
it: the migration target needs its taps before ``-incoming`` starts, hotplug makes one
for a running qemu (noded opens it and passes the descriptor, which a qemu confined to
another user or a chroot could not open by name), and whoever finds a dead qemu can
delete its taps by the names in the runtime record.

Tap names (:func:`tap_name`) are ``tap`` and 12 hex digits of a hash of the node's state
directory, the instance and the NIC: at most 15 characters, the same after a noded
restart, and different for the two nodes of a testbed that run on one machine (the source
and target of a migration hold a tap for the same NIC at once). They start with ``tap``
like the kernel's own names, which network scripts written for Ganeti expect.

Modes, as in Ganeti: ``bridged`` enslaves the tap to the bridge named by the NIC's
``link`` (a ``vlan`` puts the port in those VLANs of a VLAN-filtering bridge);
``routed`` (design 2.1, non-bridged NICs) brings the tap up with proxy ARP and
forwarding and routes the NIC's IP through it in the routing table named by ``link``
(the main table when empty), with a rule sending what comes from the tap to that table.
``openvswitch`` is left to the administrator's hook.

The kvm hypervisor calls :func:`prepare_nics` before qemu starts (its arguments go on
qemu's command line, its :class:`Tap` records into the runtime record's
``extra["netdev"]``) and :func:`release_nics` once qemu is gone; a migration target calls
:func:`finish_incoming` once the guest runs there.

The hook (:func:`hook_path`, ``kvm-ifup-custom`` in the data directory) is Ganeti's
``kvm-ifup-custom`` (``kvm-vif-bridge`` in Ganeti 3.0): when it exists and is executable
it *replaces* corral's own configuration of every tap, and gets Ganeti's environment
(:func:`hook_environment`). Its failure fails the start, quoting its output.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from corral.errors import HypervisorError
from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.objects.specs import InstanceSpec, NicSpec
from corral.paths import Paths

__all__ = [
    "NIC_MODELS",
    "NicSetup",
    "Tap",
    "check_nics",
    "configure_routed",
    "finish_incoming",
    "hook_environment",
    "hook_path",
    "netdev_args",
    "nic_device_id",
    "nic_model",
    "pci_nic_ids",
    "prepare_nics",
    "recorded_taps",
    "release_nics",
    "setup_taps",
    "tap_name",
    "teardown_taps",
    "vlan_commands",
]

log = logging.getLogger(__name__)

#: qemu's NIC model for each ``nic_type`` Ganeti accepts; ``paravirtual`` is virtio.
NIC_MODELS: Final[dict[str, str]] = {
    "paravirtual": "virtio-net-pci",
    **{name: name for name in ("e1000", "i82551", "i82557b", "i82559er", "ne2k_isa",
                               "ne2k_pci", "pcnet", "rtl8139")},
}

#: Where the kernel lists interfaces; a bridge has a ``bridge`` subdirectory.
SYS_CLASS_NET: Final = Path("/sys/class/net")
#: Per-interface IPv4 settings (proxy ARP, forwarding).
PROC_IPV4_CONF: Final = Path("/proc/sys/net/ipv4/conf")
#: Per-interface IPv6 settings (proxy NDP, forwarding).
PROC_IPV6_CONF: Final = Path("/proc/sys/net/ipv6/conf")

#: The longest interface name Linux accepts (IFNAMSIZ - 1).
IFNAME_MAX: Final = 15
#: How long one ``ip`` command or the hook may take.
COMMAND_TIMEOUT: Final = 60.0
#: How many of the hook's last output lines a failure quotes.
QUOTED_LINES: Final = 10


class Tap(msgspec.Struct, frozen=True, kw_only=True):
    """A tap device made for one NIC, as kept in the instance's runtime record."""

    name: str
    nic_index: int
    nic_uuid: str = ""
    mode: str = "bridged"
    link: str = ""
    ip: str | None = None
    mac: str = ""
    vlan: str = ""
    configured: bool = True
    """False for a routed NIC on a migration target until :func:`configure_routed`."""


# -- names and qemu arguments ---------------------------------------------------
def tap_name(paths: Paths, instance_uuid: str, nic: NicSpec) -> str:
    """The tap device name for ``nic`` of an instance on the node working in ``paths``."""
    key = f"{paths.hypervisor_state_dir}\0{instance_uuid}\0{nic.uuid or nic.index}"
    return "tap" + hashlib.sha256(key.encode()).hexdigest()[:IFNAME_MAX - 3]


def nic_device_id(nic: NicSpec) -> str:
    """The qemu device id of ``nic``: ``nic-`` and its uuid's first 8 characters."""
    return f"nic-{nic.uuid[:8]}" if nic.uuid else f"nic-{nic.index}"


def nic_model(nic_type: str) -> str:
    """The qemu device for the ``nic_type`` hypervisor parameter."""
    try:
        return NIC_MODELS[nic_type]
    except KeyError:
        raise HypervisorError(
            f"unknown nic_type {nic_type!r}: accepted are {', '.join(sorted(NIC_MODELS))}"
        ) from None


def pci_nic_ids(spec: InstanceSpec) -> list[str]:
    """The device ids of ``spec``'s NICs that sit on the PCI bus (all but ``ne2k_isa``),
    in order."""
    model = nic_model(str(spec.hvparams.get("nic_type") or "paravirtual"))
    return [] if model == "ne2k_isa" else [nic_device_id(nic) for nic in spec.nics]


def netdev_args(spec: InstanceSpec, taps: Sequence[Tap], *,
                pci_slots: Mapping[str, int] | None = None,
                romless: Iterable[str] = ()) -> list[str]:
    """The qemu ``-netdev``/``-device`` arguments for ``spec``'s NICs on ``taps``.

    The device is ``nic-<uuid8>`` on netdev ``nic-<uuid8>-net`` (the names hotplug
    removes by), with the NIC's MAC, the model ``nic_type`` asks for, its PCI slot from
    ``pci_slots`` and no option ROM when ``romless`` names it (as it was hot-plugged).
    """
    model = nic_model(str(spec.hvparams.get("nic_type") or "paravirtual"))
    virtio = model == NIC_MODELS["paravirtual"]
    vhost = ",vhost=on" if virtio and spec.hvparams.get("vhost_net") else ""
    by_index = {tap.nic_index: tap for tap in taps}
    slots = pci_slots or {}
    no_rom = set(romless)
    args: list[str] = []
    for nic in spec.nics:
        tap = by_index.get(nic.index)
        if tap is None:
            raise HypervisorError(f"instance {spec.name}: NIC {nic.index} has no tap device")
        dev = nic_device_id(nic)
        netdev = f"tap,id={dev}-net,ifname={tap.name},script=no,downscript=no{vhost}"
        device = f"{model},id={dev},netdev={dev}-net,mac={nic.mac}"
        if dev in slots:
            device += f",addr=0x{slots[dev]:x}"
        if dev in no_rom:
            device += ",romfile="
        args += ["-netdev", netdev, "-device", device]
    return args


# -- checks ---------------------------------------------------------------------
def hook_path(paths: Paths) -> Path:
    """The administrator's NIC-up hook of this node (Ganeti's ``kvm-ifup-custom``)."""
    return paths.kvm_ifup_custom


def _hook(paths: Paths) -> Path | None:
    path = hook_path(paths)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def check_nics(paths: Paths, spec: InstanceSpec) -> list[str]:
    """What keeps ``spec``'s NICs from being set up on this node, one line each.

    Empty when nothing does. Bridged NICs need their bridge here, routed NICs an IP;
    ``openvswitch`` needs the hook, which then does all the configuration.
    """
    hook = _hook(paths)
    problems: list[str] = []
    nic_type = str(spec.hvparams.get("nic_type") or "paravirtual")
    if spec.nics and nic_type not in NIC_MODELS:
        problems.append(f"unknown nic_type {nic_type!r} (accepted: "
                        f"{', '.join(sorted(NIC_MODELS))})")
    if spec.nics and spec.hvparams.get("vhost_net") and not Path("/dev/vhost-net").exists():
        problems.append("vhost_net is set but this node has no /dev/vhost-net")
    for nic in spec.nics:
        where = f"NIC {nic.index}"
        if nic.mode == "bridged":
            if not nic.link:
                problems.append(f"{where} is bridged but names no bridge (link)")
            elif hook is None and not (SYS_CLASS_NET / nic.link / "bridge").is_dir():
                problems.append(f"{where}: bridge {nic.link} does not exist on this node")
            elif hook is None and nic.vlan:
                problems += [f"{where}: {line}" for line in _vlan_problems(nic)]
        elif nic.mode == "routed":
            if not nic.ip:
                problems.append(f"{where} is routed but has no IP address")
        elif nic.mode == "openvswitch":
            if hook is None:
                problems.append(f"{where}: mode openvswitch is not supported by corral's "
                                f"kvm hypervisor unless the {hook_path(paths)} hook sets "
                                f"it up (accepted: bridged, routed)")
        else:
            problems.append(f"{where}: unknown mode {nic.mode!r} (accepted: bridged, "
                            f"routed, openvswitch)")
    return problems


def _vlan_problems(nic: NicSpec) -> list[str]:
    try:
        vlan_commands("tap", nic.vlan)
    except HypervisorError as err:
        return [err.message]
    filtering = SYS_CLASS_NET / nic.link / "bridge" / "vlan_filtering"
    try:
        enabled = filtering.read_text().strip() == "1"
    except OSError:
        enabled = False
    if not enabled:
        return [f"vlan {nic.vlan} needs VLAN filtering on bridge {nic.link} "
                f"(ip link set {nic.link} type bridge vlan_filtering 1)"]
    return []


# -- the hook environment -------------------------------------------------------
def hook_environment(spec: InstanceSpec, nic: NicSpec, tap: str) -> dict[str, str]:
    """The environment of the NIC-up hook for ``nic`` on ``tap``, as Ganeti gives it.

    ``INSTANCE``, ``MAC``, ``MODE``, ``INTERFACE`` (the tap), ``INTERFACE_INDEX``,
    ``INTERFACE_UUID``, ``TAGS`` (space separated), ``VLAN``, ``ACTION`` (``up``; Ganeti
    3.1 added it for its down scripts), and where set ``IP``,
    ``INTERFACE_NAME``, ``LINK``, ``BRIDGE`` (bridged mode: the link); ``PATH`` is
    noded's with ``/sbin:/usr/sbin`` appended.
    """
    env = {
        "PATH": f"{os.environ.get('PATH', '/usr/bin:/bin')}:/sbin:/usr/sbin",
        "INSTANCE": spec.name,
        "MAC": nic.mac,
        "MODE": nic.mode,
        "INTERFACE": tap,
        "INTERFACE_INDEX": str(nic.index),
        "INTERFACE_UUID": nic.uuid,
        "TAGS": " ".join(spec.tags),
        "ACTION": "up",
        "VLAN": nic.vlan,
    }
    if nic.ip:
        env["IP"] = nic.ip
    if nic.name:
        env["INTERFACE_NAME"] = nic.name
    if nic.link:
        env["LINK"] = nic.link
        if nic.mode == "bridged":
            env["BRIDGE"] = nic.link
    return env


# -- commands -------------------------------------------------------------------
async def _run(argv: Sequence[str], *, env: dict[str, str] | None = None,
               what: str | None = None) -> str:
    """Run ``argv``; its output, or a :class:`HypervisorError` quoting it."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env)
    except OSError as err:
        raise HypervisorError(f"cannot run {argv[0]}: {err.strerror}") from None
    try:
        async with asyncio.timeout(COMMAND_TIMEOUT):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise HypervisorError(f"{what or ' '.join(argv)} did not finish within "
                              f"{COMMAND_TIMEOUT:.0f} s") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        lines = text.strip().splitlines()[-QUOTED_LINES:]
        quoted = "; ".join(lines) if lines else "no output"
        status = (f"exit code {proc.returncode}" if proc.returncode and proc.returncode > 0
                  else f"signal {-(proc.returncode or 0)}")
        raise HypervisorError(f"{what or ' '.join(argv)} failed ({status}): {quoted}")
    return text


async def _ip(*args: str) -> str:
    return await _run(["ip", *args])


def _write_sysctl(path: Path, value: str) -> None:
    if path.parent.is_dir():
        path.write_text(value)


# -- set up and tear down -------------------------------------------------------
async def setup_taps(paths: Paths, spec: InstanceSpec, *, user: int | None = None,
                     incoming: bool = False) -> list[Tap]:
    """Create and configure a tap for each of ``spec``'s NICs; the taps, in NIC order.

    ``user`` is the uid qemu runs as (the tap then belongs to it).
    ``incoming`` is for a migration target: routed NICs get their tap but no route yet,
    so that the IP is not announced before the guest has moved; call
    :func:`configure_routed` once the migration has succeeded (Ganeti does the same).

    Refuses (before creating anything) NICs :func:`check_nics` objects to. On any
    failure the taps made so far are removed again.
    """
    problems = await asyncio.to_thread(check_nics, paths, spec)
    if problems:
        raise HypervisorError(f"instance {spec.name}: cannot set up its network: "
                              f"{'; '.join(problems)}")
    hook = await asyncio.to_thread(_hook, paths)
    taps: list[Tap] = []
    try:
        for nic in spec.nics:
            tap = Tap(name=tap_name(paths, spec.uuid, nic), nic_index=nic.index,
                      nic_uuid=nic.uuid, mode=nic.mode, link=nic.link, ip=nic.ip,
                      mac=nic.mac, vlan=nic.vlan,
                      configured=not (incoming and nic.mode == "routed"))
            await _create(tap.name, user)
            taps.append(tap)
            if tap.configured:
                await _configure(spec, nic, tap, hook)
    except BaseException:
        await teardown_taps(taps)
        raise
    return taps


async def configure_routed(paths: Paths, spec: InstanceSpec, taps: Sequence[Tap]
                           ) -> list[Tap]:
    """Configure the taps :func:`setup_taps` left unconfigured on a migration target.

    Returns the taps as they are now (all configured), for the runtime record.
    """
    hook = await asyncio.to_thread(_hook, paths)
    nics = {nic.index: nic for nic in spec.nics}
    done: list[Tap] = []
    for tap in taps:
        if not tap.configured and tap.nic_index in nics:
            await _configure(spec, nics[tap.nic_index], tap, hook)
            tap = msgspec.structs.replace(tap, configured=True)
        done.append(tap)
    return done


async def teardown_taps(taps: Iterable[Tap]) -> None:
    """Remove ``taps`` and the rules routed ones added; best effort, never raises.

    Deleting a tap takes its routes and its bridge port with it; a tap already gone
    is fine (qemu died, or this runs twice).
    """
    for tap in taps:
        if tap.mode == "routed":
            await _delete_rules(tap)
        if await asyncio.to_thread((SYS_CLASS_NET / tap.name).exists):
            try:
                await _ip("link", "del", "dev", tap.name)
            except HypervisorError as err:
                log.warning("cannot remove tap %s: %s", tap.name, err.message)


async def _create(name: str, user: int | None) -> None:
    if await asyncio.to_thread((SYS_CLASS_NET / name).exists):
        # Ours by its name: left behind by a qemu that died with noded down.
        await _ip("link", "del", "dev", name)
    argv = ["tuntap", "add", "dev", name, "mode", "tap"]
    if user is not None:
        argv += ["user", str(user)]
    await _ip(*argv)


async def _configure(spec: InstanceSpec, nic: NicSpec, tap: Tap, hook: Path | None) -> None:
    if hook is not None:
        # noded's own environment below Ganeti's variables, as Ganeti runs it
        await _run([str(hook)], env={**os.environ, **hook_environment(spec, nic, tap.name)},
                   what=f"the NIC hook {hook} for NIC {nic.index} ({tap.name})")
    elif nic.mode == "bridged":
        await _bridge(tap)
    elif nic.mode == "routed":
        await _route(tap)


def vlan_commands(tap: str, vlan: str) -> list[list[str]]:
    """The ``bridge vlan`` commands that put ``tap`` in the VLANs of a NIC's ``vlan``.

    Ganeti's notation: ``.100`` or ``100`` is an untagged (access) VLAN, ``:200:300``
    tagged (trunk) VLANs, ``100:200`` both; the first, untagged one becomes the port's
    PVID. Raises :class:`HypervisorError` for anything else.
    """
    parts = vlan.split(":")
    untagged, tagged = parts[0], parts[1:]
    vids = [untagged.removeprefix(".")] if untagged else []
    vids += tagged
    if not vids or not all(v.isdigit() and 1 <= int(v) <= 4094 for v in vids):
        raise HypervisorError(
            f"invalid vlan {vlan!r}: accepted are .ID or ID (untagged), :ID[:ID…] (tagged)"
            f" and ID:ID[:ID…] (both), IDs from 1 to 4094")
    commands = []
    for position, vid in enumerate(vids):
        extra = ["pvid", "untagged"] if position == 0 and untagged else []
        commands.append(["bridge", "vlan", "add", "dev", tap, "vid", vid, *extra, "master"])
    return commands


async def _bridge(tap: Tap) -> None:
    # A bridge takes the lowest MAC among its ports; fe: keeps a tap's from winning.
    address = (await asyncio.to_thread(
        (SYS_CLASS_NET / tap.name / "address").read_text)).strip()
    mtu = (await asyncio.to_thread((SYS_CLASS_NET / tap.link / "mtu").read_text)).strip()
    await _ip("link", "set", "dev", tap.name, "address", "fe" + address[2:], "mtu", mtu)
    await _ip("link", "set", "dev", tap.name, "master", tap.link, "up")
    for command in vlan_commands(tap.name, tap.vlan) if tap.vlan else []:
        await _run(command)


def _table(link: str) -> list[str]:
    return ["table", link] if link else []


def _family(tap: Tap) -> list[str]:
    return ["-6"] if tap.ip and ":" in tap.ip else []


async def _route(tap: Tap) -> None:
    assert tap.ip is not None  # check_nics refuses routed NICs without one
    await _ip("link", "set", "dev", tap.name, "up")
    if tap.link:
        await _delete_rules(tap)
        await _ip(*_family(tap), "rule", "add", "iif", tap.name, "table", tap.link)
    await _ip(*_family(tap), "route", "replace", tap.ip, "proto", "static", "dev", tap.name,
              *_table(tap.link))
    # as Ganeti: proxy ARP (IPv4) or NDP (IPv6) and forwarding, where the kernel has them
    for conf, settings in ((PROC_IPV4_CONF, ("proxy_arp", "forwarding")),
                           (PROC_IPV6_CONF, ("proxy_ndp", "forwarding"))):
        for setting in settings:
            await asyncio.to_thread(_write_sysctl, conf / tap.name / setting, "1")


async def _delete_rules(tap: Tap) -> None:
    if not tap.link:
        return
    for _ in range(16):
        try:
            await _ip(*_family(tap), "rule", "del", "iif", tap.name, "table", tap.link)
        except HypervisorError:
            return


# -- what the kvm hypervisor calls ------------------------------------------------------
@dataclass
class NicSetup:
    """What :func:`prepare_nics` made for one start."""

    args: list[str] = field(default_factory=list)
    """qemu arguments (``-netdev``/``-device`` pairs)."""
    taps: list[str] = field(default_factory=list)
    """Tap devices created, in NIC order (recorded, released at stop)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """What the runtime record keeps in ``extra["netdev"]``: the :class:`Tap` records."""


def recorded_taps(record: RuntimeRecord) -> list[Tap]:
    """The taps ``record`` says were made, with what their removal needs.

    Names in ``record.taps`` without a full entry (an older record) count as bare taps.
    """
    extra = record.extra.get("netdev") or {}
    try:
        taps = msgspec.convert(extra.get("taps") or [], list[Tap])
    except msgspec.ValidationError:
        taps = []
    known = {tap.name for tap in taps}
    taps += [Tap(name=name, nic_index=-1, mode="") for name in record.taps
             if name not in known]
    return taps


async def prepare_nics(spec: InstanceSpec, runtime: InstanceRuntime, *,
                       incoming: bool = False, pci_slots: Mapping[str, int] | None = None,
                       romless: Iterable[str] = ()) -> NicSetup:
    """Create the host side of ``spec``'s NICs; the qemu arguments for them.

    The taps are made for the uid the runtime record already holds (security is
    prepared first), so that a qemu running as that user may open them. ``incoming``:
    qemu is started to receive a migration, routed NICs wait for
    :func:`finish_incoming`. ``pci_slots`` and ``romless`` go to :func:`netdev_args`.
    On failure nothing is left and
    :class:`~corral.errors.HypervisorError` says why.
    """
    record = await asyncio.to_thread(runtime.read)
    user = record.uid if record is not None else None
    taps = await setup_taps(runtime.paths, spec, user=user, incoming=incoming)
    return NicSetup(args=netdev_args(spec, taps, pci_slots=pci_slots, romless=romless),
                    taps=[tap.name for tap in taps],
                    extra={"taps": msgspec.to_builtins(taps)})


async def finish_incoming(spec: InstanceSpec, runtime: InstanceRuntime) -> None:
    """On a migration target once the guest runs here: set up the routed NICs that
    :func:`prepare_nics` left alone (their routes now point here) and record them.

    For the migration part to call after a successful migration; the caller holds the
    instance's runtime lock.
    """
    record = await asyncio.to_thread(runtime.read)
    if record is None:
        raise HypervisorError(f"instance {spec.name} has no runtime record on this node")
    taps = await configure_routed(runtime.paths, spec, recorded_taps(record))
    record.extra.setdefault("netdev", {})["taps"] = msgspec.to_builtins(taps)
    await asyncio.to_thread(runtime.write, record)


async def release_nics(runtime: InstanceRuntime, record: RuntimeRecord) -> None:
    """Remove what :func:`prepare_nics` made (the taps of ``record`` and the routing
    rules of routed ones); never fails for what is already gone."""
    del runtime
    await teardown_taps(recorded_taps(record))
