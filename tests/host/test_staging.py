"""The device-tensor staging of the dlcp backend (host.staging) where it runs without a GPU: which tensors are
copied in and out and when, argument mapping, device routing. The whole backend over staged CPU tensors is in
test_backend.py (``test_staged_tensors_match_gloo``); the CUDA streams and events in ``make test-cuda``."""

from __future__ import annotations

import pytest
import torch

from host.staging import DeviceStreams, Staged, map_tensors, operation_device, tensors_in


def test_tensors_in_and_map_tensors_keep_the_nesting() -> None:
    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(3)
    arg = [[a, b], [c], (a,), 7, None]
    assert [t.numel() for t in tensors_in(arg)] == [1, 2, 3, 1]
    out = map_tensors(arg, lambda t: t.numel())
    assert out == [[1, 2], [3], (1,), 7, None]
    assert tensors_in(5) == [] and tensors_in("x") == []


def test_operation_device_is_the_one_device_or_refused_naming_them() -> None:
    assert operation_device([], "barrier") is None
    assert operation_device([torch.zeros(1), torch.zeros(2)], "allreduce") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"dlcp allgather: the tensors of one operation must be on one device, "
                                         r"got cpu, meta"):
        operation_device([torch.zeros(1), torch.empty(1, device="meta")], "allgather")
    with pytest.raises(ValueError, match=r"dlcp send: tensors on meta are not supported"):
        operation_device([torch.empty(1, device="meta")], "send")


def test_staged_copies_reads_in_and_writes_out_only_when_told() -> None:
    """An in-place tensor (read and written) has one stand-in; a read-only one is never written back; a write-only
    one is not read; copies happen at copy_in / copy_out, not when issued."""
    inout, src, dst = torch.arange(4.0), torch.full((2, 3), 5.0), torch.zeros(3)
    st = Staged(DeviceStreams(torch.device("cpu")), [inout, src], [inout, dst])
    h_inout, h_src, h_dst = st.host(inout), st.host(src), st.host(dst)
    assert h_inout.data_ptr() != inout.data_ptr() and h_src.shape == (2, 3) and h_dst.dtype == dst.dtype
    assert st.to_host([[inout, src], dst]) == [[h_inout, h_src], h_dst]
    assert st.to_device([[h_inout, h_src], h_dst, 3]) == [[inout, src], dst, 3]
    inout.add_(10)  # changed after issue, before its turn: copy_in reads it when the operation runs
    st.copy_in()
    assert torch.equal(h_inout, torch.arange(4.0) + 10) and torch.equal(h_src, src)
    h_inout.mul_(2)
    h_src.zero_()
    h_dst.fill_(7)
    assert torch.equal(inout, torch.arange(4.0) + 10)  # nothing back before copy_out
    st.copy_out()
    assert torch.equal(inout, (torch.arange(4.0) + 10) * 2)
    assert torch.equal(dst, torch.full((3,), 7.0))
    assert torch.equal(src, torch.full((2, 3), 5.0))  # read only: not written back
    st.wait_on_current()  # host memory: nothing to order
    fut = st.future()
    with st.completing():
        fut.set_result([dst])
    assert fut.wait()[0] is dst


def test_staged_noncontiguous_tensor_round_trips() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    view = base.t()  # not contiguous
    st = Staged(DeviceStreams(torch.device("cpu")), [view], [view])
    st.copy_in()
    h = st.host(view)
    assert h.is_contiguous() and torch.equal(h, view)
    h.neg_()
    st.copy_out()
    assert torch.equal(base, -torch.arange(12.0).reshape(3, 4))


def test_host_streams_have_no_stream() -> None:
    assert DeviceStreams(torch.device("cpu")).stream("collectives") is None
