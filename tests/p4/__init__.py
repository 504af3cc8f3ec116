"""Tests of the DLCP switch program, p4src/dlcp.p4, on the embedded v1model target."""
