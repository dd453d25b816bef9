"""``python -m corral.noded``: the same as ``corral-noded``."""

from corral.noded.daemon import main

main()
