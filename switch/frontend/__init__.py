"""Front end of the embedded P4 compiler: P4-16 source text -> typed IR (:mod:`switch.midend`).

:func:`switch.frontend.check.load_ir` runs the stages in order; each reports a located
:class:`~switch.errors.P4Error` (``file:line:col: message``):

* :mod:`.preprocess` (with :mod:`.ppexpr` for ``#if`` conditions and :mod:`.lexer`): the source and its
  ``#include`` files (``p4include/`` holds ``core.p4`` and ``v1model.p4``) -> one token stream with positions.
* :mod:`.parser`: tokens -> the syntax tree (:mod:`.p4ast`).
* :mod:`.inline`: functions, sub-controls and sub-parsers replaced by their bodies, still on the syntax tree.
* :mod:`.check`: names and types (and :mod:`.bmv2_rules`, what p4c's BMv2 back end refuses); its last step,
  :mod:`.lower`, turns each checked body into the typed IR.

Nothing after the front end reads the syntax tree (tests/test_import_cycles.py holds the back end to that).
"""
