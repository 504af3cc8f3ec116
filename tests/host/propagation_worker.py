"""One rank of the failure-propagation scenarios of ``test_failure_propagation.py``, run as its own process:
``python -m tests.host.propagation_worker SCENARIO RANK ADDR_MAP_JSON PEER_TIMEOUT``. Prints "ready" once its endpoint is
bound and its receive posted, then one JSON line with what its pending receive ended with.

* ``killed``: rank 2 sends rank 1 a first message; then rank 1 waits to receive from rank 2, rank 0 from rank 1, rank 2 idles until the test kills (or
  stops) it. Only rank 1 waits on the dead rank; rank 0 must learn of it from rank 1's notice (its transfer shares
  the group's fate).
* ``abort``: rank 0 waits on rank 2, rank 2 on rank 0 (both alive and silent); rank 1 aborts when told ("go" on
  stdin): both receives must fail naming rank 1.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from host.transport import Endpoint, Options, TransportError

GROUP = (0xFE000000, 0)  # a fate group (mask, value) as share_fate takes it: here every transfer id below 2^25
WAITS = {"killed": {1: (2, 5), 0: (1, 6)}, "abort": {0: (2, 7), 2: (0, 8)}}


def main() -> None:
    scenario, rank, amap = sys.argv[1], int(sys.argv[2]), {int(k): v for k, v in json.loads(sys.argv[3]).items()}
    ep = Endpoint(rank, amap, 41, 0x4242, Options(peer_timeout=float(sys.argv[4]), recv_timeout=60.0))
    ep.share_fate(amap, *GROUP)
    # every rank's endpoint is bound (and answers probes) before any rank waits on another: a rank still starting
    # its interpreter when a peer posts a receive from it would otherwise be silent past a short peer_timeout
    print("bound", flush=True)
    sys.stdin.readline()
    if scenario == "killed" and rank == 2:  # rank 2 and rank 1 have talked before (as ranks of a job have)
        ep.send(1, np.ones(10, np.float32), transfer_id=1).wait(30)
    elif scenario == "killed" and rank == 1:
        ep.recv(2, 1, np.zeros(10, np.float32), timeout=30)
    wait = WAITS[scenario].get(rank)
    h = ep.post_recv(wait[0], wait[1], np.zeros(1000, np.float32)) if wait else None
    print("ready", flush=True)
    if h is None:
        if scenario == "abort":
            sys.stdin.readline()
            ep.abort("simulated failure")
            print(json.dumps({"rank": rank, "aborted": True}), flush=True)
            return
        time.sleep(120)  # (killed)
        return
    t0 = time.monotonic()
    try:
        h.wait()
        out = {"rank": rank, "error": None}
    except TransportError as e:
        out = {"rank": rank, "error": str(e), "peer": e.peer, "after": time.monotonic() - t0,
               "dead_peers": {str(k): v for k, v in ep.dead_peers().items()}, "stats": {
                   k: ep.stats()[k] for k in ("peers_dead", "dead_notices_sent", "dead_notices_rx", "probes_sent",
                                              "refused")}}
    print(json.dumps(out), flush=True)
    ep.close()


if __name__ == "__main__":
    main()
