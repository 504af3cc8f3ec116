"""Runtime objects the generated code calls: tables, action profiles/selectors, counters, meters,
registers, hash and checksum algorithms with BMv2's values.

Table entries are stored the way P4Runtime sees them: a match per key (by position, integers;
the API layer converts to and from P4Runtime byte strings), an entry priority, and either an
action with arguments or an action-profile member/group.  Each table keeps an index whose inserts
are O(1) or O(log n) and whose lookups do not scan the entries: a dict for exact tables, a dict per
prefix length for LPM tables, a dict per mask tuple for ternary/range tables (see
``Table._index_add``).  Results are also memoised per key (cleared on every change), so a steady
flow pays one dict lookup per table.
"""
from __future__ import annotations

import bisect as _bisect
import random as _random
import struct
import zlib

_unpack = struct.unpack
from dataclasses import dataclass, field

from ..errors import SwitchError

# ---- hashes (BMv2 calculations) -----------------------------------------------------------------


def _crc16_table() -> list[int]:
    # CRC-16/ARC (BMv2 "crc16"): poly 0x8005 reflected (0xA001), init 0, no final xor
    tab = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xA001 if c & 1 else c >> 1
        tab.append(c)
    return tab


_CRC16 = _crc16_table()


def crc16(data: bytes) -> int:
    c = 0
    for b in data:
        c = (c >> 8) ^ _CRC16[(c ^ b) & 0xFF]
    return c


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def csum16(data: bytes) -> int:
    """Internet checksum (RFC 1071) as BMv2's csum16: ones' complement of the ones' complement sum."""
    if len(data) & 1:
        return csum16_int(int.from_bytes(data, "big") << 8)
    return csum16_int(int.from_bytes(data, "big"))


def csum16_int(v: int) -> int:
    """csum16 of the 16-bit words of ``v`` (an even number of bytes, as an integer).  Since
    2**16 == 1 (mod 0xFFFF), the end-around-carry sum of the words is ``v % 0xFFFF``, except that
    a non-zero multiple of 0xFFFF folds to 0xFFFF (ones' complement -0), not 0."""
    r = v % 0xFFFF
    if r == 0 and v:
        return 0
    return r ^ 0xFFFF


def csum16_bits(v: int, width: int) -> int:
    """csum16 of a field list given as its concatenated value and width in bits (zero-padded at
    the end to a whole number of 16-bit words, like serialise() followed by csum16())."""
    return csum16_int(v << ((-width) & 15))


def xor16(data: bytes) -> int:
    if len(data) & 1:
        data = data + b"\0"
    r = 0
    for i in range(0, len(data), 2):
        r ^= (data[i] << 8) | data[i + 1]
    return r


def identity(data: bytes) -> int:
    return int.from_bytes(data[:8], "big")


HASHES = {"crc16": crc16, "crc32": crc32, "csum16": csum16, "xor16": xor16, "identity": identity}


def _reflect(v: int, bits: int) -> int:
    return int(format(v, f"0{bits}b")[::-1], 2)


