"""Only the C extensions live here; everything else about the package is in pyproject.toml.

The transport's two fast lanes: receive records (_rxlane) and send runs (_txlane); see docs/transport.md.
The collectives' bf16 reductions (host/_elementwise; see host/elementwise.py).
The switch daemon's batched port I/O (_portio: recvmmsg/sendmmsg on AF_PACKET sockets); see docs/switch-daemon.md."""
from setuptools import Extension, setup

# (-ffp-contract=off: no fused multiply-adds, so the C window (_txstep.h) rounds exactly as cc.py does)
_FLAGS = ["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration", "-ffp-contract=off"]
setup(ext_modules=[Extension(f"host.transport.{name}", [f"host/transport/{name}.c"], extra_compile_args=_FLAGS,
                             depends=["host/transport/_siphash.h", "host/transport/_tag.h",
                                      "host/transport/_tagkey.h",  # the keyed tag, in both lanes
                                      "host/transport/_txstep.h",  # the sender's steady state (in _rxlane)
                                      "host/transport/_sendrun.h"])  # one GSO run onto the socket (both)
                   for name in ("_rxlane", "_txlane")]
      + [Extension("host._elementwise", ["host/_elementwise.c"], extra_compile_args=_FLAGS)]
      + [Extension("switch.daemon._portio", ["switch/daemon/_portio.c"], extra_compile_args=_FLAGS)])
