"""Priority policy: which DLCP priority, magnitude class and drop eligibility each packet of a tensor gets.

This is the "gradient bytes are not all equal" half of DLCP/MLT (``docs/transport.md``):

* **priority** comes from the tensor's layer position. Layers near the input are needed first by the next forward
  pass, so their packets get the higher switch queue.
* **magnitude class** (0 smallest .. 7 largest) of a packet is the octile of its payload's mean ``|x|`` among the
  per-packet means of the tensor it is given: the whole tensor, or one slice of it when the transport classifies a
  large reliable send slice by slice (``Options.classify_slice``). Octiles of the per-packet means (rather than of
  single elements) spread the packets evenly over the 8 classes, so the class is informative for a switch that
  looks at it.
* **drop eligibility** goes to the packets with the smallest mean ``|x|``, smallest first, while their element
  count stays within ``floor(p * n)`` (p = the tensor's loss bound, n = its elements). The eligible elements can
  therefore never exceed the loss bound, whatever the network drops. Since eligible packets are the smallest ones,
  they are exactly the lowest magnitude classes (ties broken by position).

Integer, boolean (control data) tensors are never drop-eligible: their loss bound must be 0.

Everything here is a pure function of arrays, without I/O, so it can be tested alone and swapped: the transport
takes any object with the :class:`Policy` protocol (``Options.policy``).
"""

from __future__ import annotations

import bisect
import math
import os
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

__all__ = ["PacketClasses", "Policy", "LayerMagnitudePolicy", "packet_mean_abs", "mean_abs_and_classes", "as_float_view",
           "DATA_PRIORITY_MAX", "DATA_PRIORITY_MIN", "CONTROL_PRIORITY"]

#: Data packets use priorities 1..6; 7 is kept for the transport's own ACK/NACK/control messages (they steer
#: every sender's retransmissions and rate, so they must not queue behind data) and 0 for background traffic.
DATA_PRIORITY_MAX = 6
DATA_PRIORITY_MIN = 1
CONTROL_PRIORITY = 7


@dataclass(frozen=True)
class PacketClasses:
    """The policy's verdict for every packet of one tensor (arrays of length ``npackets``)."""

    priority: int  # one priority for the whole tensor (a tensor is one layer's bucket)
    mag_class: np.ndarray  # uint8, 0..7
    eligible: np.ndarray  # bool, True = drop-eligible


class Policy(Protocol):
    """What the transport asks of a priority policy."""

    def classify(self, values: np.ndarray | None, counts: np.ndarray, *, layer: int,
                 loss_bound: float) -> PacketClasses:
        """Classify the packets of a tensor.

        ``values`` is the tensor as a flat float array (``None`` for integer/boolean data, which has no magnitude),
        ``counts[i]`` the number of elements of packet i (packets are consecutive slices, in order).
        The eligible packets' elements must sum to at most ``floor(loss_bound * counts.sum())``.
        """
        ...  # pragma: no cover