class CustomCrc:
    """One ``crc16_custom`` / ``crc32_custom`` calculation (BMv2's ``crc_custom``): a CRC of ``width`` bits whose
    polynomial, initial remainder, final xor value and reflections the operator sets at run time (BMv2's
    ``set_crc16_parameters`` / ``set_crc32_parameters``).  Until then it is BMv2's default for the width, the same
    CRC as ``crc16`` (0x8005, 0, 0, reflected in and out) or ``crc32`` (0x04C11DB7, all ones, all ones,
    reflected).  The model is the usual one (the "Rocksoft" parameters of CRC catalogues): the register starts at
    the initial remainder, takes each byte most significant bit first (least significant first when the data is
    reflected), and the remainder is reflected (if asked) and then xored.

    :meth:`compute` is what the generated code calls; :meth:`configure` changes the table it uses in place."""

    DEFAULTS = {16: (0x8005, 0x0000, 0x0000, True, True), 32: (0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True, True)}

    def __init__(self, name: str, width: int, where: str = ""):
        if width not in self.DEFAULTS:
            raise ValueError(f"custom CRC width must be 16 or 32, not {width}")
        self.name, self.width, self.where = name, width, where
        self._table: list[int] = []
        self.configure(*self.DEFAULTS[width])

    def configure(self, polynomial: int, initial_remainder: int, final_xor_value: int, reflect_data: bool,
                  reflect_remainder: bool) -> None:
        w = self.width
        top = 1 << (w - 1)
        full = (1 << w) - 1
        for what, v in (("polynomial", polynomial), ("initial remainder", initial_remainder),
                        ("final xor value", final_xor_value)):
            if not 0 <= v <= full:
                raise SwitchError("INVALID_ARGUMENT", f"custom CRC {self.name}: {what} {v:#x} does not fit {w} bits")
        table = []
        for byte in range(256):
            r = byte << (w - 8)
            for _ in range(8):
                r = ((r << 1) ^ polynomial) & full if r & top else (r << 1) & full
            table.append(r)
        self._table[:] = table
        self.params = (polynomial, initial_remainder, final_xor_value, bool(reflect_data), bool(reflect_remainder))
        self._rev8 = [_reflect(b, 8) for b in range(256)] if reflect_data else None

    def compute(self, data: bytes) -> int:
        _, r, xor, _, refout = self.params
        table, shift, full, rev = self._table, self.width - 8, (1 << self.width) - 1, self._rev8
        if rev is not None:
            for b in data:
                r = table[rev[b] ^ (r >> shift)] ^ ((r << 8) & full)
        else:
            for b in data:
                r = table[b ^ (r >> shift)] ^ ((r << 8) & full)
        if refout:
            r = _reflect(r, self.width)
        return r ^ xor


