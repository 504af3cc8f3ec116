"""Wire format: vectorised header batches (what the transport sends a tensor with) vs one Header.pack per packet.

The transport generates the headers of every packet of a tensor at once with ``pack_batch``; the baseline is the
obvious per-packet loop over ``Header(...).pack()``. Receive side: ``unpack_batch`` vs ``Header.unpack`` per header.
"""

from __future__ import annotations

import numpy as np

from harness import Report, timed

from host import wire

N = 20_000  # packets: a 29 MB fp32 tensor at MTU 1500


def batch_fields() -> np.ndarray:
    h = np.zeros(N, dtype=wire.FIELDS_DTYPE)
    h["version"] = wire.VERSION
    h["dtype"] = int(wire.DType.FLOAT32)
    h["seq"] = np.arange(N)
    h["total"] = N
    h["count"] = 366
    h["offset"] = np.arange(N) * 366 * 4
    h["priority"] = 5
    return h


def main() -> None:
    rep = Report("wire", params={"packets": N})
    fields = batch_fields()

    def pack_vectorised():
        return timed(lambda: wire.pack_batch(fields).tobytes(), N, "headers_per_s")

    def pack_loop():
        def run():
            out = bytearray(N * wire.HEADER_LEN)
            for i in range(N):
                header = wire.Header(seq=i, total=N, count=366, offset=i * 366 * 4, priority=5)
                header.pack_into(out, i * wire.HEADER_LEN)
        return timed(run, N, "headers_per_s")

    rep.compare("pack headers of one tensor", candidate=pack_vectorised, baseline=pack_loop,
                metric="headers_per_s", higher_is_better=True, candidate_name="pack_batch",
                baseline_name="Header.pack loop")
    blob = wire.pack_batch(fields).tobytes()

    def unpack_vectorised():
        return timed(lambda: wire.unpack_batch(blob), N, "headers_per_s")

    def unpack_loop():
        return timed(lambda: [wire.Header.unpack(blob, i * wire.HEADER_LEN) for i in range(N)], N, "headers_per_s")

    rep.compare("unpack headers", candidate=unpack_vectorised, baseline=unpack_loop, metric="headers_per_s",
                higher_is_better=True, candidate_name="unpack_batch", baseline_name="Header.unpack loop")
    rep.write()


if __name__ == "__main__":
    main()