def as_float_view(arr: np.ndarray, bf16: bool = False) -> np.ndarray | None:
    """The flat tensor as floats for magnitude computations, or ``None`` for integer/boolean data.

    bf16 arrives as its raw uint16 bits: shifting them into the top half of a float32 is exact and vectorised.
    fp16/fp32/fp64 are returned as they are (no copy).
    """
    flat = arr.reshape(-1)
    if bf16:
        return (flat.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if flat.dtype.kind == "f":
        return flat
    return None


def _uniform_chunk(values: np.ndarray, counts: np.ndarray) -> int:
    """The packets' common size when ``counts`` is the transport's layout of ``values`` (more than one packet, all
    of ``c0`` elements but a last one of at most that many), which the C kernels take; else 0."""
    n = len(counts)
    c0 = int(counts[0]) if n > 1 else 0
    if c0 > 0 and np.all(counts[:-1] == c0) and c0 * (n - 1) + int(counts[-1]) == values.size:
        return c0
    return 0


def packet_mean_abs(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Mean ``|x|`` of each packet's slice (vectorised; float64 result). Empty packets get 0; NaN/inf count as +inf
    so a packet carrying them is never classed small (it is protected).

    In the transport's layout (equal packets, a shorter last one) float32 and float64 data go to the C kernel
    ``abs_sums`` (``host/transport/_txlane.c``): one pass at memory speed with the GIL released throughout. The
    numpy path below (other dtypes, or without the build) takes a numpy call per cache-sized block, and each call
    must win the GIL back: while the I/O thread was busy, a 64 MB tensor's classification took 85-90 ms instead
    of 6. Half- and single-precision row sums are float32 values (the kernel sums in double and rounds; numpy's
    ``einsum`` sums in float32; either is within 1e-6 of the exact mean, far below what separates magnitude
    octiles), so a float32 row sum that overflows (values near 1e34 and up) is +inf, which protects the packet as a
    NaN would."""
    n = len(counts)
    out = np.zeros(n, dtype=np.float64)
    if n == 0 or values.size == 0:
        return out
    c0 = _uniform_chunk(values, counts)
    if c0:
        kernel = _abs_sums_kernel()
        if kernel is not None and values.dtype in (np.float32, np.float64) and values.flags.c_contiguous:
            kernel(values, c0, out)
        else:
            # row sums of a 2-D view, in cache-sized blocks so the |x| temporary stays small (about 10x faster
            # than reduceat on large tensors)
            full = values[: c0 * (n - 1)].reshape(n - 1, c0)
            step = max(1, (1 << 18) // c0)
            acc = np.float32 if values.dtype.itemsize <= 4 else np.float64
            buf = np.empty((min(step, n - 1), c0), acc)
            with np.errstate(over="ignore"):  # an overflowing row sum is +inf (see above)
                for i in range(0, n - 1, step):
                    blk = full[i: i + step]
                    out[i: i + len(blk)] = np.einsum("ij->i", np.abs(blk, out=buf[: len(blk)], casting="same_kind"))
            out[n - 1] = np.abs(values[c0 * (n - 1):]).sum(dtype=np.float64)
        nonempty = counts > 0
        out[nonempty] /= counts[nonempty]
    else:
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        nonempty = counts > 0
        # float64 accumulation; a NaN or inf makes the sum non-finite
        sums = np.add.reduceat(np.abs(values), starts[nonempty], dtype=np.float64)
        out[nonempty] = sums / counts[nonempty]
    out[~np.isfinite(out)] = np.inf
    return out


#: The C kernels of :func:`packet_mean_abs` (``abs_sums`` of ``host/transport/_txlane.c``) and of
#: :func:`mean_abs_and_classes` (``mag_classes``), handed over by the transport when it loads its extension
#: (:func:`use_native_kernels`). The policy does not import the transport: the transport depends on the policy, not
#: the other way round.
_ABS_SUMS_KERNEL: Callable[[np.ndarray, int, np.ndarray], int] | None = None
_MAG_CLASSES_KERNEL: Callable[[np.ndarray, int, np.ndarray, np.ndarray], int] | None = None
_CLASSIFY_KERNEL: Callable[[np.ndarray, int, float, np.ndarray, np.ndarray], int] | None = None


def use_native_kernels(abs_sums: Callable[[np.ndarray, int, np.ndarray], int] | None,
                       mag_classes: Callable[[np.ndarray, int, np.ndarray, np.ndarray], int] | None,
                       classify: Callable[[np.ndarray, int, float, np.ndarray, np.ndarray], int] | None = None
                       ) -> None:
    """Make ``abs_sums(values, chunk, out) -> packets`` the per-packet |x| sums of float32/float64 data,
    ``mag_classes(values, chunk, means, classes) -> packets`` their means and magnitude classes in one call, and
    ``classify(values, chunk, loss_bound, classes, eligible) -> eligible packets`` those classes with
    :func:`eligible_smallest`'s verdict (``None``: numpy's paths only)."""
    global _ABS_SUMS_KERNEL, _MAG_CLASSES_KERNEL, _CLASSIFY_KERNEL
    _ABS_SUMS_KERNEL, _MAG_CLASSES_KERNEL, _CLASSIFY_KERNEL = abs_sums, mag_classes, classify


def _abs_sums_kernel() -> Callable[[np.ndarray, int, np.ndarray], int] | None:
    """The registered C kernel, or None without it or with ``DLCP_NATIVE=0`` (the Python paths only, as the
    transport's fast lanes)."""
    if os.environ.get("DLCP_NATIVE", "1") == "0":
        return None
    return _ABS_SUMS_KERNEL


def _mag_classes_kernel() -> Callable[[np.ndarray, int, np.ndarray, np.ndarray], int] | None:
    """As :func:`_abs_sums_kernel`, for ``mag_classes``."""
    if os.environ.get("DLCP_NATIVE", "1") == "0":
        return None
    return _MAG_CLASSES_KERNEL


def _classify_kernel() -> Callable[[np.ndarray, int, float, np.ndarray, np.ndarray], int] | None:
    """As :func:`_abs_sums_kernel`, for ``classify_packets``."""
    if os.environ.get("DLCP_NATIVE", "1") == "0":
        return None
    return _CLASSIFY_KERNEL


def mean_abs_and_classes(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(packet_mean_abs(values, counts), magnitude_classes(of them))``. In the transport's layout (equal packets,
    a shorter last one) float32 and float64 data go to the C kernel ``mag_classes`` (``host/transport/_txlane.c``),
    which gives the same arrays bit for bit with the GIL released throughout: numpy's path is a dozen calls after
    the sums (partition, interpolation, search, masks), each taking the GIL back from the I/O thread."""
    kernel = _mag_classes_kernel()
    if kernel is not None and values.size and values.dtype in (np.float32, np.float64) and values.flags.c_contiguous:
        c0 = _uniform_chunk(values, counts)
        if c0 and 0 < int(counts[-1]) <= c0:
            n = len(counts)
            means, classes = np.empty(n, np.float64), np.empty(n, np.uint8)
            kernel(values, c0, means, classes)
            return means, classes
    means = packet_mean_abs(values, counts)
    return means, magnitude_classes(means)


@dataclass(frozen=True)
class LayerMagnitudePolicy:
    """The default policy: priority from layer position, class from magnitude octile, smallest packets eligible.

    ``num_layers``: layers of the model. When known, layer positions are spread evenly over the data priorities
    (layer 0 gets :data:`DATA_PRIORITY_MAX`, the last layer :data:`DATA_PRIORITY_MIN`); when ``None``, each layer
    is one level below the previous one, saturating at the minimum (layer 0 -> 6, 1 -> 5, ..., >= 5 -> 1).
    ``eligible``: False marks no packet drop-eligible, priorities and classes unchanged (the backend's
    ``no-eligible`` policy): a call that asks for loss then completes only once every packet arrived, but still
    runs its loss-report round, which separates what the host's marking is worth from what the bound costs.
    """

    num_layers: int | None = None
    eligible: bool = True

    def priority(self, layer: int) -> int:
        levels = DATA_PRIORITY_MAX - DATA_PRIORITY_MIN + 1
        if layer < 0:
            raise ValueError(f"layer must be >= 0, got {layer}")
        if self.num_layers is None:
            return max(DATA_PRIORITY_MIN, DATA_PRIORITY_MAX - layer)
        if self.num_layers <= 1:
            return DATA_PRIORITY_MAX
        pos = min(layer, self.num_layers - 1) / (self.num_layers - 1)  # 0 = input .. 1 = output
        return DATA_PRIORITY_MAX - min(levels - 1, int(pos * levels))

    def classify(self, values: np.ndarray | None, counts: np.ndarray, *, layer: int,
                 loss_bound: float) -> PacketClasses:
        counts = np.asarray(counts, dtype=np.int64)
        n = len(counts)
        prio = self.priority(layer)
        if not 0.0 <= loss_bound < 1.0:
            raise ValueError(f"loss_bound must be in [0, 1), got {loss_bound}")
        if values is None:
            if loss_bound > 0:
                raise ValueError("integer/boolean tensors carry control data and must be sent with loss_bound=0")
            return PacketClasses(prio, np.zeros(n, np.uint8), np.zeros(n, bool))
        if not self.eligible:
            loss_bound = 0.0  # classes as usual; a zero budget makes nothing eligible on every path below
        if n == 1 and counts[0] > 0:
            # One packet (every tensor up to ~2,200 fp32 elements at MTU 9000): it is its own octile, so class 0,
            # or 7 when its mean is not finite; eligible only if the whole packet fits the budget. What the general
            # path computes, without its two dozen numpy calls (about 55 us of a small send()'s 160).
            finite = math.isfinite(float(np.abs(values).sum(dtype=np.float64)))
            fits = math.floor(loss_bound * int(counts[0]) + 1e-9) >= counts[0]
            return PacketClasses(prio, np.array([0 if finite else 7], np.uint8), np.array([finite and fits]))
        kernel = _classify_kernel()
        if (kernel is not None and values.dtype in (np.float32, np.float64) and values.flags.c_contiguous
                and 0 < int(counts[-1]) <= int(counts[0]) and _uniform_chunk(values, counts)):
            # the whole verdict in one C call with the GIL released: what the two paths below give, bit for bit
            classes, eligible = np.empty(n, np.uint8), np.empty(n, bool)
            kernel(values, int(counts[0]), loss_bound, classes, eligible)
            return PacketClasses(prio, classes, eligible)
        if n <= SMALL_CLASSIFY:
            cl = counts.tolist()
            means = _small_means(values, counts, cl)
            return PacketClasses(prio, np.array(_small_classes(means), np.uint8),
                                 np.array(_small_eligible(means, cl, loss_bound), bool))
        means, classes = mean_abs_and_classes(values, counts)
        return PacketClasses(prio, classes, eligible_smallest(means, counts, loss_bound))


#: Packets up to which :meth:`LayerMagnitudePolicy.classify` works on Python lists: below it the two dozen numpy
#: calls of the array path (1-7 us each hot, several times that on a cold cache) cost more than the work. A
#: 512 KiB send at loopback's MTU is 9 packets: classify took 104 us hot and 220 us in a benchmark call. The two
#: paths give identical classes (tests/host/test_policy.py compares them).
SMALL_CLASSIFY = 64


def _small_means(values: np.ndarray, counts: np.ndarray, cl: list[int]) -> list[float]:
    """:func:`packet_mean_abs` as a list, for a few packets (``cl``: ``counts`` as a list): the C kernel's sums
    divided in Python (the same float64 division numpy does), the array function for what the kernel does not
    take."""
    n = len(cl)
    c0 = cl[0]
    kernel = _abs_sums_kernel()
    if (kernel is None or values.dtype not in (np.float32, np.float64) or not values.flags.c_contiguous or c0 <= 0
            or c0 * (n - 1) + cl[-1] != values.size or any(c != c0 for c in cl[:-1])):
        return packet_mean_abs(values, counts).tolist()
    sums = np.zeros(n, np.float64)
    kernel(values, c0, sums)
    out = []
    for s, c in zip(sums.tolist(), cl):
        m = s / c if c > 0 else 0.0
        out.append(m if math.isfinite(m) else math.inf)
    return out


def _small_classes(means: list[float]) -> list[int]:
    """:func:`magnitude_classes` on a list (the same octile edges, bit for bit: numpy's linear interpolation
    between the same order statistics, in the same float64 operations)."""
    finite = sorted(m for m in means if math.isfinite(m))
    if not finite:
        return [7] * len(means)
    last = len(finite) - 1
    edges = []
    for k in range(1, 8):
        pos = (k / 8.0) * last
        lo = math.floor(pos)
        hi = min(lo + 1, last)
        t = pos - lo
        a, b = finite[lo], finite[hi]
        diff = b - a
        edges.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
    return [min(7, bisect.bisect_left(edges, m)) for m in means]


def _small_eligible(means: list[float], counts: list[int], loss_bound: float) -> list[bool]:
    """:func:`eligible_smallest` on lists."""
    n = len(means)
    eligible = [False] * n
    budget = int(math.floor(loss_bound * sum(counts) + 1e-9))
    if n == 0 or budget <= 0:
        return eligible
    used = 0
    for i in sorted((i for i in range(n) if math.isfinite(means[i])), key=means.__getitem__):  # (stable)
        used += counts[i]
        if used > budget:
            break
        eligible[i] = counts[i] > 0  # an empty packet saves nothing; keep it protected
    return eligible


def magnitude_classes(means: np.ndarray) -> np.ndarray:
    """Octile (0..7) of each packet mean among all packet means (ties share the lower class)."""
    n = len(means)
    if n == 0:
        return np.zeros(0, np.uint8)
    finite = means[np.isfinite(means)]
    if finite.size == 0:
        return np.full(n, 7, np.uint8)
    edges = octile_edges(finite)
    return np.searchsorted(edges, means, side="left").astype(np.uint8).clip(0, 7)


_OCTILES = np.arange(1, 8) / 8.0


def octile_edges(values: np.ndarray) -> np.ndarray:
    """``np.quantile(values, [1/8 .. 7/8])`` (its default linear method, bit for bit) from one partition at the 14
    order statistics it interpolates between: np.quantile's generality costs ~50 us per call, which every small
    transfer paid, and a full sort ~4 ms for the 46,000 packets of 64 MB at MTU 1500."""
    pos = _OCTILES * (len(values) - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, len(values) - 1)
    t = pos - lo
    s = np.partition(values, np.concatenate((lo, hi)))  # repeated kth are fine (np.unique would import numpy.ma)
    a, b = s[lo], s[hi]
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)  # numpy's _lerp


def eligible_smallest(means: np.ndarray, counts: np.ndarray, loss_bound: float) -> np.ndarray:
    """Mark the smallest-mean packets drop-eligible while their elements sum to <= floor(loss_bound * total).

    A stable sort breaks ties by position; a packet that does not fit ends the prefix (so eligibility is exactly
    a prefix of the magnitude order: every eligible packet is no larger than every protected one).
    """
    n = len(means)
    eligible = np.zeros(n, dtype=bool)
    budget = int(np.floor(loss_bound * int(counts.sum()) + 1e-9))
    if n == 0 or budget <= 0:
        return eligible
    order = np.argsort(means, kind="stable")
    order = order[np.isfinite(means[order])]
    cum = np.cumsum(counts[order])
    k = int(np.searchsorted(cum, budget, side="right"))
    eligible[order[:k]] = True
    eligible[counts == 0] = False  # an empty packet saves nothing; keep it protected
    return eligible
