"""``python -m corral.rapi``: run the Remote API daemon."""

from corral.rapi.daemon import main

main()
