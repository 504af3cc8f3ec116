"""Back end of the embedded P4 compiler: typed IR (:mod:`switch.midend`) -> Python code and P4Info.

* :mod:`.codegen`: one Python function per parser and control (or, fused, the whole pipeline as two), printed
  from the typed IR and the midend's analyses and compiled with ``compile``/``exec``; :mod:`.layout` plans
  the ``struct`` formats of header parsing and emission and the folding of ones' complement checksums.
* :mod:`.runtime`: the objects that generated code calls -- tables and their indexes, action profiles and
  selectors, counters, meters, registers, BMv2's hash and checksum algorithms.
* :mod:`.p4info`: the program's P4Info with p4c's ids and order (what ``python -m switch.compile`` writes and
  what the P4Runtime server serves).

Nothing here imports the front end (tests/test_import_cycles.py): the back end sees only the typed IR.
"""
