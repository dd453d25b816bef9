"""``python -m corral.confd``: the same as ``corral-confd``."""

from corral.confd.daemon import main

main()
