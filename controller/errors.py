"""Controller errors, each with the exit code ``dlcpctl`` returns for it (documented in docs/controller.md).

Every error says *what* failed and *where*: the switch and its address, the entry the switch rejected with the
P4Runtime status, the file key and line. The library raises them; the CLI prints ``str(error)`` and exits with
``error.exit_code``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ControllerError", "SwitchUnreachable", "SwitchRequestFailed", "WriteRejected", "RejectedUpdate",
           "ProgramError", "TrafficManagerError", "PacketTimeout", "UsageError", "EXIT_CODES"]

#: Exit codes of ``dlcpctl`` (0 = success). Keep docs/controller.md in step.
EXIT_CODES = {
    "ok": 0,
    "internal": 1,         # a bug: unexpected exception (with traceback under -v)
    "usage": 2,            # bad command line or argument value (argparse, UsageError)
    "netfile": 3,          # invalid network file (key and line in the message)
    "unreachable": 4,      # a switch did not answer (address and how long we waited)
    "rejected": 5,         # a switch answered with an error (rejected entries, pipeline, not primary, read error)
    "program": 6,          # the P4 program does not compile or lacks what the controller programs
    "tm": 7,               # traffic-manager settings failed (management service, simple_switch_CLI missing, ...)
    "timeout": 8,          # packet-in: fewer packets than asked for arrived in time
    "drift": 9,            # diff: a switch differs from the network file (the differences are printed)
}


class ControllerError(Exception):
    """Base class; ``exit_code`` is what ``dlcpctl`` exits with."""

    exit_code = EXIT_CODES["internal"]


class UsageError(ControllerError):
    """A bad request from the caller: missing network file, unknown switch, missing or invalid option value."""

    exit_code = EXIT_CODES["usage"]


class SwitchUnreachable(ControllerError):
    """No answer from a switch: ``waited_s`` is how long the connect waited (its retries included), None when
    an open session lost its connection during a request (nothing was waited for)."""

    exit_code = EXIT_CODES["unreachable"]

    def __init__(self, switch: str, address: str, waited_s: float | None, detail: str):
        self.switch, self.address, self.waited_s, self.detail = switch, address, waited_s, detail
        after = f" after {waited_s:.1f} s" if waited_s is not None else ""
        super().__init__(f"switch {switch} at {address} unreachable{after}: {detail}")


class SwitchRequestFailed(ControllerError):
    """The switch answered a request (pipeline, read, arbitration) with an error."""

    exit_code = EXIT_CODES["rejected"]

    def __init__(self, switch: str, address: str, operation: str, code: str, message: str):
        self.switch, self.address, self.operation, self.code, self.message = switch, address, operation, code, message
        super().__init__(f"switch {switch} at {address}: {operation} failed: {code}: {message}")


@dataclass(frozen=True)
class RejectedUpdate:
    update_type: str  # INSERT | MODIFY | DELETE
    entity: str       # the entry, described for people
    code: str         # P4Runtime canonical code, e.g. ALREADY_EXISTS
    message: str


class WriteRejected(ControllerError):
    """The switch rejected one or more updates of a Write; ``rejected`` says which and why."""

    exit_code = EXIT_CODES["rejected"]

    def __init__(self, switch: str, address: str, rejected: list[RejectedUpdate], total: int, applied: int):
        self.switch, self.address, self.rejected, self.total, self.applied = switch, address, rejected, total, applied
        lines = [f"switch {switch} at {address} rejected {len(rejected)} of {total} updates "
                 f"({applied} applied):"]
        for r in rejected[:20]:
            lines.append(f"  {r.update_type} {r.entity}: {r.code}: {r.message}")
        if len(rejected) > 20:
            lines.append(f"  ... and {len(rejected) - 20} more")
        super().__init__("\n".join(lines))


class ProgramError(ControllerError):
    exit_code = EXIT_CODES["program"]


class TrafficManagerError(ControllerError):
    exit_code = EXIT_CODES["tm"]


class PacketTimeout(ControllerError):
    exit_code = EXIT_CODES["timeout"]
