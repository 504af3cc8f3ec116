"""dlcp controller: declarative P4Runtime configuration of the DLCP switches (``dlcpctl``).

Library use (the testbed does this instead of shelling out)::

    from controller import Network
    net = Network.from_file("examples/star2.yaml")
    result = net.apply()          # ApplyResult: per switch pipeline_pushed, inserts/modifies/deletes, tm_changes
    stats = net.stats()           # {switch: SwitchStats}: per port/priority forwarded, eligible drops, ECN marks

Modules: ``netfile`` (schema and validation), ``topology`` (routes, ECMP), ``state`` (desired entities, diff),
``client`` (finsy sessions), ``tm`` (traffic manager), ``api`` (this class), ``render`` and ``cli`` (``dlcpctl``).
"""

from .api import ApplyResult, Network, PrioCounters, SwitchApplyResult, SwitchStats
from .errors import (ControllerError, EXIT_CODES, PacketTimeout, ProgramError, RejectedUpdate, SwitchRequestFailed,
                     SwitchUnreachable, TrafficManagerError, UsageError, WriteRejected)
from .netfile import NetFileError

__all__ = ["Network", "ApplyResult", "SwitchApplyResult", "SwitchStats", "PrioCounters", "ControllerError",
           "NetFileError", "SwitchUnreachable", "SwitchRequestFailed", "WriteRejected", "RejectedUpdate",
           "ProgramError", "TrafficManagerError", "PacketTimeout", "UsageError", "EXIT_CODES"]
