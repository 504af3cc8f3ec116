"""dlcp embedded P4 target: runs the project's P4-16 source with BMv2 v1model semantics."""
