"""``make test-bmv2``: the embedded target against p4c and BMv2 (marker ``bmv2``; never part of ``make test``)."""
