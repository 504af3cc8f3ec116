"""A thread's kept scratch buffers (``Collectives._scratch``) stay within ``SCRATCH_MAX_BYTES`` in all (issue 35)."""

from __future__ import annotations

import torch

from host.collectives import Collectives


def test_scratch_kept_per_thread_is_bounded_in_all() -> None:
    c = Collectives(None, [0], 0)
    c.SCRATCH_MAX_BYTES = 1 << 20

    def kept() -> int:
        return sum(b.numel() for b in c._tls.bufs.values())

    a = c._scratch("work", 100_000, torch.float32)  # 400 kB: kept
    a.fill_(1.0)
    b = c._scratch("slot0", 100_000, torch.float32)  # 800 kB in all: kept
    assert kept() == 800_000 and set(c._tls.bufs) == {"work", "slot0"}
    s = c._scratch("slot1", 100_000, torch.float32)  # would make 1.2 MB: the others are let go
    assert kept() <= 1 << 20 and set(c._tls.bufs) == {"slot1"}
    assert torch.equal(a, torch.ones(100_000))  # a buffer still held by its caller stays valid
    assert a.data_ptr() != s.data_ptr() != b.data_ptr()
    big = c._scratch("work", 300_000, torch.float32)  # over the bound by itself: fresh, not kept
    assert big.numel() == 300_000 and "work" not in c._tls.bufs
    again = c._scratch("slot1", 50_000, torch.float64)  # same bytes: the kept buffer is reused
    assert again.data_ptr() == s.data_ptr()
