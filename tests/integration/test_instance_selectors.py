"""gnt-instance startup/shutdown/reboot on many instances at once, on the 3-node
testbed: Ganeti's selectors, its confirmation on the terminal, one job per instance,
and its messages and exit codes for selections that make no sense."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import termios
from dataclasses import dataclass

from tests.conftest import BIN, TestbedHandle
from tests.integration.test_instances import list_instances

PLACES = {"a.testbed": "node1.testbed", "b.testbed": "node2.testbed",
          "c.testbed": "node2.testbed", "d.testbed": "node3.testbed"}


def make_instances(testbed: TestbedHandle) -> None:
    """a on node1, b and c on node2, d on node3, all stopped; a and c tagged "web",
    node2 tagged "rack2", node3 "rack3"."""
    for name, node in PLACES.items():
        testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-start",
                    "-n", node, name)
    testbed.run("gnt-instance", "add-tags", "a.testbed", "web")
    testbed.run("gnt-instance", "add-tags", "c.testbed", "web", "db")
    testbed.run("gnt-node", "add-tags", "node2.testbed", "rack2")
    testbed.run("gnt-node", "add-tags", "node3.testbed", "rack3")


def running(testbed: TestbedHandle) -> list[str]:
    return [name for name, status in list_instances(testbed, "name,status")
            if status == "running"]


def job_ids(testbed: TestbedHandle) -> list[str]:
    return testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout.split()


def submitted(testbed: TestbedHandle, *args: str) -> list[str]:
    """The instances ``shutdown --submit --force-multiple ARGS`` runs a job for, after
    checking that each printed job exists and is about its instance."""
    out = testbed.run("gnt-instance", "shutdown", "--submit", "--force-multiple",
                      *args).stdout
    pairs = [line.split(": ") for line in out.splitlines()]
    listing = testbed.run("gnt-job", "list", "--no-headers", "--separator", "|", "-o",
                          "id,summary", *(job_id for job_id, _ in pairs)).stdout
    summaries = dict(line.split("|", 1) for line in listing.splitlines())
    for job_id, name in pairs:
        assert name in summaries[job_id], listing
    return [name for _, name in pairs]


def test_selectors_choose_instances_and_bad_selections_fail(testbed: TestbedHandle) -> None:
    """Each selector picks the right instances (one job each); nonsense is refused
    with Ganeti's message and exit code 1."""
    empty = testbed.run("gnt-instance", "startup", "--all")
    assert empty.stdout == "Cluster is empty, no instances to shutdown\n"

    make_instances(testbed)
    assert submitted(testbed, "d.testbed", "b.testbed") == ["b.testbed", "d.testbed"]
    assert submitted(testbed, "--all") == list(PLACES)
    assert submitted(testbed, "--node", "node2.testbed") == ["b.testbed", "c.testbed"]
    assert submitted(testbed, "--primary", "node3.testbed", "node1.testbed") == [
        "a.testbed", "d.testbed"]
    assert submitted(testbed, "--node-tags", "rack2", "rack3") == [
        "b.testbed", "c.testbed", "d.testbed"]
    assert submitted(testbed, "--pri-node-tags", "rack3") == ["d.testbed"]
    assert submitted(testbed, "--tags", "web") == ["a.testbed", "c.testbed"]
    assert submitted(testbed, "--tags", "db", "--instance", "a.testbed") == ["a.testbed"]
    # A name that matches nothing is left out, as in Ganeti 3.0.
    assert submitted(testbed, "a.testbed", "nosuch.testbed") == ["a.testbed"]

    before = job_ids(testbed)
    for args, message in [
        (["--all", "a.testbed"], "Cluster filter mode takes no arguments"),
        ([], "No instance names passed"),
        (["--tags"], "No instance tags passed"),
        (["--node"], "No node names passed"),
        (["--sec-node-tags"], "No node tags passed"),
        (["nosuch.testbed"], "Selection filter does not match any instances"),
        (["--tags", "nosuch"], "Selection filter does not match any instances"),
        (["--secondary", "node2.testbed"], "Selection filter does not match any instances"),
        (["--node", "nosuch.testbed"], "Selection filter does not match any instances"),
    ]:
        for verb in ("startup", "shutdown", "reboot"):
            proc = testbed.run("gnt-instance", verb, "--force-multiple", *args, check=False)
            assert (proc.returncode, proc.stdout, proc.stderr) == (
                1, "", "Failure: prerequisites not met for this operation:\n"
                "error type: wrong_input, error details:\n" f"{message}\n"), (verb, args)
    assert job_ids(testbed) == before

    # Waiting for the jobs: Ganeti's lines, and the instances really start.
    started = testbed.run("gnt-instance", "startup", "--force-multiple", "--node-tags",
                          "rack2")
    first, second = (int(job_id) for job_id in job_ids(testbed)[-2:])
    assert started.stdout == (f"Submitted jobs {first}, {second}\n"
                              f"Waiting for job {first} for b.testbed ...\n"
                              f"Waiting for job {second} for c.testbed ...\n")
    assert running(testbed) == ["b.testbed", "c.testbed"]
    # One instance by name: no question, no "Submitted jobs".
    rebooted = testbed.run("gnt-instance", "reboot", "c.testbed")
    assert rebooted.stdout == f"Waiting for job {second + 1} for c.testbed ...\n"
    # A failed job is reported per instance; the exit code is 1.
    failed = testbed.run("gnt-instance", "startup", "--force-multiple", "-B",
                         "maxmem=64T,minmem=64T", "a.testbed", "d.testbed", check=False)
    assert failed.returncode == 1
    assert failed.stderr.count(" has failed: Failure: ") == 2, failed.stderr
    assert " for a.testbed has failed" in failed.stderr
    assert running(testbed) == ["b.testbed", "c.testbed"]
    stopped = testbed.run("gnt-instance", "shutdown", "--force-multiple", "--all")
    assert stopped.stdout.startswith("Submitted jobs ")
    assert running(testbed) == []


