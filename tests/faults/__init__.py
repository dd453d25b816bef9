"""The fault suite: break a running testbed (kill -9 of daemons, and more in helper
suites) under a workload, repair it as an operator would, and check the invariants of
:mod:`tests.faults.invariants` after every round. See docs/faults.md."""
