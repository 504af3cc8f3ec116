"""The typed IR between the front end and the back end, and the analyses on it.

* :mod:`.ir`: a checked program's declarations -- types, resolved symbols, actions, tables, extern instances,
  the V1Switch blocks -- and the storage layout (slots).
* :mod:`.tir`: the bodies -- expressions, statements, parser states -- as frozen nodes, each with its source
  position and, for expressions, its type.
* :mod:`.analysis`: facts the back end bases its choices on (def-use, loop-free parsers, storage nothing
  reads), each a pure function of the IR.

The front end (:mod:`switch.frontend`) builds the IR; the back end (code generator, P4Info) and the target read
it.  Nothing here imports the front end: the IR does not refer to the syntax tree.
"""
