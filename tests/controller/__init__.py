"""Tests of the dlcpctl controller (controller/)."""
