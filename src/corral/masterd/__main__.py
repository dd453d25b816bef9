"""``python -m corral.masterd``: the same as ``corral-masterd``."""

from corral.masterd.daemon import main

main()