@dataclass
class TtyRun:
    returncode: int
    tty: str
    stdout: str
    stderr: str


def run_on_tty(testbed: TestbedHandle, answers: list[str], *args: str) -> TtyRun:
    """Run a tool with a terminal of its own; type the ``answers`` at its prompts, one
    each, and close the terminal at the next one."""
    answers = list(answers)
    master, slave = pty.openpty()

    def become_terminal_owner() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([str(BIN / args[0]), *args[1:]], env=testbed.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, pass_fds=(slave,),
                            preexec_fn=become_terminal_owner)
    os.close(slave)
    shown = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                data = os.read(master, 4096)
            except OSError:  # the tool closed the terminal and exited
                break
            if not data:
                break
            shown += data
            if shown.endswith(b"?: "):
                if not answers:
                    break
                os.write(master, answers.pop(0).encode() + b"\n")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return TtyRun(proc.returncode, shown.decode().replace("\r\n", "\n"), stdout, stderr)


def test_many_instances_need_a_confirmation(testbed: TestbedHandle) -> None:
    """More than one instance, or any selector, asks on the terminal; "n" and no
    terminal change nothing; "y" and --force-multiple go ahead."""
    make_instances(testbed)
    question = ("The startup will operate on 2 instances.\nDo you want to continue?\n"
                "Affected instances:\n  a.testbed\n  c.testbed\ny/[n]/?: ")
    before = job_ids(testbed)

    declined = run_on_tty(testbed, ["n"], "gnt-instance", "startup", "--tags", "web")
    assert declined.returncode == 1
    assert declined.tty == question + "n\n"
    assert (declined.stdout, declined.stderr) == ("", "")

    # No terminal (cron, CI): the answer is no, silently.
    no_tty = subprocess.run([str(BIN / "gnt-instance"), "startup", "c.testbed", "a.testbed"],
                            env=testbed.env, stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, start_new_session=True, timeout=60)
    assert (no_tty.returncode, no_tty.stdout, no_tty.stderr) == (1, "", "")
    # A selector asks even when it chooses one instance.
    one = run_on_tty(testbed, ["n"], "gnt-instance", "reboot", "--pri-node-tags", "rack3")
    assert one.returncode == 1
    assert one.tty.startswith("The reboot will operate on 1 instances.\n")
    assert "Affected instances:\n  d.testbed\n" in one.tty
    assert job_ids(testbed) == before and running(testbed) == []

    helped = run_on_tty(testbed, ["?", "n"], "gnt-instance", "shutdown", "--all")
    assert " y - Yes, execute the shutdown\n n - No, abort the shutdown\n" in helped.tty

    accepted = run_on_tty(testbed, ["y"], "gnt-instance", "startup", "--tags", "web")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.tty == question + "y\n"
    assert accepted.stdout.startswith("Submitted jobs ")
    assert running(testbed) == ["a.testbed", "c.testbed"]

    # --force-multiple and a single name ask nothing, even without a terminal.
    for args in (["--force-multiple", "--node", "node3.testbed"], ["b.testbed"]):
        proc = subprocess.run([str(BIN / "gnt-instance"), "startup", *args],
                              env=testbed.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, start_new_session=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert running(testbed) == list(PLACES)
