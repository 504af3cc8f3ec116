"""``python -m switch.daemon``: the same as the ``dlcp-switch`` command (:func:`switch.daemon.main.main`)."""
import sys

from .main import main

sys.exit(main())
