"""dlcp embedded P4 target: runs the project's P4-16 source with BMv2 v1model semantics.

The subpackages are the stages a program goes through (docs/switch-target.md, "The pipeline in folders"):

* :mod:`switch.frontend`: P4-16 source text -> typed IR (preprocessor, parser, inliner, checker).
* :mod:`switch.midend`: the typed IR and the analyses on it.
* :mod:`switch.backend`: typed IR -> Python code and P4Info, and the runtime objects the code calls.
* :mod:`switch.target`: the v1model switch (:class:`switch.target.Switch`) and its traffic manager, on a
  simulated clock.
* :mod:`switch.daemon`: ``dlcp-switch``, the target on real interfaces behind P4Runtime and a management service.

Beside them :mod:`switch.errors` (every stage's error types) and :mod:`switch.compile` (``python -m
switch.compile``: P4Info of a program).
"""
