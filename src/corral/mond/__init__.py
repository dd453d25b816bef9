"""The node monitoring daemon (wiring layer): Ganeti's mond API and the node's metrics.

:mod:`corral.mond.collectors` gathers the reports, :mod:`corral.mond.server` serves
them over HTTP with :mod:`corral.mond.metrics` (Prometheus), and
:mod:`corral.mond.daemon` is ``corral-mond``.
"""