def serialise(value: int, width: int) -> bytes:
    """Bits of a field list, most significant first, zero-padded at the end to whole bytes."""
    pad = (-width) % 8
    return (value << pad).to_bytes((width + pad) // 8, "big")


# ---- stateful externs ---------------------------------------------------------------------------
class Counter:
    """Indexed counter (packets, bytes or both); indexes out of range are ignored like BMv2.

    The generated code updates ``packets`` and ``bytes`` in place (it holds the lists themselves):
    change their items, never rebind them."""

    def __init__(self, name: str, size: int, kind: str):
        self.name, self.size, self.kind = name, size, kind
        self.packets = [0] * size
        self.bytes = [0] * size

    def count(self, i: int, plen: int) -> None:
        if 0 <= i < self.size:
            self.packets[i] += 1
            self.bytes[i] += plen


@dataclass
class MeterConfig:
    cir: int      # units (packets or bytes) per second
    cburst: int
    pir: int
    pburst: int


class MeterCell:
    """One two-rate three-colour marker (RFC 2698), BMv2 colours GREEN=0, YELLOW=1, RED=2."""
    __slots__ = ("config", "tc", "tp", "last_ns")

    def __init__(self):
        self.config: MeterConfig | None = None
        self.tc = self.tp = 0.0
        self.last_ns = 0

    def set(self, cfg: MeterConfig | None, now_ns: int = 0) -> None:
        self.config = cfg
        if cfg is not None:
            self.tc, self.tp, self.last_ns = float(cfg.cburst), float(cfg.pburst), now_ns

    def execute(self, units: int, now_ns: int) -> int:
        cfg = self.config
        if cfg is None:
            return 0
        dt = max(0, now_ns - self.last_ns) / 1e9
        self.last_ns = max(self.last_ns, now_ns)
        self.tp = min(cfg.pburst, self.tp + dt * cfg.pir)
        self.tc = min(cfg.cburst, self.tc + dt * cfg.cir)
        if self.tp < units:
            return 2
        if self.tc < units:
            self.tp -= units
            return 1
        self.tp -= units
        self.tc -= units
        return 0


class Meter:
    def __init__(self, name: str, size: int, kind: str):
        self.name, self.size, self.kind = name, size, kind
        self.cells = [MeterCell() for _ in range(size)]

    def execute(self, i: int, plen: int, now_ns: int) -> int:
        if 0 <= i < self.size:
            return self.cells[i].execute(1 if self.kind == "packets" else plen, now_ns)
        return 0


class DirectMeter:
    """Meter attached to a table; ``current`` is the entry hit by the table being applied."""

    def __init__(self, name: str, kind: str):
        self.name, self.kind = name, kind
        self.current: "Entry | None" = None

    def read(self, plen: int, now_ns: int) -> int:
        e = self.current
        if e is None:
            return 0
        return e.meter.execute(1 if self.kind == "packets" else plen, now_ns)


class Register:
    """Indexed register; reads out of range give 0 and writes out of range are ignored, like BMv2.
    The generated code holds ``values`` itself: change its items, never rebind it."""

    def __init__(self, name: str, size: int, width: int, signed: bool = False):
        self.name, self.size, self.width = name, size, width
        self.mask = (1 << width) - 1
        self.signed = signed
        self.values = [0] * size

    def read(self, i: int) -> int:
        return self.values[i] if 0 <= i < self.size else 0

    def write(self, i: int, v: int) -> None:
        if 0 <= i < self.size:
            self.values[i] = v


# ---- tables ---------------------------------------------------------------------------------------
@dataclass(eq=False)
class Entry:
    """A table entry. ``match`` has one item per key (None = don't care):
    ('exact', v) ('lpm', v, plen) ('ternary', v, mask) ('range', lo, hi) ('optional', v)."""

    match: tuple
    priority: int
    action: int = -1                 # ActionIR index, or -1 with member/group
    args: tuple = ()
    member: int | None = None
    group: int | None = None
    packets: int = 0
    bytes: int = 0
    meter: MeterCell = field(default_factory=MeterCell)
    is_const: bool = False
    masks: tuple = ()
    values: tuple = ()
    ranges: tuple = ()
    rank: int = 0                    # priority, or total prefix length for LPM tables (higher wins)
    seq: int = 0                     # insertion order: among equal ranks the older entry wins


def _masker(masks: tuple):
    """A function from a key tuple to the tuple of its fields under ``masks``, unrolled for the common one- and
    two-field keys (a lookup applies one per mask group it probes)."""
    if len(masks) == 1:
        (m0,) = masks
        return lambda k: (k[0] & m0,)
    if len(masks) == 2:
        m0, m1 = masks
        return lambda k: (k[0] & m0, k[1] & m1)
    if len(masks) == 3:
        m0, m1, m2 = masks
        return lambda k: (k[0] & m0, k[1] & m1, k[2] & m2)
    return lambda k: tuple([x & m for x, m in zip(k, masks)])


class _Group:
    """Entries of a non-exact, non-LPM table that share one tuple of masks (see :meth:`Table._find`)."""

    __slots__ = ("masks", "values", "size", "ranks", "best", "masked")

    def __init__(self, masks: tuple):
        self.masks = masks
        self.masked = _masker(masks)                   # key -> the key under these masks (what values holds)
        self.values: dict[tuple, list[Entry]] = {}     # masked values -> entries, best (rank, then oldest) first
        self.size = 0
        self.ranks: list[int] = []                     # every entry's rank, sorted (for ``best``)
        self.best = 0

    def add(self, e: Entry) -> None:
        lst = self.values.setdefault(e.values, [])
        keys = [(-x.rank, x.seq) for x in lst]
        lst.insert(_bisect.bisect(keys, (-e.rank, e.seq)), e)
        _bisect.insort(self.ranks, e.rank)
        self.size += 1
        self.best = self.ranks[-1]

    def remove(self, e: Entry) -> None:
        lst = self.values[e.values]
        lst.remove(e)
        if not lst:
            del self.values[e.values]
        del self.ranks[_bisect.bisect_left(self.ranks, e.rank)]
        self.size -= 1
        self.best = self.ranks[-1] if self.ranks else 0


class ActionProfile:
    """Members (action + args) and, for selectors, groups of members."""

    def __init__(self, name: str, size: int, selector: bool, algo: str | None, rng: _random.Random,
                 custom: CustomCrc | None = None):
        self.name, self.size, self.selector, self.algo = name, size, selector, algo
        # the selector's hash: a named algorithm, or its own custom CRC calculation (crc16/32_custom)
        self.hash = custom.compute if custom is not None else HASHES.get(algo or "crc16", crc16)
        self.members: dict[int, tuple[int, tuple]] = {}
        self.groups: dict[int, list[int]] = {}
        self.random_groups: set[int] = set()
        self.max_group_size: dict[int, int] = {}
        self.rng = rng
        self.tables: list[Table] = []

    def changed(self) -> None:
        for t in self.tables:
            t.cache.clear()

    def resolve(self, e: Entry, sel_bytes: bytes | None) -> tuple[int, tuple]:
        if e.member is not None:
            return self.members.get(e.member, (-1, ()))
        mems = self.groups.get(e.group, [])
        if not mems:
            return (-1, ())
        if e.group in self.random_groups:
            m = mems[self.rng.randrange(len(mems))]
        else:
            h = self.hash(sel_bytes or b"")
            m = mems[h % len(mems)]
        return self.members.get(m, (-1, ()))


_NOENT = object()


class Table:
    """Runtime state and lookup of one P4 table.

    ``cache`` memoises lookups per key and is cleared on every change (entries, default action,
    action-profile members and groups).  What it holds depends on the code the switch generated:
    with fast paths, for a :attr:`simple` table the result tuple (:meth:`fill`) and for a table
    with only a direct counter (entry, result) (:meth:`fill_counted`), keyed by the bare value
    when there is one key field; otherwise (reference code, action profiles, direct meters) the
    entry or None per key tuple (:meth:`lookup`).  One switch uses one of these per table."""

    def __init__(self, tir, kinds: list[str], widths: list[int], default: tuple[int, tuple]):
        self.ir = tir
        self.name = tir.fqname
        self.kinds = kinds
        self.widths = widths
        self.size = tir.size
        self.entries: dict[tuple, Entry] = {}
        self.exact_only = all(k == "exact" for k in kinds)
        self.has_prio = any(k in ("ternary", "range", "optional") for k in kinds)
        self.exact: dict[tuple, Entry] = {}
        # LPM tables (see _index_add): the lpm field's position, prefix length -> {masked key: entry}, and the
        # (mask, dict) pairs to probe, longest prefix first
        lpm = [i for i, k in enumerate(kinds) if k == "lpm"]
        self.lpm_field: int | None = lpm[0] if len(lpm) == 1 and not self.has_prio and not self.exact_only else None
        self.by_plen: dict[int, dict[tuple, Entry]] = {}
        self.lpm_probe: list[tuple[int, dict]] = []
        # other tables: mask tuple -> _Group, and the groups best-first
        self.groups: dict[tuple, _Group] = {}
        self.group_order: list[_Group] = []
        self._seq = 0
        self.cache: dict = {}
        self.default = default
        self.initial_default = default
        self.profile: ActionProfile | None = None
        self.dmeter: DirectMeter | None = None
        self.count_direct = False
        # ActionIR index -> generated action function; set by the switch once the code exists, so
        # the result tuples of simple tables can carry the function to call (see lookup_simple)
        self.action_fns: list = []
        self.scalar_key = len(kinds) == 1     # simple tables cache a one-field key as the bare value
        self.miss = self._result(False, default[0], default[1])

    def _result(self, hit: bool, action: int, args: tuple) -> tuple:
        fns = self.action_fns
        return (hit, action, args, fns[action] if fns else None)

    def bind_actions(self, fns: list) -> None:
        """Attach the generated action functions (see :attr:`action_fns`)."""
        self.action_fns = fns
        self.miss = self._result(False, self.default[0], self.default[1])
        self.cache.clear()

    # -- control plane ---------------------------------------------------------------------------
    def entry_key(self, match: tuple, priority: int) -> tuple:
        return (match, priority if self.has_prio else 0)

    def _prepare(self, e: Entry) -> None:
        masks, values, ranges = [], [], []
        for i, (m, w) in enumerate(zip(e.match, self.widths)):
            full = (1 << w) - 1
            if m is None:
                masks.append(0)
                values.append(0)
            elif m[0] in ("exact", "optional"):
                masks.append(full)
                values.append(m[1])
            elif m[0] == "lpm":
                mk = full ^ ((1 << (w - m[2])) - 1)
                masks.append(mk)
                values.append(m[1] & mk)
            elif m[0] == "ternary":
                masks.append(m[2])
                values.append(m[1] & m[2])
            else:
                masks.append(0)
                values.append(0)
                ranges.append((i, m[1], m[2]))
        e.masks, e.values, e.ranges = tuple(masks), tuple(values), tuple(ranges)
        if self.has_prio:
            e.rank = e.priority
        else:                         # LPM: the longest prefix wins (BMv2 allows one lpm field; several add up)
            e.rank = sum(m[2] for m in e.match if m is not None and m[0] == "lpm")

    def check_insert(self, e: Entry) -> None:
        """Raise what :meth:`insert` would raise for ``e`` (ALREADY_EXISTS, RESOURCE_EXHAUSTED)."""
        if self.entry_key(e.match, e.priority) in self.entries:
            raise SwitchError("ALREADY_EXISTS", f"entry already exists in table {self.name}")
        if len(self.entries) >= self.size:
            raise SwitchError("RESOURCE_EXHAUSTED", f"table {self.name} is full ({self.size} entries)")

    def insert(self, e: Entry) -> None:
        """Add an entry: O(1) for exact and LPM tables, O(log n) plus a list insert for the others."""
        self.check_insert(e)
        self._prepare(e)
        self._seq += 1
        e.seq = self._seq
        self.entries[self.entry_key(e.match, e.priority)] = e
        self._index_add(e)
        self.cache.clear()

    def modify(self, e: Entry) -> None:
        k = self.entry_key(e.match, e.priority)
        old = self.entries.get(k)
        if old is None:
            raise SwitchError("NOT_FOUND", f"no such entry in table {self.name}")
        old.action, old.args, old.member, old.group = e.action, e.args, e.member, e.group
        self.cache.clear()

    def delete(self, match: tuple, priority: int) -> Entry:
        k = self.entry_key(match, priority)
        e = self.entries.pop(k, None)
        if e is None:
            raise SwitchError("NOT_FOUND", f"no such entry in table {self.name}")
        self._index_remove(e)
        self.cache.clear()
        return e

    def get(self, match: tuple, priority: int) -> Entry | None:
        return self.entries.get(self.entry_key(match, priority))

    def set_default(self, action: int, args: tuple) -> None:
        self.default = (action, tuple(args))
        self.miss = self._result(False, action, tuple(args))
        self.cache.clear()

    # -- lookup structures ------------------------------------------------------------------------
    # exact-only tables: one dict from the key values to the entry.
    # LPM tables (one lpm field, the others exact, no priorities): a dict per prefix length from the key with
    #   the lpm field masked to that length to the entry, and the prefix lengths in use, longest first; a
    #   lookup probes at most one dict per prefix length in use (33 for IPv4), whatever the number of entries.
    # other tables (ternary, range, optional, several lpm fields): "tuple space search": entries grouped by
    #   their tuple of masks, each group a dict from the masked values to its entries (highest priority, then
    #   oldest, first; range fields are checked on those candidates); groups are probed best-first and the
    #   search stops at a group whose best priority cannot beat the match found.  The cost grows with the
    #   number of distinct mask tuples, not with the number of entries.
    def _index_add(self, e: Entry) -> None:
        if self.exact_only:
            self.exact[e.values] = e
        elif self.lpm_field is not None:
            plen = e.rank
            d = self.by_plen.get(plen)
            if d is None:
                d = self.by_plen[plen] = {}
                self._lpm_order()
            d[e.values] = e
        else:
            g = self.groups.get(e.masks)
            if g is None:
                g = self.groups[e.masks] = _Group(e.masks)
            g.add(e)
            self._group_order()

    def _index_remove(self, e: Entry) -> None:
        if self.exact_only:
            del self.exact[e.values]
        elif self.lpm_field is not None:
            d = self.by_plen[e.rank]
            del d[e.values]
            if not d:
                del self.by_plen[e.rank]
                self._lpm_order()
        else:
            g = self.groups[e.masks]
            g.remove(e)
            if not g.size:
                del self.groups[e.masks]
            self._group_order()

    def _lpm_order(self) -> None:
        w = self.widths[self.lpm_field]
        full = (1 << w) - 1
        self.lpm_probe = [(full ^ ((1 << (w - p)) - 1), self.by_plen[p]) for p in sorted(self.by_plen, reverse=True)]

    def _group_order(self) -> None:
        self.group_order = sorted(self.groups.values(), key=lambda g: g.best, reverse=True)

    # -- data plane ------------------------------------------------------------------------------
    def _find(self, key: tuple) -> Entry | None:
        if self.exact_only:
            return self.exact.get(key)
        li = self.lpm_field
        if li is not None:
            if self.scalar_key:
                k0 = key[0]
                for mk, d in self.lpm_probe:
                    e = d.get((k0 & mk,))
                    if e is not None:
                        return e
                return None
            head, k0, tail = key[:li], key[li], key[li + 1:]
            for mk, d in self.lpm_probe:
                e = d.get(head + (k0 & mk,) + tail)
                if e is not None:
                    return e
            return None
        best = None
        for g in self.group_order:
            if best is not None and g.best < best.rank:
                break
            cands = g.values.get(g.masked(key))
            if not cands:
                continue
            for e in cands:
                if best is not None and (e.rank, -e.seq) <= (best.rank, -best.seq):
                    break                 # candidates are best first: none further can win
                for i, lo, hi in e.ranges:
                    if not lo <= key[i] <= hi:
                        break
                else:
                    best = e
                    break
        return best

    @property
    def simple(self) -> bool:
        """No direct counter, direct meter or action profile: a hit only selects an action, so
        ``cache`` can map a key straight to the result (see :meth:`lookup_simple`)."""
        return self.profile is None and not self.count_direct and self.dmeter is None

    def lookup_simple(self, key: tuple, plen: int = 0, sel: bytes | None = None) -> tuple:
        """:meth:`lookup` for a :attr:`simple` table: (hit, action index, args, action function)."""
        e = self.exact.get(key) if self.exact_only else self._find(key)
        return self.miss if e is None else self._result(True, e.action, e.args)

    def fill(self, k) -> tuple:
        """Cache miss of a :attr:`simple` table: look ``k`` up and remember the result.  ``k`` is the
        key as the generated code caches it: the bare value when the table has one key field
        (:attr:`scalar_key`), else the tuple of key values.  The generated code reads ``cache``
        first and calls this only when ``k`` is not there."""
        r = self.lookup_simple((k,) if self.scalar_key else k)
        c = self.cache
        if len(c) > 65536:
            c.clear()
        c[k] = r
        return r

    def fill_counted(self, k) -> tuple:
        """Cache miss of a table whose only extra is a direct counter, for the generated fast path:
        remembers and returns (entry or None, result as :meth:`lookup_simple` gives it); the
        generated code counts the entry itself.  ``k`` as in :meth:`fill`."""
        key = (k,) if self.scalar_key else k
        e = self.exact.get(key) if self.exact_only else self._find(key)
        c = (e, self.miss if e is None else self._result(True, e.action, e.args))
        cache = self.cache
        if len(cache) > 65536:
            cache.clear()
        cache[k] = c
        return c

    def lookup(self, key: tuple, plen: int, sel: bytes | None = None) -> tuple:
        """Returns (hit, action index, args)."""
        if self.profile is None and not self.count_direct and self.dmeter is None:
            return self.lookup_simple(key)
        if self.exact_only:
            e = self.exact.get(key)
        else:
            c = self.cache
            e = c.get(key, _NOENT)
            if e is _NOENT:
                e = self._find(key)
                if len(c) > 65536:
                    c.clear()
                c[key] = e
        if e is None:
            if self.dmeter is not None:
                self.dmeter.current = None
            return self.miss
        if self.count_direct:
            e.packets += 1
            e.bytes += plen
        if self.dmeter is not None:
            self.dmeter.current = e
        if e.action >= 0:
            return (True, e.action, e.args)
        a, args = self.profile.resolve(e, sel)
        if a < 0:
            return self.miss
        return (True, a, args)
