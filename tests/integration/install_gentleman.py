"""Install gentleman, the Ganeti RAPI client on PyPI, into a virtualenv, as published.

``python tests/integration/install_gentleman.py --python .venv/bin/python --cache build``

gentleman 15.5 (2015) cannot be installed as its source release stands: its setup.py
reads a ``requirements.txt`` and its ``vcversioner`` a ``version.txt``, neither of
which the release contains, and its code is Python 2 (``except E, e:``). This script:

1. has pip fetch the release by name (``pip download``, which fails at the metadata
   step; ``--no-clean`` keeps the unpacked source, and a saved archive is used when a
   later pip saves one first);
2. supplies the two files (the client needs ``requests`` and ``simplejson``: its
   imports), converts the code with the standard library's ``lib2to3`` and leaves out
   ``async.py``, its Twisted client, whose name is a keyword in Python 3;
3. keeps the result in ``CACHE/gentleman-15.5`` (later installs need no network for
   it) and installs it with pip into the interpreter given.

The client's own logic is not changed. Exits 0 when gentleman imports afterwards; else
1 with the reason on stderr (the RAPI client test then skips, saying why).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "15.5"
#: What the client imports besides the standard library.
REQUIREMENTS = "requests\nsimplejson\n"
#: vcversioner reads ``git describe`` output from version.txt when there is no .git.
VERSION_TXT = f"{VERSION}-0-g0000000\n"


def _fetch(python: str, into: Path) -> Path:
    """The unpacked release, fetched by pip; raises SystemExit when it cannot be had."""
    work = Path(tempfile.mkdtemp(prefix="gentleman-"))
    try:
        env = {**os.environ, "TMPDIR": str(work)}
        proc = subprocess.run(
            [python, "-m", "pip", "download", "--no-clean", "--no-deps", "--no-binary",
             ":all:", "-d", str(work / "dl"), f"gentleman=={VERSION}"],
            env=env, capture_output=True, text=True, timeout=300)
        archives = sorted((work / "dl").glob(f"gentleman-{VERSION}.tar.gz"))
        if archives:
            with tarfile.open(archives[0]) as tar:
                tar.extractall(work / "x", filter="data")
            found = sorted((work / "x").glob("*/setup.py"))
        else:
            found = sorted(work.glob("pip-*/gentleman*/setup.py"))
        if not found:
            raise SystemExit("pip could not fetch gentleman " + VERSION + ":\n"
                             + (proc.stderr or proc.stdout).strip()[-2000:])
        shutil.copytree(found[0].parent, into)
        return into
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _prepare(source: Path) -> None:
    """Supply the missing files and convert the code to Python 3 (in place)."""
    (source / "requirements.txt").write_text(REQUIREMENTS)
    (source / "version.txt").write_text(VERSION_TXT)
    (source / "gentleman" / "async.py").unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "lib2to3", "--write", "--nobackups",
         str(source / "gentleman")], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"lib2to3 could not convert gentleman: {proc.stderr.strip()}")


def main() -> int:
    """Install gentleman into ``--python``'s environment (see the module's text)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the interpreter to install into")
    parser.add_argument("--cache", type=Path, required=True,
                        help="where the prepared source is kept")
    args = parser.parse_args()
    probe = [args.python, "-c", "import gentleman.sync, gentleman.base"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return 0
    source = args.cache / f"gentleman-{VERSION}"
    if not (source / "version.txt").exists():
        shutil.rmtree(source, ignore_errors=True)
        args.cache.mkdir(parents=True, exist_ok=True)
        partial = args.cache / f".gentleman-{VERSION}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            _prepare(_fetch(args.python, partial))
        except SystemExit:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        partial.rename(source)
    proc = subprocess.run([args.python, "-m", "pip", "install", "--quiet", str(source)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or subprocess.run(probe, capture_output=True).returncode != 0:
        print(f"gentleman did not install: {proc.stderr.strip()[-2000:]}", file=sys.stderr)
        return 1
    print(f"installed gentleman {VERSION} (Python 3 conversion) from {source}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(f"gentleman not installed: {stop.code}", file=sys.stderr)
            sys.exit(1)
        raise
