"""``python -m corral.mond``: the node monitoring daemon."""

from corral.mond.daemon import main

main()
