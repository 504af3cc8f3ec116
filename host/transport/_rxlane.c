/* host.transport._rxlane: the receive fast lane of the DLCP transport, in C.
 *
 * Why: on a CPU-bound host (four endpoints on two cores, the 4-host all-to-all and the P=4 collectives) the
 * receiver's per-packet Python work -- a recvmsg call and its ancillary data, unpack a header, a dozen checks, a
 * memoryview copy, the arrival bookkeeping -- was most of the I/O thread's user time. The common case is a receive
 * record (one datagram, or one UDP GRO buffer of up to ~44 datagrams at MTU 1500, 7 at MTU 9000) whose datagrams
 * are all well-formed DATA packets of one transfer that already has its buffer; this module handles a whole batch
 * of receives in two calls.
 *
 * ``recv_batch`` drains the socket into the endpoint's receive buffer (GIL released) and describes each record in
 * a row of an int64 array: position, bytes, TOS, GRO segment size, source. ``fast_pass`` (with the endpoint's
 * lock held) takes the records it can: per record all or nothing, a first pass checks every datagram exactly as
 * the Python path does (version, message type DATA, reserved bits, dtype, seq < total, offset aligned, payload
 * length == count * itemsize, job id, nonce, and the keyed tag when the job has a key) and that each belongs to the
 * transfer (rank, transfer id, total, dtype) and fits its buffer; if any check fails, nothing is written and the record goes back to Python, which
 * names the bad field, counts the foreign packet, fails the transfer, grows a staging buffer, and so on. The
 * header checks run with the GIL held; the keyed tags, and the copies below, with it released. Otherwise
 * a second pass copies each new payload to its offset and records it in the Reassembly arrays (arrived, offsets,
 * counts); a seq already arrived (or repeated in the record) is a duplicate and only counted. The scalar
 * bookkeeping is summed per transfer and returned for ``Reassembly.add_counted``.
 *
 * The header layout below must match host/wire.py: tests/host/test_rxlane.py compares LAYOUT, VERSION and ITEMSIZE
 * with wire.WIRE_DTYPE, wire.VERSION and wire.DType, and runs random records through this module and the Python
 * path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "_tagkey.h"
#include "_txstep.h"
#include "_sendrun.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define HEADER_LEN 48
#define VERSION 1
#define MT_DATA 0
#define F_ELIGIBLE 0x01
#define F_RETRANSMIT 0x04
#define F_ECN_ECHO 0x02

/* byte offsets of the 16 header words (network order), in wire order */
enum {
    O_VT = 0, O_FLAGS = 1, O_PMR = 2, O_DTYPE = 3, O_LAYER = 4, O_RANK = 6, O_JOB = 8, O_TID = 12,
    O_ELIG = 16, O_SEQ = 20, O_TOTAL = 24, O_OFFSET = 28, O_COUNT = 32, O_NONCE = 34, O_TID_HI = 36, O_TAG = 40
};
#define NWORDS 16
static const int LAYOUT[NWORDS][2] = {
    {O_VT, 1}, {O_FLAGS, 1}, {O_PMR, 1}, {O_DTYPE, 1}, {O_LAYER, 2}, {O_RANK, 2}, {O_JOB, 4}, {O_TID, 4},
    {O_ELIG, 4}, {O_SEQ, 4}, {O_TOTAL, 4}, {O_OFFSET, 4}, {O_COUNT, 2}, {O_NONCE, 2}, {O_TID_HI, 4}, {O_TAG, 8}
};

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
/* the 64-bit transfer id: transfer_hi << 32 | transfer_id */
static inline uint64_t tid64(const uint8_t *h)
{
    return ((uint64_t)be32(h + O_TID_HI) << 32) | be32(h + O_TID);
}

/* Does the datagram at h (ln bytes) pass the header checks for the given transfer? (Its keyed tag, the expensive
 * check, is record_tags_ok's, made afterwards without the GIL.) */
static inline int datagram_ok(const uint8_t *h, Py_ssize_t ln, uint32_t job, uint32_t nonce, uint32_t rank,
                              uint64_t tid, uint32_t total, uint32_t elig, uint32_t dtype, uint32_t itemsize,
                              Py_ssize_t cap)
{
    if (ln < HEADER_LEN)
        return 0;
    if (h[O_VT] != ((VERSION << 4) | MT_DATA) || (h[O_FLAGS] & 0xF0) || (h[O_PMR] & 3) || h[O_DTYPE] != dtype)
        return 0;
    if (be32(h + O_JOB) != job || be16(h + O_NONCE) != nonce || be16(h + O_RANK) != rank || tid64(h) != tid
        || be32(h + O_TOTAL) != total || be32(h + O_ELIG) != elig)
        return 0;
    uint32_t seq = be32(h + O_SEQ), off = be32(h + O_OFFSET), count = be16(h + O_COUNT);
    Py_ssize_t plen = ln - HEADER_LEN;
    if (seq >= total || off % itemsize || plen != (Py_ssize_t)count * itemsize)
        return 0;
    if (((h[O_FLAGS] & F_ELIGIBLE) != 0) != (seq < elig))  /* eligible exactly below the eligible count */
        return 0;
    return (Py_ssize_t)off + plen <= cap;
}

/* The totals over the fresh packets of one or more records, for Reassembly.add_counted: max_seq = -1 when there
 * are none. */
typedef struct {
    long long ndg, fresh, dups, got, nelems, max_count, max_end, max_seq;
} Acc;

static inline void acc_init(Acc *a)
{
    memset(a, 0, sizeof *a);
    a->max_seq = -1;
}

/* Pass 1 of a record: every datagram (``seg`` bytes each, the last shorter; 0 = one) is a valid DATA packet of the
 * transfer that fits ``cap`` bytes. Nothing is written. */
static int record_ok(const uint8_t *base, Py_ssize_t nbytes, Py_ssize_t seg, uint32_t job, uint32_t nonce,
                     uint32_t rank, uint64_t tid, uint32_t total, uint32_t elig, uint32_t dtype, uint32_t itemsize,
                     Py_ssize_t cap)
{
    if (nbytes <= 0)
        return 0;
    if (seg == 0 || seg > nbytes)
        seg = nbytes;
    for (Py_ssize_t s = 0; s < nbytes; s += seg) {
        Py_ssize_t ln = nbytes - s < seg ? nbytes - s : seg;
        if (!datagram_ok(base + s, ln, job, nonce, rank, tid, total, elig, dtype, itemsize, cap))
            return 0;
    }
    return 1;
}

/* The keyed tag of every datagram of a record that passed record_ok: the expensive check (one pass over the
 * payload), run with the GIL released. */
static int record_tags_ok(const uint8_t *base, Py_ssize_t nbytes, Py_ssize_t seg, const uint8_t *key)
{
    if (seg == 0 || seg > nbytes)
        seg = nbytes;
    for (Py_ssize_t s = 0; s < nbytes; s += seg) {
        Py_ssize_t ln = nbytes - s < seg ? nbytes - s : seg;
        const uint8_t *h = base + s;
        if (dlcp_tag(key, h, h + HEADER_LEN, (size_t)(ln - HEADER_LEN)) != dlcp_be64(h + O_TAG))
            return 0;
    }
    return 1;
}

/* Pass 2 of a record that passed record_ok: copy each new payload to its offset, record it, count duplicates.
 * ``nacked`` (a set of seqs, or NULL): the first new packet that is an original (RETRANSMIT clear) of a NACKed seq
 * sets ``*premature`` -- that NACK came too early, as the Python path detects it. */
static void record_apply(const uint8_t *base, Py_ssize_t nbytes, Py_ssize_t seg, uint8_t *dst, uint8_t *arrived,
                         int64_t *offsets, int64_t *counts, Acc *a, PyObject *nacked, int *premature)
{
    if (seg == 0 || seg > nbytes)
        seg = nbytes;
    for (Py_ssize_t s = 0; s < nbytes; s += seg) {
        Py_ssize_t ln = nbytes - s < seg ? nbytes - s : seg;
        const uint8_t *h = base + s;
        uint32_t seq = be32(h + O_SEQ), off = be32(h + O_OFFSET), count = be16(h + O_COUNT);
        Py_ssize_t plen = ln - HEADER_LEN;
        a->ndg++;
        if (arrived[seq]) {
            a->dups++;
            continue;
        }
        if (nacked != NULL && !*premature && !(h[O_FLAGS] & F_RETRANSMIT)) {
            PyObject *k = PyLong_FromUnsignedLong(seq);
            int in = k != NULL ? PySet_Contains(nacked, k) : -1;
            Py_XDECREF(k);
            if (in < 0)
                PyErr_Clear();  /* (out of memory) a missed detection only leaves the NACK wait as it is */
            else if (in)
                *premature = 1;
        }
        memcpy(dst + off, h + HEADER_LEN, (size_t)plen);
        arrived[seq] = 1;
        offsets[seq] = off;
        counts[seq] = count;
        a->fresh++;
        a->got += plen;
        a->nelems += count;
        if (count > a->max_count)
            a->max_count = count;
        if ((long long)off + plen > a->max_end)
            a->max_end = (long long)off + plen;
        if ((long long)seq > a->max_seq)
            a->max_seq = seq;
    }
}

static inline int get_buffer(PyObject *obj, Py_buffer *view, int writable)
{
    return PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE);
}

/* The receive loop of recv_batch and rx_wait, without the GIL: until the socket is empty (or an error, left in
 * *err), ``maxrecs`` records or ``maxbytes`` bytes; returns the records. ``*full`` (when not NULL): the batch
 * stopped for room, not because the socket was empty. */
static Py_ssize_t recv_into(int fd, uint8_t *buf, int64_t *rows, Py_ssize_t maxrecs, Py_ssize_t maxbytes,
                            Py_ssize_t slot, int *err, int *full)
{
    Py_ssize_t n = 0, pos = 0;
    if (full != NULL)
        *full = 0;
    while (n < maxrecs && pos < maxbytes) {
        struct sockaddr_in sa;
        union {
            char buf[CMSG_SPACE(sizeof(int)) * 2];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {buf + pos, (size_t)slot};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_name = &sa;
        msg.msg_namelen = sizeof sa;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.buf;
        msg.msg_controllen = sizeof ctl.buf;
        ssize_t r = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                *err = errno;
            return n;
        }
        int64_t tos = 0, seg = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1))
                tos = *(const uint8_t *)CMSG_DATA(c);
            else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
                int g;
                memcpy(&g, CMSG_DATA(c), sizeof g);
                seg = g;
            }
        }
        int64_t *row = rows + 5 * n;
        row[0] = pos;
        row[1] = r;
        row[2] = tos;
        row[3] = seg;
        row[4] = (msg.msg_namelen >= sizeof sa && sa.sin_family == AF_INET)
                     ? ((int64_t)ntohl(sa.sin_addr.s_addr) << 16) | ntohs(sa.sin_port) : -1;
        n++;
        pos += r;
    }
    if (full != NULL)
        *full = 1;
    return n;
}

PyDoc_STRVAR(recv_batch_doc,
"recv_batch(fd, buf, recs, maxrecs, maxbytes, slot)\n"
"--\n\n"
"Receive from the non-blocking UDP socket ``fd`` until it is empty, ``maxrecs`` records were taken or ``maxbytes``\n"
"bytes: each record lands at the next free position of ``buf`` (``slot`` bytes of room each, so ``buf`` is at\n"
"least ``maxbytes + slot`` long) and fills one row of the int64 array ``recs`` (``maxrecs`` x 5): position,\n"
"bytes, IP TOS, UDP GRO segment size (0: one datagram), source (IPv4 address << 16 | port, -1 for another\n"
"family). Returns the number of records. The GIL is released for the whole loop. A system call error other\n"
"than an empty socket raises OSError when it comes first, else ends the batch (it recurs on the next call).");

static PyObject *recv_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "recv_batch takes 6 arguments, got %zd", nargs);
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    Py_ssize_t maxrecs = PyLong_AsSsize_t(args[3]), maxbytes = PyLong_AsSsize_t(args[4]);
    Py_ssize_t slot = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (maxrecs < 1 || maxbytes < 1 || slot < 1) {
        PyErr_SetString(PyExc_ValueError, "recv_batch: maxrecs, maxbytes and slot must be > 0");
        return NULL;
    }
    Py_buffer vb, vr;
    if (get_buffer(args[1], &vb, 1) < 0)
        return NULL;
    if (get_buffer(args[2], &vr, 1) < 0) {
        PyBuffer_Release(&vb);
        return NULL;
    }
    PyObject *result = NULL;
    if (vb.len < maxbytes + slot || vr.len < (Py_ssize_t)(5 * sizeof(int64_t)) * maxrecs) {
        PyErr_SetString(PyExc_ValueError, "recv_batch: buf shorter than maxbytes + slot, or recs than maxrecs rows");
        goto done;
    }
    uint8_t *buf = (uint8_t *)vb.buf;
    int64_t *rows = (int64_t *)vr.buf;
    Py_ssize_t n;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    n = recv_into(fd, buf, rows, maxrecs, maxbytes, slot, &err, NULL);
    Py_END_ALLOW_THREADS
    if (n == 0 && err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t(n);
done:
    PyBuffer_Release(&vr);
    PyBuffer_Release(&vb);
    return result;
}

/* One transfer met in a fast_pass: its receiver state (fetched once per pass) and the totals of its records. */
typedef struct {
    long rank;
    unsigned long long tid;
    PyObject *inc;  /* new reference; NULL: no such transfer, or not one for the fast lane (skip) */
    int bufs;       /* the four buffers below are held */
    int slow_rest;  /* a record went to Python for its CE state: so do the rest (ACK boundaries stay exact) */
    PyObject *nacked;  /* new reference: the seqs NACKed so far (a set), NULL when none */
    int premature;  /* an original of a NACKed seq arrived */
    int ce_state;   /* the transfer's ECN state; the pass's first record of the transfer may change it */
    unsigned long total, elig, dtype, itemsize;
    Py_ssize_t cum;
    Py_buffer dst, arrived, offsets, counts;
    Acc acc;
    long long ncand;  /* records of this transfer that passed the checks made with the GIL held */
} Entry;

/* A record that passed every check but the keyed tag's, waiting for the GIL-free phase. */
typedef struct {
    Py_ssize_t rec;    /* its row in recs */
    Entry *e;
    int state;         /* 0: to apply with the GIL (its transfer has NACKs: the premature test needs Python sets),
                        * 1: applied, 2: a datagram's tag was wrong (the record goes to Python, which counts it) */
} Cand;

/* element bytes by host/wire.py's DType code (uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
 * bool); exported as ITEMSIZE, which tests/host/test_rxlane.py compares with wire.DType */
static const unsigned char ITEMSIZES[] = {1, 1, 2, 4, 8, 2, 2, 4, 8, 1};
#define NDTYPES (sizeof ITEMSIZES / sizeof ITEMSIZES[0])

static unsigned long itemsize_of(unsigned long dtype)
{
    return dtype < NDTYPES ? ITEMSIZES[dtype] : 0;
}

static long attr_long(PyObject *obj, const char *name, int *ok)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (v == NULL) {
        *ok = 0;
        return 0;
    }
    long r = PyLong_AsLong(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred())
        *ok = 0;
    return r;
}

static int attr_buffer(PyObject *obj, const char *name, Py_buffer *view)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (v == NULL)
        return -1;
    int r = get_buffer(v, view, 1);
    Py_DECREF(v);
    return r;
}

/* Fill ``e`` for the transfer ``inc`` (a new reference, kept): 0 when it can take the fast lane, 1 when not (the
 * caller skips it), -1 with an exception set. The conditions are those of the Python fast-lane test: a Reassembly,
 * no NACK sent yet, a buffer (the out tensor's bytes, or the staging buffer) that is not empty. */
static int entry_fill(Entry *e, PyObject *inc)
{
    e->inc = inc;
    PyObject *st = PyObject_GetAttrString(inc, "st");
    if (st == NULL)
        return -1;
    int res = 1;
    PyObject *nacked = NULL, *dst = NULL;
    if (st == Py_None)
        goto out;
    res = -1;
    nacked = PyObject_GetAttrString(inc, "nacked");
    if (nacked == NULL)
        goto out;
    if (nacked != Py_None && !PyAnySet_Check(nacked)) {
        PyErr_SetString(PyExc_TypeError, "fast_pass: a transfer's nacked must be a set or None");
        goto out;
    }
    if (nacked != Py_None && PySet_GET_SIZE(nacked) > 0)
        e->nacked = Py_NewRef(nacked);
    dst = PyObject_GetAttrString(inc, "dst");
    if (dst == Py_None) {
        Py_DECREF(dst);
        dst = PyObject_GetAttrString(inc, "stage");
    }
    if (dst == NULL)
        goto out;
    int ok = 1;
    e->dtype = (unsigned long)attr_long(inc, "dtype", &ok);
    e->total = (unsigned long)attr_long(st, "total", &ok);
    e->elig = (unsigned long)attr_long(st, "eligible", &ok);
    e->cum = attr_long(st, "cum", &ok);
    PyObject *ce = ok ? PyObject_GetAttrString(inc, "ce_state") : NULL;
    if (ce == NULL)
        goto out;
    e->ce_state = PyObject_IsTrue(ce);
    Py_DECREF(ce);
    if (e->ce_state < 0)
        goto out;
    e->itemsize = itemsize_of(e->dtype);
    if (get_buffer(dst, &e->dst, 1) < 0)
        goto out;
    if (attr_buffer(st, "arrived", &e->arrived) < 0) {
        PyBuffer_Release(&e->dst);
        goto out;
    }
    if (attr_buffer(st, "offsets", &e->offsets) < 0) {
        PyBuffer_Release(&e->arrived);
        PyBuffer_Release(&e->dst);
        goto out;
    }
    if (attr_buffer(st, "counts", &e->counts) < 0) {
        PyBuffer_Release(&e->offsets);
        PyBuffer_Release(&e->arrived);
        PyBuffer_Release(&e->dst);
        goto out;
    }
    e->bufs = 1;
    acc_init(&e->acc);
    res = 0;
    if (e->dst.len == 0 || e->itemsize == 0 || e->total == 0 || e->cum < 0 || e->cum > (Py_ssize_t)e->total
        || e->arrived.len < (Py_ssize_t)e->total || e->offsets.len < (Py_ssize_t)(8 * e->total)
        || e->counts.len < (Py_ssize_t)(8 * e->total))
        res = 1;
out:
    Py_XDECREF(dst);
    Py_XDECREF(nacked);
    Py_DECREF(st);
    return res;
}

static void entry_release(Entry *e)
{
    if (e->bufs) {
        PyBuffer_Release(&e->counts);
        PyBuffer_Release(&e->offsets);
        PyBuffer_Release(&e->arrived);
        PyBuffer_Release(&e->dst);
        e->bufs = 0;
    }
    Py_CLEAR(e->nacked);
    Py_CLEAR(e->inc);
}

PyDoc_STRVAR(fast_pass_doc,
"fast_pass(buf, recs, n, rank_of, incoming, job, nonce, key)\n"
"--\n\n"
"Take the records of ``recs[:n]`` (rows as recv_batch writes them) that the fast lane can: a record whose first\n"
"datagram is DATA from a known source (``rank_of``: source key -> rank) for a transfer in ``incoming`` ((rank,\n"
"tid) -> receiver state) that has its Reassembly and a buffer, and whose datagrams all pass the Python path's\n"
"checks (the keyed tag (_tag.h) included when ``key``, 16 bytes, is given; None: an unkeyed job), is copied and recorded\n"
"here. The first such record of a transfer in the pass sets the ECN state (CE or\n"
"not) of the transfer's records in it; a later one of the other state, and every record of that transfer after\n"
"it, is left to Python. Returns (progress, slow, datagrams, gro_buffers): one tuple per transfer that took\n"
"records, (state, datagrams, fresh, duplicates, bytes, elements, max_count, max_end, max_seq,\n"
"cum, ce, premature) summed over its records (cum: the first seq at or after the transfer's cum that has not\n"
"arrived; premature: a new packet was an original of a seq in the transfer's ``nacked`` set, so that NACK came\n"
"too early); the other records as (position, bytes, tos, seg, rank or None) in arrival order, for the Python\n"
"path; and the datagrams and GRO buffers taken. Call with the endpoint's lock held: the keyed tags and the copies\n"
"(those of transfers with NACKs outstanding excepted) run with the GIL released.");

static PyObject *fast_pass(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "fast_pass takes 8 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *rank_of = args[3], *incoming = args[4];
    if (!PyDict_Check(rank_of) || !PyDict_Check(incoming)) {
        PyErr_SetString(PyExc_TypeError, "fast_pass: rank_of and incoming must be dicts");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[2]);
    unsigned long job = PyLong_AsUnsignedLong(args[5]), nonce = PyLong_AsUnsignedLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *sched;  /* held until done: the tag checks read it */
    if (schedule_of(args[7], &sched) < 0)
        return NULL;
    const uint8_t *tag_key = schedule_bytes(sched);
    Py_buffer vb, vr;
    if (get_buffer(args[0], &vb, 0) < 0) {
        Py_XDECREF(sched);
        return NULL;
    }
    if (get_buffer(args[1], &vr, 0) < 0) {
        PyBuffer_Release(&vb);
        Py_XDECREF(sched);
        return NULL;
    }
    PyObject *result = NULL, *slow = NULL, *prog = NULL;
    Entry *ents = NULL;
    Cand *cands = NULL;
    PyObject **srcs = NULL;  /* per record: its source rank (a new reference), or NULL */
    Py_ssize_t nents = 0, ncands = 0;
    if (n < 0 || vr.len < (Py_ssize_t)(5 * sizeof(int64_t)) * n) {
        PyErr_SetString(PyExc_ValueError, "fast_pass: n must be >= 0 and recs at least n rows");
        goto done;
    }
    const uint8_t *buf = (const uint8_t *)vb.buf;
    const int64_t *rows = (const int64_t *)vr.buf;
    slow = PyList_New(0);
    prog = PyList_New(0);
    ents = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Entry));
    cands = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Cand));
    srcs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(PyObject *));
    if (slow == NULL || prog == NULL || ents == NULL || cands == NULL || srcs == NULL) {
        if (ents == NULL || cands == NULL || srcs == NULL)
            PyErr_NoMemory();
        goto done;
    }
    long long dgrams = 0, gro = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *row = rows + 5 * i;
        int64_t pos = row[0], nbytes = row[1], tos = row[2], seg = row[3];
        if (pos < 0 || nbytes < 0 || seg < 0 || pos + nbytes > vb.len) {
            PyErr_Format(PyExc_ValueError, "fast_pass: record %zd [%lld, +%lld) outside buf", i, (long long)pos,
                         (long long)nbytes);
            goto done;
        }
        PyObject *key = PyLong_FromLongLong(row[4]);
        if (key == NULL)
            goto done;
        PyObject *src = PyDict_GetItemWithError(rank_of, key);  /* borrowed */
        Py_DECREF(key);
        if (src == NULL && PyErr_Occurred())
            goto done;
        srcs[i] = Py_XNewRef(src);  /* (a new reference: the GIL is released before the slow list is built) */
        const uint8_t *h = buf + pos;
        if (src != NULL && nbytes >= HEADER_LEN && h[O_VT] == ((VERSION << 4) | MT_DATA)) {
            long rank = PyLong_AsLong(src);
            if (rank == -1 && PyErr_Occurred())
                goto done;
            unsigned long long tid = tid64(h);
            Entry *e = NULL;
            for (Py_ssize_t k = 0; k < nents; k++)
                if (ents[k].rank == rank && ents[k].tid == tid) {
                    e = &ents[k];
                    break;
                }
            if (e == NULL) {
                e = &ents[nents++];
                e->rank = rank;
                e->tid = tid;
                PyObject *tk = Py_BuildValue("(lK)", rank, tid);
                if (tk == NULL)
                    goto done;
                PyObject *inc = PyDict_GetItemWithError(incoming, tk);
                Py_DECREF(tk);
                if (inc == NULL && PyErr_Occurred())
                    goto done;
                if (inc != NULL) {
                    Py_INCREF(inc);
                    int r = entry_fill(e, inc);
                    if (r < 0)
                        goto done;
                    if (r > 0)
                        entry_release(e);
                }
            }
            int ce = (tos & 3) == 3;
            if (e->inc != NULL && !e->slow_rest && ce != e->ce_state) {
                if (e->ncand == 0)
                    e->ce_state = ce;  /* reported back: the caller ACKs what came before, as the Python path does */
                else
                    e->slow_rest = 1;
            }
            if (e->inc != NULL && !e->slow_rest
                && record_ok(h, nbytes, seg, (uint32_t)job, (uint32_t)nonce, (uint32_t)rank, (uint64_t)tid,
                             (uint32_t)e->total, (uint32_t)e->elig, (uint32_t)e->dtype, (uint32_t)e->itemsize,
                             e->dst.len)) {
                e->ncand++;
                cands[ncands].rec = i;
                cands[ncands].e = e;
                ncands++;
            }
        }
    }
    /* The payload passes -- keyed tags, and the copies of transfers without NACKs -- with the GIL released, so the
     * caller's thread runs Python meanwhile (the endpoint's lock, held by our caller, keeps every other thread off
     * the transfers' state; the buffers stay exported until the end). Records keep their order per transfer. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < ncands; c++) {
        Cand *cd = &cands[c];
        const int64_t *row = rows + 5 * cd->rec;
        const uint8_t *h = buf + row[0];
        if (tag_key != NULL && !record_tags_ok(h, row[1], row[3], tag_key)) {
            cd->state = 2;
            continue;
        }
        if (cd->e->nacked == NULL) {
            Entry *e = cd->e;
            record_apply(h, row[1], row[3], (uint8_t *)e->dst.buf, (uint8_t *)e->arrived.buf,
                         (int64_t *)e->offsets.buf, (int64_t *)e->counts.buf, &e->acc, NULL, &e->premature);
            cd->state = 1;
        }
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t c = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *row = rows + 5 * i;
        if (c < ncands && cands[c].rec == i) {
            Cand *cd = &cands[c++];
            if (cd->state != 2) {
                Entry *e = cd->e;
                if (cd->state == 0)
                    record_apply(buf + row[0], row[1], row[3], (uint8_t *)e->dst.buf, (uint8_t *)e->arrived.buf,
                                 (int64_t *)e->offsets.buf, (int64_t *)e->counts.buf, &e->acc, e->nacked,
                                 &e->premature);
                Py_ssize_t seg = row[3] == 0 || row[3] > row[1] ? row[1] : row[3];
                dgrams += (row[1] + seg - 1) / seg;
                if (row[3] && row[1] > row[3])
                    gro++;
                continue;
            }
        }
        PyObject *t = Py_BuildValue("(LLLLO)", (long long)row[0], (long long)row[1], (long long)row[2],
                                    (long long)row[3], srcs[i] != NULL ? srcs[i] : Py_None);
        if (t == NULL || PyList_Append(slow, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    for (Py_ssize_t k = 0; k < nents; k++) {
        Entry *e = &ents[k];
        if (e->inc == NULL || e->acc.ndg == 0)
            continue;
        const uint8_t *arrived = (const uint8_t *)e->arrived.buf;
        Py_ssize_t cum = e->cum;
        while (cum < (Py_ssize_t)e->total && arrived[cum])
            cum++;
        Acc *a = &e->acc;
        PyObject *t = Py_BuildValue("(OLLLLLLLLnOO)", e->inc, a->ndg, a->fresh, a->dups, a->got, a->nelems,
                                    a->max_count, a->max_end, a->max_seq, cum,
                                    e->ce_state ? Py_True : Py_False, e->premature ? Py_True : Py_False);
        if (t == NULL || PyList_Append(prog, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    result = Py_BuildValue("(OOLL)", prog, slow, dgrams, gro);
done:
    if (ents != NULL) {
        for (Py_ssize_t k = 0; k < nents; k++)
            entry_release(&ents[k]);
        PyMem_Free(ents);
    }
    PyMem_Free(cands);
    if (srcs != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(srcs[i]);
    PyMem_Free(srcs);
    Py_XDECREF(prog);
    Py_XDECREF(slow);
    PyBuffer_Release(&vr);
    PyBuffer_Release(&vb);
    Py_XDECREF(sched);
    return result;
}

/* ---- rx_wait: the receiver's steady state, natively ---------------------------------------------------------- */

/* what ended an rx_wait (bits of its first result) */
#define W_TIMEOUT 0x01  /* its timeout passed */
#define W_SOCK 0x02     /* the socket was readable with what the Python path must see: records left, or an
                         * empty read (an error report) */
#define W_WAKE 0x04     /* the wake socket (a caller's work) */
#define W_TIMER 0x08    /* the wake-up timer */
#define W_CLOSED 0x10   /* poll failed: a descriptor was closed under it (the endpoint is closing) */
#define W_SENDERR 0x20  /* an ACK could not be sent (left to the Python path, which may queue it); when the
                         * failure was an ICMP report, the error queue has it */
#define W_PROGRESS 0x40 /* what it wrote in needs the Python path: a duplicate, the LAST seq, the transfer
                         * complete, or an ACK it could not send */
#define W_TXPY 0x80     /* the sends' next pick is the Python loop's (tx_send_step's 2: a retransmission queued,
                         * another peer's sends, the send buffer full, ...): it must not defer them to a wait */

/* the bytes of a batch from which rx_wait copies them in with the GIL released (the lock still held): a smaller
 * batch is not worth two GIL hand-offs */
#define BIG_APPLY (32 << 10)

static PyObject *s_acquire, *s_release;  /* interned "acquire", "release" */

static inline double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* With the GIL and the endpoint's lock held: is ``inc`` still the open, un-NACKed transfer ``key`` of
 * ``incoming`` whose Reassembly is ``st``? (A caller may have failed or cancelled it while the lock was free.)
 * 1 yes, 0 no, -1 with an exception set. */
static int still_ours(PyObject *incoming, PyObject *key, PyObject *inc, PyObject *st)
{
    PyObject *cur = PyDict_GetItemWithError(incoming, key);  /* borrowed */
    if (cur != inc)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *v = PyObject_GetAttrString(inc, "st");
    if (v == NULL)
        return -1;
    int same = v == st;
    Py_DECREF(v);
    if (!same)
        return 0;
    v = PyObject_GetAttrString(inc, "done");
    if (v == NULL)
        return -1;
    int done = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (done)
        return done < 0 ? -1 : 0;
    v = PyObject_GetAttrString(inc, "nacked");
    if (v == NULL)
        return -1;
    same = v == Py_None;
    Py_DECREF(v);
    return same;
}

/* the most packets an ACK's bitmap may report (Receiver.ack_bits: 8 * (mss - 8); a datagram holds at most 64 KiB,
 * loopback's path MTU) */
#define MAX_ACK_BITS (8 * 65536)

/* Send the ACK of ``template`` (48 bytes: the transfer's ACK header, seq, offset and tag still to write) for
 * ``base`` now, stamped with the time ``stamp`` (0: now), keyed when ``sched``; with a hole (``max_seq`` >= base)
 * its bitmap reports what arrived from ``base`` on (``arrived``, at most ``maxbits`` seqs, up to the last that
 * arrived), as Receiver.send_ack builds it. 0 sent, else the errno (an ICMP report is retried once, as the Python
 * path's ``unrefused`` does). */
static int send_ack(int fd, const uint8_t *tmpl, uint32_t base, const uint8_t *sched, const struct sockaddr_in *to,
                    double stamp, int ece, const uint8_t *arrived, long long max_seq, long long total,
                    long long maxbits)
{
    uint8_t pkt[HEADER_LEN + MAX_ACK_BITS / 8];
    memcpy(pkt, tmpl, HEADER_LEN);
    pkt[O_FLAGS] = (uint8_t)((pkt[O_FLAGS] & ~F_ECN_ECHO) | (ece ? F_ECN_ECHO : 0));
    put_be32(pkt + O_SEQ, base);
    size_t plen = 0;
    if (arrived != NULL && max_seq >= (long long)base) {
        long long end = (long long)base + maxbits < total ? (long long)base + maxbits : total, count = 0;
        for (long long k = end - 1; k >= (long long)base; k--)
            if (arrived[k]) {
                count = k - (long long)base + 1;
                break;
            }
        plen = (size_t)((count + 7) >> 3);
        memset(pkt + HEADER_LEN, 0, plen);
        for (long long k = 0; k < count; k++)
            if (arrived[base + k])
                pkt[HEADER_LEN + (k >> 3)] |= (uint8_t)(0x80 >> (k & 7));  /* np.packbits: the first bit high */
        pkt[O_COUNT] = (uint8_t)(count >> 8);
        pkt[O_COUNT + 1] = (uint8_t)count;
    }
    double t = stamp > 0 ? stamp : mono_now();
    put_be32(pkt + O_OFFSET, (uint32_t)((uint64_t)(t * 1e6) & 0xFFFFFFFFu));  /* control.clock_us */
    if (sched != NULL)
        dlcp_put_be64(pkt + O_TAG, dlcp_tag(sched, pkt, pkt + HEADER_LEN, plen));
    for (int tries = 0; tries < 2; tries++) {
        if (sendto(fd, pkt, HEADER_LEN + plen, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof *to)
            == (ssize_t)(HEADER_LEN + plen))
            return 0;
        if (errno == EINTR) {
            tries--;
            continue;
        }
        if (errno != ECONNREFUSED && errno != EHOSTUNREACH && errno != ENETUNREACH && errno != EHOSTDOWN)
            break;
    }
    return errno ? errno : EIO;
}


/* ---- the sends to one peer: their ACKs and bursts within rx_wait (_txstep.h does the sender's part) ---------- */

#define MT_ACK 1
#define MT_NACK 2
#define MT_CONTROL 3

/* A record of feedback from the peer of the sends in progress: every datagram an ACK or NACK from ``rank``, of this
 * job, its bitmap ``count`` bits long, or a control message (a DONE, a probe, ...) from it (Intake's checks for
 * feedback; which transfer it is about, and whether it has that transfer's shape, is tx_take_ack's to see, with
 * the lock held, and what it does not take goes to the Python path's Intake._on_feedback). The tags are
 * record_tags_ok's. */
static int fb_record_ok(const uint8_t *base, Py_ssize_t nbytes, Py_ssize_t seg, uint32_t job, uint32_t nonce,
                        uint32_t rank)
{
    if (seg == 0 || seg > nbytes)
        seg = nbytes;
    for (Py_ssize_t s = 0; s < nbytes; s += seg) {
        Py_ssize_t ln = nbytes - s < seg ? nbytes - s : seg;
        const uint8_t *h = base + s;
        if (ln < HEADER_LEN)
            return 0;
        int ctl = h[O_VT] == ((VERSION << 4) | MT_CONTROL);
        if ((!ctl && h[O_VT] != ((VERSION << 4) | MT_ACK) && h[O_VT] != ((VERSION << 4) | MT_NACK))
            || (h[O_FLAGS] & 0xF0) || (h[O_PMR] & 3) || h[O_DTYPE] >= NDTYPES
            || (!ctl && ln - HEADER_LEN != (Py_ssize_t)((be16(h + O_COUNT) + 7) >> 3)) || be32(h + O_JOB) != job
            || be16(h + O_NONCE) != nonce || be16(h + O_RANK) != rank)
            return 0;
    }
    return 1;
}

/* What rx_wait needs of the peer with sends in progress (Sender.native_candidate, via Intake.wait) */
typedef struct {
    PyObject *sender, *p, *rank_obj, *transmit, *txobj, *counters, *heard, *addr, *feedback;
    long rank;
    long long src, burst, send_buf, reorder_pkts;
    double reo_floor;  /* (with reorder_pkts: the loss detection's REORDER_TIME and REORDER_PKTS) */
    double next;  /* when pacing lets the next burst leave (0: no deadline) */
    int fd;
    const uint8_t *key;  /* the tag schedule (NULL: an unkeyed job) */
    struct sockaddr_in to;  /* the peer's address */
} Tx;

static PyObject *s_rx_datagrams, *s_rx_gro_buffers, *s_acks_rx, *s_ecn_echo_rx, *s_tx_datagrams,
    *s_tx_data_packets, *s_tx_bytes, *s_tx_gso_sends, *s_stale_feedback;  /* counter names */

#define GSO_MAX_BYTES 65000  /* transmit._GSO_MAX_BYTES */

static int ctr_add(PyObject *d, PyObject *name, long long n);

/* With the GIL held, the lock not: send the burst [s0, s1) of send ``o`` (counted already) as
 * Transmitter.transmit sends it: runs of consecutive, equal-size (the last no larger), same-TOS packets, each
 * one GSO sendmsg (_sendrun.h, the keyed tags written first), with the GIL released. A send that fails (a full send buffer, a refusal, a host queue's drop, GSO refused) hands the rest of the burst, that run
 * included, to ``transmit`` with its counts, which handles the error as it always does. 0 done, -1 with an
 * exception set. */
static int tx_send_burst(Tx *t, PyObject *lock, PyObject *o, long long s0, long long s1)
{
    PyObject *gso_obj = PyObject_GetAttr(t->txobj, ATTR[A_GSO]);
    if (gso_obj == NULL)
        return -1;
    int gso = PyObject_IsTrue(gso_obj);
    Py_DECREF(gso_obj);
    long long n_elig;
    if (gso < 0 || get_ll(o, A_N_ELIG, &n_elig) < 0)
        return -1;
    PyObject *offs = PyObject_GetAttr(o, ATTR[A_OFFS]), *lens = PyObject_GetAttr(o, ATTR[A_LENS]);
    PyObject *tos = PyObject_GetAttr(o, ATTR[A_TOS]);
    PyObject *hdr = PyObject_GetAttr(o, ATTR[A_HDR]), *pay = PyObject_GetAttr(o, ATTR[A_PAYLOAD]);
    Py_buffer vh = {0}, vp = {0};
    int ret = -1;
    long long m = s1 - s0, i = 0;
    struct iovec iov[2 * SENDRUN_MAX];
    long long size[SENDRUN_MAX];
    if (offs == NULL || lens == NULL || tos == NULL || hdr == NULL || pay == NULL)
        goto out;
    if (!PyList_Check(offs) || !PyList_Check(lens) || !PyTuple_Check(tos) || PyTuple_GET_SIZE(tos) != 2
        || m < 1 || m > SENDRUN_MAX || PyList_GET_SIZE(lens) < s1 || PyList_GET_SIZE(offs) < s1) {
        PyErr_SetString(PyExc_ValueError, "rx_wait: the send's buffers do not hold its burst");
        goto out;
    }
    long tos_b[2] = {PyLong_AsLong(PyTuple_GET_ITEM(tos, 0)), PyLong_AsLong(PyTuple_GET_ITEM(tos, 1))};
    if (PyErr_Occurred() || PyObject_GetBuffer(hdr, &vh, PyBUF_WRITABLE) < 0
        || PyObject_GetBuffer(pay, &vp, PyBUF_SIMPLE) < 0)
        goto out;
    for (long long k = 0; k < m; k++) {
        long long off = PyLong_AsLongLong(PyList_GET_ITEM(offs, s0 + k));
        size[k] = PyLong_AsLongLong(PyList_GET_ITEM(lens, s0 + k));
        if (PyErr_Occurred())
            goto out;
        if ((s0 + k + 1) * SENDRUN_HEADER_LEN > vh.len || off < 0 || size[k] < 0 || off + size[k] > vp.len
            || size[k] > NH_MAX_PAYLOAD) {
            PyErr_Format(PyExc_ValueError, "rx_wait: packet %lld outside its buffers", s0 + k);
            goto out;
        }
        iov[2 * k].iov_base = (uint8_t *)vh.buf + (s0 + k) * SENDRUN_HEADER_LEN;
        iov[2 * k].iov_len = SENDRUN_HEADER_LEN;
        iov[2 * k + 1].iov_base = (uint8_t *)vp.buf + off;
        iov[2 * k + 1].iov_len = (size_t)size[k];
    }
    long long gso_sends = 0;
    int failed = 0;
    PyThreadState *ts = PyEval_SaveThread();
    while (i < m) {  /* the runs, as Transmitter.transmit cuts them */
        long long j = i + 1, sz = size[i];
        int elig = s0 + i < n_elig;
        if (gso) {
            long long lim = i + SENDRUN_MAX, bylen = i + GSO_MAX_BYTES / (SENDRUN_HEADER_LEN + sz);
            lim = lim < m ? lim : m;
            lim = lim < bylen ? lim : bylen;
            while (j < lim && size[j - 1] == sz && size[j] <= sz && (s0 + j < n_elig) == elig)
                j++;
        }
        ssize_t r = dlcp_send_run(t->fd, iov + 2 * i, (size_t)(j - i), &t->to, (int)tos_b[elig],
                                  j > i + 1 ? (int)(SENDRUN_HEADER_LEN + sz) : 0, t->key);
        if (r < 0) {
            failed = 1;
            break;
        }
        if (j > i + 1)
            gso_sends++;
        i = j;
    }
    PyEval_RestoreThread(ts);
    if (gso_sends || failed) {
        long long rest = m - i, rest_bytes = 0;
        for (long long k = i; k < m; k++)
            rest_bytes += size[k];
        PyObject *got = PyObject_CallMethodNoArgs(lock, s_acquire);
        if (got == NULL)
            goto out;
        Py_DECREF(got);
        /* (what went to transmit is counted there again: take it back here) */
        int e = (gso_sends && ctr_add(t->counters, s_tx_gso_sends, gso_sends) < 0)
                || (failed && (ctr_add(t->counters, s_tx_datagrams, -rest) < 0
                               || ctr_add(t->counters, s_tx_data_packets, -rest) < 0
                               || ctr_add(t->counters, s_tx_bytes, -(rest_bytes + SENDRUN_HEADER_LEN * rest)) < 0));
        PyObject *rel = PyObject_CallMethodNoArgs(lock, s_release);
        if (rel == NULL || e)
            goto out;
        Py_DECREF(rel);
        if (failed) {
            PyObject *seqs = PyList_New((Py_ssize_t)rest);
            if (seqs == NULL)
                goto out;
            for (long long k = 0; k < rest; k++) {
                PyObject *v = PyLong_FromLongLong(s0 + i + k);
                if (v == NULL) {
                    Py_DECREF(seqs);
                    goto out;
                }
                PyList_SET_ITEM(seqs, (Py_ssize_t)k, v);
            }
            PyObject *res = PyObject_CallFunction(t->transmit, "((OONL))", o, t->addr, seqs, rest_bytes);
            if (res == NULL)
                goto out;
            Py_DECREF(res);
        }
    }
    ret = 0;
out:
    if (vh.obj) PyBuffer_Release(&vh);
    if (vp.obj) PyBuffer_Release(&vp);
    Py_XDECREF(offs);
    Py_XDECREF(lens);
    Py_XDECREF(tos);
    Py_XDECREF(hdr);
    Py_XDECREF(pay);
    return ret;
}

static int ctr_add(PyObject *d, PyObject *name, long long n)  /* counters[name] += n */
{
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_KeyError, "no counter %R", name);
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    PyObject *y = PyLong_FromLongLong(x + n);
    if (y == NULL)
        return -1;
    int r = PyDict_SetItem(d, name, y);
    Py_DECREF(y);
    return r;
}

/* With the GIL and the endpoint's lock held: take the ACK ``h`` (``ln`` bytes, checked by fb_record_ok and its tag)
 * for a send to the peer as Intake and Sender.on_feedback would (the source heard, the counters, the peer's feedback
 * time, then sender.on_cum_ack for a purely cumulative ACK with no hole open at the sender, else sender.on_ack with
 * its bitmap): 1 taken, 0 not this path's (not an ACK, the send no longer in progress or of another shape, a count
 * past its end, a malformed bitmap: the Python path takes it, unchanged, and counts what is wrong), -1 with an
 * exception set. */
#define CTL_LEN 5   /* control.CTL's size: the control type, a 32-bit argument (test_rxlane checks both) */
#define CTL_DONE 1  /* control.CTL_DONE */

static int tx_take_ack(Tx *t, const uint8_t *h, Py_ssize_t ln, double now)
{
    /* a DONE (control type 1, its count: Intake._on_feedback hands exactly these to the sender) is taken here only
     * when stale: a repeated one (a one-packet transfer's copy, Options.small_copies, or the answer to a probe) */
    int done = h[O_VT] == ((VERSION << 4) | MT_CONTROL) && ln == HEADER_LEN + CTL_LEN && h[HEADER_LEN] == CTL_DONE;
    if (h[O_VT] != ((VERSION << 4) | MT_ACK) && !done)
        return 0;
    PyObject *peers = PyObject_GetAttr(t->sender, ATTR[A_PEERS]);
    if (peers == NULL)
        return -1;
    PyObject *p = PyDict_GetItemWithError(peers, t->rank_obj);  /* borrowed */
    Py_DECREF(peers);  /* (p stays referenced by t->p) */
    if (p != t->p)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *out = PyObject_GetAttr(p, ATTR[A_OUT]);
    if (out == NULL)
        return -1;
    PyObject *tid = PyLong_FromUnsignedLongLong(tid64(h));
    PyObject *o = tid != NULL ? PyDict_GetItemWithError(out, tid) : NULL;  /* (borrowed: out holds it) */
    Py_XDECREF(tid);
    Py_DECREF(out);
    if (o == NULL && !PyErr_Occurred() && done) {  /* (a stale DONE: counted as Intake and Sender.on_feedback do) */
        PyObject *t_now = PyFloat_FromDouble(now);
        if (t_now == NULL)
            return -1;
        int r = PyDict_SetItem(t->heard, t->rank_obj, t_now);
        Py_DECREF(t_now);
        if (r < 0 || ctr_add(t->counters, s_rx_datagrams, 1) < 0 || ctr_add(t->counters, s_stale_feedback, 1) < 0)
            return -1;
        return 1;
    }
    if (o == NULL || done)  /* (stale feedback of another kind, or a DONE that ends a send: the Python sender's) */
        return PyErr_Occurred() ? -1 : 0;
    long long cum, hi_acked, next_seq, total;
    if (get_ll(o, A_CUM_ACKED, &cum) < 0 || get_ll(o, A_ACKED_HI, &hi_acked) < 0 || get_ll(o, A_NEXT_SEQ, &next_seq) < 0
        || get_ll(o, A_TOTAL, &total) < 0)
        return -1;
    if (total != (long long)be32(h + O_TOTAL))
        return 0;  /* (another shape: stale, the Python sender's) */
    long long base = be32(h + O_SEQ), count = be16(h + O_COUNT);
    int plain = !count && ln == HEADER_LEN && hi_acked <= cum && cum <= base && base <= next_seq;
    if (!plain && (base + count > total || !bitmap_ok(h + HEADER_LEN, ln - HEADER_LEN, count)))
        return 0;  /* (malformed: the Python sender names the field) */
    int ecn = (h[O_FLAGS] & F_ECN_ECHO) != 0;
    PyObject *t_now = PyFloat_FromDouble(now);
    if (t_now == NULL)
        return -1;
    int r = PyDict_SetItem(t->heard, t->rank_obj, t_now);
    Py_DECREF(t_now);
    if (r < 0 || set_d(p, A_LAST_FEEDBACK, now) < 0 || ctr_add(t->counters, s_rx_datagrams, 1) < 0
        || ctr_add(t->counters, s_acks_rx, 1) < 0 || add_ll(o, A_ACKS, 1) < 0)
        return -1;
    if (plain ? tx_cum_ack(p, o, base, ecn, now, be32(h + O_OFFSET)) < 0
              : tx_bitmap_ack(p, o, base, h + HEADER_LEN, ln - HEADER_LEN, count, ecn, now, be32(h + O_OFFSET),
                              t->reo_floor, t->reorder_pkts) < 0)
        return -1;
    if (ecn && (add_ll(o, A_ECN_ECHOES, 1) < 0 || ctr_add(t->counters, s_ecn_echo_rx, 1) < 0))
        return -1;
    return 1;
}

/* With the GIL held, the lock not: send what the window and pacing allow now, as the Python loop's picks would (at
 * most four bursts, each through the Transmitter). 0 done (t->next: the pacing deadline, or 0), 1 four bursts sent
 * (more may be due: receive first, then pick again), 2 the Python loop must decide (another transfer in progress,
 * a retransmission queued, the send buffer full, ...), -1 with an exception set. */
static int tx_send_step(Tx *t, PyObject *lock)
{
    for (int b = 0; b < 4; b++) {
        PyObject *got = PyObject_CallMethodNoArgs(lock, s_acquire);
        if (got == NULL)
            return -1;
        Py_DECREF(got);
        long long s0 = 0, s1 = 0, nbytes = 0;
        double wait = 1.0, now = mono_now();
        PyObject *o = NULL;
        int r = tx_pick(t->sender, t->p, now, t->burst, t->send_buf, &o, &s0, &s1, &nbytes, &wait);
        /* counted before they leave, as Transmitter.transmit counts them (the stats never lag a completion) */
        if (r == 1 && (ctr_add(t->counters, s_tx_datagrams, s1 - s0) < 0
                       || ctr_add(t->counters, s_tx_data_packets, s1 - s0) < 0
                       || ctr_add(t->counters, s_tx_bytes, nbytes + SENDRUN_HEADER_LEN * (s1 - s0)) < 0))
            r = -1;
        PyObject *rel = PyObject_CallMethodNoArgs(lock, s_release);
        if (rel == NULL) {
            Py_XDECREF(o);
            return -1;
        }
        Py_DECREF(rel);
        if (r != 1) {
            Py_XDECREF(o);
            t->next = r == 0 && wait < 1.0 ? now + wait : 0.0;
            return r;
        }
        int sent = tx_send_burst(t, lock, o, s0, s1);
        Py_DECREF(o);
        if (sent < 0)
            return -1;
        PyObject *full = PyObject_GetAttr(t->txobj, ATTR[A_FULL]);
        if (full == NULL)
            return -1;
        int f = PyObject_IsTrue(full);
        Py_DECREF(full);
        if (f)
            return f < 0 ? -1 : 2;
    }
    t->next = 0.0;
    return 1;
}

PyDoc_STRVAR(rx_wait_doc,
"rx_wait(fd, wake_fd, timer_fd, timeout, buf, recs, maxrecs, maxbytes, slot, incoming, inc, rank, src,\n"
"        job, nonce, key, ack, ack_every, lock, since_ack, unacked_at, last_arrival, hold, ack_min, tx, rx_hold,\n"
"        rx_hold_records, taken, maxbits, redue)\n"
"--\n\n"
"The I/O thread's sleep, for an endpoint whose one posted transfer ``inc`` (``incoming[(rank, inc.tid)]``, from\n"
"the source key ``src``; None: none) is arriving, or whose one send in progress ``tx`` describes (None:\n"
"none): wait (GIL released) until ``timeout`` seconds pass, ``wake_fd`` or ``timer_fd`` (-1: none) is readable,\n"
"or the socket is; take the socket's records as ``recv_batch`` does and, while every one of them is a DATA record\n"
"of ``inc`` that the fast lane would take (``fast_pass``'s checks, the keyed tag included, and the transfer's ECN\n"
"state), write them in with ``lock`` (the endpoint's) held and ACK them as the Python path's receive pass would:\n"
"at once when ``ack_every`` are unACKed, else once the socket is empty, each ACK the header ``ack`` (48 bytes,\n"
"built by the caller) with its cumulative seq, clock and keyed tag written here (and, past a hole, the bitmap of\n"
"what arrived, at most ``maxbits`` seqs, as Receiver.send_ack builds it); with a ``hold``\n"
"(Options.ack_hold), an ACK of fewer than ``ack_min`` packets waits until ``hold`` after the first of them\n"
"arrived, and ACKs carry the latest arrival's time (``since_ack``, ``unacked_at`` and ``last_arrival``: the\n"
"transfer's ACK owed when the wait starts).\n"
"``tx``: (sender, p, peer, peer_src, burst, send_buf, transmit, transmitter, counters, heard, addr, next_send,\n"
"feedback, reo_floor, reorder_pkts): PeerState ``p``, the one peer with sends in progress\n"
"(Sender.native_candidate). A record of feedback from it (checked as the intake checks an ACK or NACK, tag\n"
"included) is taken with the lock held: an ACK of one of its sends as Intake and Sender.on_feedback take it\n"
"(_txstep.h's on_cum_ack, or on_ack with its bitmap and the loss detection's REORDER_TIME and REORDER_PKTS), any\n"
"other (a NACK, a DONE, a stale or malformed ACK) by ``feedback(position, bytes, now)`` (Intake.native_feedback:\n"
"the Python sender's);\n"
"then, and when pacing allows (``next_send``, time.monotonic()), the bursts Sender.pick_burst would choose\n"
"leave, at most four between two receive passes, cut into runs and counted as ``transmit``\n"
"(Transmitter.transmit) cuts and counts them; a send that fails hands the rest of its burst to ``transmit``.\n"
"``rx_hold`` (Options.rx_hold; 0: none): after a socket wake-up of at most ``rx_hold_records`` records (or the\n"
"Python loop's pass of ``taken`` records) while ``inc`` has more than 4 packets to come or the send is in\n"
"progress, the socket is not polled for ``rx_hold`` seconds (Endpoint._rx_hold's rule): what came meanwhile is\n"
"taken in one pass.\n"
"Then sleep again. It returns to Python for anything else: a record neither path takes (left at the front of\n"
"``recs``), a duplicate, the LAST seq, every protected packet in (the transfer\n"
"completes), an ACK it could not send, ``inc`` no longer the open transfer it was, or sends in progress to\n"
"another peer too, a retransmission queued, or a full send buffer.\n"
"Returns (why, left, wakes, datagrams, gro_buffers, fresh, duplicates, bytes, elements, max_count, max_end,\n"
"max_seq, cum, acks, unacked, last_arrival, unacked_at, ce_state, ce_fresh): ``why`` the W_* bits, ``left`` the\n"
"records left in ``recs``, ``wakes`` the socket wake-ups it handled whole, then the totals of what it wrote in\n"
"(as fast_pass's progress tuple), the ACKs it sent, the packets it has not ACKed, the time.monotonic() of its\n"
"last receive and the arrival time of the first packet not ACKed, the ECN state, the CE-marked packets and the\n"
"receive holds slept out. (The\n"
"send's ACKs and bursts are counted in ``counters`` and its objects as the Python path counts them.)\n"
"``redue`` (None: none): called as ``redue(now, last)`` (time.monotonic(); ``last``: ``inc``'s latest arrival\n"
"the wait took) when ``timeout`` has passed; it returns when the wait should end instead (Endpoint._redue: the\n"
"timers' due time planned again), and the wait sleeps on until then when that is later than ``now`` (a\n"
"deadline that moved meanwhile, as an RTO does with every new ACK and a NACK's wait with every arrival).");

static PyObject *rx_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 30) {
        PyErr_Format(PyExc_TypeError, "rx_wait takes 30 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *redue = args[29] == Py_None ? NULL : args[29];
    if (redue != NULL && !PyCallable_Check(redue)) {
        PyErr_SetString(PyExc_TypeError, "rx_wait: redue must be callable or None");
        return NULL;
    }
    long long maxbits = PyLong_AsLongLong(args[28]);
    if (maxbits < 8 || maxbits > MAX_ACK_BITS) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "rx_wait: maxbits %lld outside 8..%d", maxbits, MAX_ACK_BITS);
        return NULL;
    }
    double rx_hold = PyFloat_AsDouble(args[25]);
    long long rx_hold_records = PyLong_AsLongLong(args[26]), taken = PyLong_AsLongLong(args[27]);
    if (PyErr_Occurred())
        return NULL;
    Tx tx;
    memset(&tx, 0, sizeof tx);
    int have_tx = args[24] != Py_None, have_rx = args[10] != Py_None;
    if (have_tx && !PyArg_ParseTuple(args[24], "OOlLLLOOO!O!OdOdL:rx_wait's send", &tx.sender, &tx.p,
                                     &tx.rank, &tx.src, &tx.burst, &tx.send_buf, &tx.transmit,
                                     &tx.txobj, &PyDict_Type, &tx.counters, &PyDict_Type, &tx.heard, &tx.addr,
                                     &tx.next, &tx.feedback, &tx.reo_floor, &tx.reorder_pkts))
        return NULL;
    if (!have_rx && !have_tx) {
        PyErr_SetString(PyExc_ValueError, "rx_wait: neither a transfer to receive nor one to send");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]), wake_fd = (int)PyLong_AsLong(args[1]);
    int timer_fd = (int)PyLong_AsLong(args[2]);
    double timeout = PyFloat_AsDouble(args[3]);
    Py_ssize_t maxrecs = PyLong_AsSsize_t(args[6]), maxbytes = PyLong_AsSsize_t(args[7]);
    Py_ssize_t slot = PyLong_AsSsize_t(args[8]);
    PyObject *incoming = args[9], *inc = args[10];
    long rank = PyLong_AsLong(args[11]);
    long long src = PyLong_AsLongLong(args[12]);
    unsigned long job = PyLong_AsUnsignedLong(args[13]), nonce = PyLong_AsUnsignedLong(args[14]);
    long long ack_every = PyLong_AsLongLong(args[17]);
    PyObject *lock = args[18];
    long long since_ack = PyLong_AsLongLong(args[19]);
    double unacked_at = PyFloat_AsDouble(args[20]), last0 = PyFloat_AsDouble(args[21]);
    double hold = PyFloat_AsDouble(args[22]);
    long long ack_min = PyLong_AsLongLong(args[23]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyDict_Check(incoming)) {
        PyErr_SetString(PyExc_TypeError, "rx_wait: incoming must be a dict");
        return NULL;
    }
    if (maxrecs < 1 || maxbytes < 1 || slot < 1 || src < 0 || ack_every < 1 || since_ack < 0 || !(hold >= 0)) {
        PyErr_SetString(PyExc_ValueError, "rx_wait: maxrecs, maxbytes, slot and ack_every must be > 0, src, "
                                          "since_ack and hold >= 0");
        return NULL;
    }
    PyObject *sched;
    if (schedule_of(args[15], &sched) < 0)
        return NULL;
    const uint8_t *tag_key = schedule_bytes(sched);
    Py_buffer vb, vr, va;
    if (get_buffer(args[4], &vb, 1) < 0) {
        Py_XDECREF(sched);
        return NULL;
    }
    if (get_buffer(args[5], &vr, 1) < 0) {
        PyBuffer_Release(&vb);
        Py_XDECREF(sched);
        return NULL;
    }
    if (get_buffer(args[16], &va, 0) < 0) {
        PyBuffer_Release(&vr);
        PyBuffer_Release(&vb);
        Py_XDECREF(sched);
        return NULL;
    }
    PyObject *result = NULL, *key = NULL, *st = NULL;
    Entry e;
    memset(&e, 0, sizeof e);
    if (vb.len < maxbytes + slot || vr.len < (Py_ssize_t)(5 * sizeof(int64_t)) * maxrecs || va.len != HEADER_LEN) {
        PyErr_SetString(PyExc_ValueError, "rx_wait: buf shorter than maxbytes + slot, recs than maxrecs rows, or "
                                          "ack not a 48-byte header");
        goto done;
    }
    long long tid = -1;
    long max_seq0 = -1, pcum = 0;
    if (have_rx) {
        int ok = 1;
        tid = attr_long(inc, "tid", &ok);  /* (the transfer ids the lane meets fit 63 bits) */
        if (!ok)
            goto done;
        key = Py_BuildValue("(lL)", rank, tid);
        st = key != NULL ? PyObject_GetAttrString(inc, "st") : NULL;
        if (st == NULL)
            goto done;
        max_seq0 = st == Py_None ? -1 : attr_long(st, "max_seq", &ok);
        pcum = st == Py_None ? 0 : attr_long(st, "pcum", &ok);
        if (!ok)
            goto done;
        Py_INCREF(inc);
        int r = entry_fill(&e, inc);
        if (r < 0)
            goto done;
        if (r > 0 || e.nacked != NULL) {
            PyErr_SetString(PyExc_ValueError, "rx_wait: the transfer is not one for the fast lane (no Reassembly "
                                              "or buffer, or NACKs outstanding)");
            goto done;
        }
        e.rank = rank;
        e.tid = (unsigned long long)tid;
    }
    if (have_tx) {
        const char *host;
        int port;
        if (!PyArg_ParseTuple(tx.addr, "si:the sends' peer address", &host, &port))
            goto done;
        tx.to.sin_family = AF_INET;
        tx.to.sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &tx.to.sin_addr) != 1) {
            PyErr_Format(PyExc_ValueError, "rx_wait: the sends' peer address %s is not IPv4", host);
            goto done;
        }
        tx.fd = fd;
        tx.key = tag_key;
        tx.rank_obj = PyLong_FromLong(tx.rank);
        if (tx.rank_obj == NULL)
            goto done;
    }
    uint8_t *buf = (uint8_t *)vb.buf;
    int64_t *rows = (int64_t *)vr.buf;
    uint8_t *arrived = (uint8_t *)e.arrived.buf;
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl((uint32_t)(src >> 16));
    to.sin_port = htons((uint16_t)(src & 0xFFFF));
    long long total = (long long)e.total, elig = (long long)e.elig;
    long long acks = 0, wakes = 0, gro = 0, max_seq = max_seq0, ce_fresh = 0;
    Py_ssize_t left = 0;
    double last = last0;
    int why = 0, failed = 0;
    double deadline = mono_now() + (timeout > 0 ? timeout : 0);
    /* the ACK owed: since_ack packets, the first of which arrived at unacked_at (0.0: a duplicate's, or none); with
     * a hold, an ACK of fewer than ack_min waits until unacked_at + hold (Receiver._flush's rule), and every ACK
     * carries the latest arrival's time instead of the sending time */
#define ACK_BASE() (max_seq >= elig ? pcum : (long long)e.cum) /* Reassembly.ack_base */
#define SEND_ACK()                                                                                           \
    do {                                                                                                     \
        if (send_ack(fd, (const uint8_t *)va.buf, (uint32_t)ACK_BASE(), tag_key, &to, hold > 0 ? last : 0,   \
                     e.ce_state, arrived, max_seq, total, maxbits)) {                                        \
            why = W_PROGRESS | W_SENDERR;                                                                    \
            break;                                                                                           \
        }                                                                                                    \
        acks++;                                                                                              \
        since_ack = 0;                                                                                       \
    } while (0)
    int tx_due = 0;  /* pick bursts now (ACKs came, or four bursts left and more may be due) */
    /* the receive hold (Options.rx_hold, Endpoint._rx_hold's rule): after a socket wake-up of at most
     * rx_hold_records records while the transfer has more than 4 packets to come (or the send is in progress),
     * sleep through arrivals until hold_until (a caller's work and the wake-up timer still end it); ``taken``: the
     * records the Python loop's last pass took (0: none) */
    long long holds = 0, took = (long long)taken;
#define HOLD_AFTER(now)                                                                                      \
    do {                                                                                                     \
        if (rx_hold > 0 && took > 0 && took <= rx_hold_records && ((have_rx && total - e.cum > 4) || have_tx)) \
            hold_until = (now) + rx_hold;                                                                    \
        took = 0;                                                                                            \
    } while (0)
    double hold_until = 0.0;
    HOLD_AFTER(mono_now());
    PyThreadState *ts = PyEval_SaveThread();
    for (;;) {
        double now = mono_now();
        if (have_tx && (tx_due || (tx.next > 0 && now >= tx.next))) {  /* the bursts to the peer */
            tx_due = 0;
            PyEval_RestoreThread(ts);
            int r = tx_send_step(&tx, lock);
            ts = PyEval_SaveThread();
            if (r < 0)
                failed = 1;  /* (the exception stays set: raised once the loop is left) */
            if (r < 0 || r == 2) {
                why = r == 2 ? W_PROGRESS | W_TXPY : W_PROGRESS;
                break;
            }
            tx_due = r == 1;  /* (four bursts: receive what came meanwhile, then pick again) */
            now = mono_now();
        }
        int held = since_ack > 0 && hold > 0;  /* (only ever a held ACK is owed while the thread sleeps) */
        if (held && now >= unacked_at + hold) {  /* the hold is out: Receiver.timers would flush it now */
            SEND_ACK();
            if (why)
                break;
            held = 0;
        }
        double until = held && unacked_at + hold < deadline ? unacked_at + hold : deadline;
        int holding = hold_until > now;
        if (holding && hold_until < until)
            until = hold_until;
        if (tx_due)
            until = now;  /* (a poll that does not sleep) */
        else if (have_tx && tx.next > 0 && tx.next < until)
            until = tx.next;  /* pacing lets the next burst leave then */
        double rem = until - now;
        if (rem <= 0 && until >= deadline && redue != NULL) {  /* the deadline: is it still one? */
            PyEval_RestoreThread(ts);
            PyObject *r = PyObject_CallFunction(redue, "dd", now, last);
            double next = r != NULL ? PyFloat_AsDouble(r) : -1.0;
            Py_XDECREF(r);
            int bad = PyErr_Occurred() != NULL;
            ts = PyEval_SaveThread();
            if (bad) {
                failed = 1;  /* (raised once the loop is left) */
                why = W_TIMEOUT;
                break;
            }
            if (next > now) {  /* it moved: sleep on until then */
                deadline = next;
                continue;
            }
        }
        if (rem <= 0 && until >= deadline) {
            why = W_TIMEOUT;
            break;
        }
        if (rem < 0)
            rem = 0;
        struct pollfd pfd[3] = {{holding ? -1 : fd, POLLIN, 0}, {wake_fd, POLLIN, 0}, {timer_fd, POLLIN, 0}};
        struct timespec tsp = {(time_t)rem, (long)((rem - (double)(time_t)rem) * 1e9)};
        int pr = ppoll(pfd, timer_fd >= 0 ? 3 : 2, &tsp, NULL);
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            why = W_CLOSED;
            break;
        }
        int after_hold = 0;  /* the receive hold is out: drain what came meanwhile now, as the Python loop does
                              * after Endpoint._rx_hold (a hold's wake-up, counted in holds, not a socket's) */
        if (pr == 0) {
            if (holding && until >= hold_until) {
                holds++;
                hold_until = 0.0;
                after_hold = 1;
            } else if (until < deadline) {
                continue;  /* the held ACK's time: sent above (or pacing's) */
            } else if (redue != NULL) {
                continue;  /* the deadline: asked above whether it still is one */
            } else {
                why = W_TIMEOUT;
                break;
            }
        }
        if (!after_hold) {
            if ((pfd[0].revents | pfd[1].revents | (timer_fd >= 0 ? pfd[2].revents : 0)) & POLLNVAL) {
                why = W_CLOSED;
                break;
            }
            if (pfd[1].revents)
                why |= W_WAKE;
            if (timer_fd >= 0 && pfd[2].revents)
                why |= W_TIMER;
            if (why) {  /* (the caller's work first; what the socket has, the Python loop drains next) */
                if (pfd[0].revents)
                    why |= W_SOCK;
                break;
            }
        }
        for (int pass = 0;; pass++) {  /* one socket wake-up: receive passes until the socket is empty */
            int err = 0, full = 0;
            Py_ssize_t n = recv_into(fd, buf, rows, maxrecs, maxbytes, slot, &err, &full);
            took += n;
            if (n == 0 && pass == 0 && after_hold && !err)
                break;  /* nothing came during the hold */
            if (n == 0) {
                if (pass == 0 || err) {  /* readable, yet nothing: an error report (the Python path reads it) */
                    why = W_SOCK;
                    break;
                }
                full = 0;  /* the socket emptied right after a full batch: the pass ends, as below */
            } else for (Py_ssize_t verified = 0;;) {  /* the batch; again from a change of ECN state, with the
                                                        * records after it (the first of them checked already) */
                Py_ssize_t k = verified;  /* the records, from the first, that the lane takes */
                int ce_change = 0;  /* records[k] fails only for its ECN state: the other one */
                int is_ack = 0;  /* records[k] is of cumulative ACKs from the peer */
                for (; k < n; k++) {
                    const int64_t *row = rows + 5 * k;
                    const uint8_t *h = buf + row[0];
                    if (!have_rx || row[4] != src || row[1] < HEADER_LEN
                        || !record_ok(h, row[1], row[3], (uint32_t)job, (uint32_t)nonce, (uint32_t)rank,
                                      (uint64_t)tid, (uint32_t)total, (uint32_t)elig, (uint32_t)e.dtype,
                                      (uint32_t)e.itemsize, e.dst.len)
                        || (tag_key != NULL && !record_tags_ok(h, row[1], row[3], tag_key))) {
                        is_ack = have_tx && row[4] == tx.src && row[1] >= HEADER_LEN
                                 && fb_record_ok(h, row[1], row[3], (uint32_t)job, (uint32_t)nonce,
                                                 (uint32_t)tx.rank)
                                 && (tag_key == NULL || record_tags_ok(h, row[1], row[3], tag_key));
                        break;
                    }
                    if (((row[2] & 3) == 3) != e.ce_state) {
                        ce_change = 1;
                        break;
                    }
                }
                long long fresh0 = e.acc.fresh;
                int ours = 1;
                if (k > 0) {
                    /* written with the endpoint's lock held, after checking the transfer is still the one: a
                     * caller may have failed or cancelled it meanwhile (its buffer is then the caller's again) */
                    PyEval_RestoreThread(ts);
                    PyObject *got = PyObject_CallMethodNoArgs(lock, s_acquire);
                    ours = got != NULL ? still_ours(incoming, key, inc, st) : -1;
                    Py_XDECREF(got);
                    if (ours > 0) {
                        Py_ssize_t bytes = rows[5 * (k - 1)] + rows[5 * (k - 1) + 1] - rows[0];
                        PyThreadState *copy = bytes >= BIG_APPLY ? PyEval_SaveThread() : NULL;
                        for (Py_ssize_t i = 0; i < k; i++) {
                            const int64_t *row = rows + 5 * i;
                            record_apply(buf + row[0], row[1], row[3], (uint8_t *)e.dst.buf, arrived,
                                         (int64_t *)e.offsets.buf, (int64_t *)e.counts.buf, &e.acc, NULL,
                                         &e.premature);
                            if (row[3] && row[1] > row[3])
                                gro++;
                        }
                        if (copy != NULL)
                            PyEval_RestoreThread(copy);
                    }
                    if (got != NULL) {
                        PyObject *rel = PyObject_CallMethodNoArgs(lock, s_release);
                        if (rel == NULL)
                            ours = -1;
                        Py_XDECREF(rel);
                    }
                    if (ours < 0)
                        failed = 1;  /* (the exception stays set: raised once the loop is left) */
                    ts = PyEval_SaveThread();
                    if (ours <= 0)
                        k = 0;  /* nothing written: every record goes to the Python path */
                }
                if (k > 0) {  /* what was written, as Receiver._arrived and Reassembly.add_counted take it */
                    long long fresh = e.acc.fresh - fresh0;
                    last = mono_now();
                    if (fresh && !since_ack)
                        unacked_at = last;
                    since_ack += fresh;
                    if (e.ce_state)
                        ce_fresh += fresh;
                    while (e.cum < (Py_ssize_t)total && arrived[e.cum])
                        e.cum++;
                    if (e.cum > pcum)
                        pcum = e.cum;
                    while (pcum < total && arrived[pcum])
                        pcum++;
                    if (e.acc.max_seq > max_seq)
                        max_seq = e.acc.max_seq;
                }
                int plain = !have_rx || (!e.acc.dups && pcum < total && max_seq < total - 1);
                if (k < n && ce_change && plain && ours > 0) {
                    /* the other ECN state from records[k] on: as DCTCP's receiver (and the Python path), ACK what
                     * came before in the old state, at once (no hold), then take the rest in the new one */
                    if (since_ack) {
                        if (send_ack(fd, (const uint8_t *)va.buf, (uint32_t)ACK_BASE(), tag_key, &to, 0,
                                     e.ce_state, arrived, max_seq, total, maxbits)) {
                            memmove(rows, rows + 5 * k, (size_t)(n - k) * 5 * sizeof(int64_t));
                            left = n - k;
                            why = W_PROGRESS | W_SENDERR;
                            break;
                        }
                        acks++;
                        since_ack = 0;
                    }
                    e.ce_state = !e.ce_state;
                    memmove(rows, rows + 5 * k, (size_t)(n - k) * 5 * sizeof(int64_t));
                    n -= k;
                    verified = 1;  /* (records[k] passed every check but its ECN state's, which now matches) */
                    continue;
                }
                if (k < n && is_ack && plain && ours > 0) {
                    /* feedback from the peer, with the lock held: an ACK taken here as Sender.on_feedback takes
                     * it, any other (a NACK, a DONE, a stale or malformed ACK) handed to the Python sender
                     * (Intake.native_feedback); a GRO buffer's one after another */
                    int64_t *row = rows + 5 * k;
                    Py_ssize_t sg = row[3] && row[3] < row[1] ? row[3] : row[1];
                    Py_ssize_t nd = (row[1] + sg - 1) / sg, j = 0;
                    PyEval_RestoreThread(ts);
                    PyObject *got = PyObject_CallMethodNoArgs(lock, s_acquire);
                    int r = got != NULL ? 1 : -1;
                    double tnow = mono_now();
                    while (r > 0 && j < nd) {
                        Py_ssize_t at = row[0] + j * sg, ln = row[1] - j * sg < sg ? row[1] - j * sg : sg;
                        r = tx_take_ack(&tx, buf + at, ln, tnow);
                        if (r == 0) {  /* (the Python sender's) */
                            PyObject *res = PyObject_CallFunction(tx.feedback, "nnd", at, ln, tnow);
                            r = res != NULL ? 1 : -1;
                            Py_XDECREF(res);
                        }
                        if (r > 0)
                            j++;
                    }
                    /* (a GRO buffer is counted once, as the Python path counts it) */
                    if (r >= 0 && nd > 1 && ctr_add(tx.counters, s_rx_gro_buffers, 1) < 0)
                        r = -1;
                    if (got != NULL) {
                        PyObject *rel = PyObject_CallMethodNoArgs(lock, s_release);
                        if (rel == NULL)
                            r = -1;
                        Py_XDECREF(rel);
                    }
                    Py_XDECREF(got);
                    ts = PyEval_SaveThread();
                    if (r < 0) {
                        failed = 1;
                        why = W_PROGRESS;
                        break;
                    }
                    tx_due = 1;
                    memmove(rows, row + 5, (size_t)(n - k - 1) * 5 * sizeof(int64_t));
                    n -= k + 1;
                    verified = 0;
                    continue;
                }
                if (k < n) {  /* the rest to the Python path, at the front of recs */
                    memmove(rows, rows + 5 * k, (size_t)(n - k) * 5 * sizeof(int64_t));
                    left = n - k;
                    why = W_SOCK;
                    break;
                }
                if (!plain) {
                    why = W_PROGRESS;  /* a duplicate, the transfer complete, or its LAST: the Python path */
                    break;
                }
                if (err) {  /* a receive error ended the batch: it recurs on the Python path's next receive */
                    why = W_SOCK;
                    break;
                }
                break;
            }
            if (why)
                break;
            /* ACK at once when ack_every are owed; else at the pass's end (the socket empty), unless held */
            if (since_ack && (since_ack >= ack_every
                              || (!full && !(hold > 0 && since_ack < ack_min && last - unacked_at < hold)))) {
                SEND_ACK();
                if (why)
                    break;
            }
            if (!full)
                break;
        }
        if (why)
            break;
        if (!after_hold)
            wakes++;
        HOLD_AFTER(mono_now());
    }
#undef HOLD_AFTER
#undef SEND_ACK
#undef ACK_BASE
    PyEval_RestoreThread(ts);
    if (failed)
        goto done;
    Acc *a = &e.acc;
    result = Py_BuildValue("(inLLLLLLLLLLnLLddiLL)", why, left, wakes, a->ndg, gro, a->fresh, a->dups, a->got,
                           a->nelems, a->max_count, a->max_end, a->max_seq, e.cum, acks, since_ack, last, unacked_at,
                           e.ce_state, ce_fresh, holds);
done:
    Py_XDECREF(tx.rank_obj);
    entry_release(&e);
    Py_XDECREF(st);
    Py_XDECREF(key);
    PyBuffer_Release(&va);
    PyBuffer_Release(&vr);
    PyBuffer_Release(&vb);
    Py_XDECREF(sched);
    return result;
}

static PyMethodDef methods[] = {
    {"recv_batch", (PyCFunction)(void (*)(void))recv_batch, METH_FASTCALL, recv_batch_doc},
    {"fast_pass", (PyCFunction)(void (*)(void))fast_pass, METH_FASTCALL, fast_pass_doc},
    {"rx_wait", (PyCFunction)(void (*)(void))rx_wait, METH_FASTCALL, rx_wait_doc},
    {"cum_ack", (PyCFunction)(void (*)(void))cum_ack, METH_FASTCALL, cum_ack_doc},
    {"bitmap_ack", (PyCFunction)(void (*)(void))bitmap_ack, METH_FASTCALL, bitmap_ack_doc},
    {"pick_peer", (PyCFunction)(void (*)(void))pick_peer, METH_FASTCALL, pick_peer_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rxlane",
    "The DLCP receive fast lane: one C call per receive record of well-formed DATA packets of one transfer.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rxlane(void)
{
    if (s_acquire == NULL && (s_acquire = PyUnicode_InternFromString("acquire")) == NULL)
        return NULL;
    if (s_release == NULL && (s_release = PyUnicode_InternFromString("release")) == NULL)
        return NULL;
    if (s_rx_datagrams == NULL
        && ((s_rx_datagrams = PyUnicode_InternFromString("rx_datagrams")) == NULL
            || (s_rx_gro_buffers = PyUnicode_InternFromString("rx_gro_buffers")) == NULL
            || (s_acks_rx = PyUnicode_InternFromString("acks_rx")) == NULL
            || (s_ecn_echo_rx = PyUnicode_InternFromString("ecn_echo_rx")) == NULL
            || (s_tx_datagrams = PyUnicode_InternFromString("tx_datagrams")) == NULL
            || (s_tx_data_packets = PyUnicode_InternFromString("tx_data_packets")) == NULL
            || (s_tx_bytes = PyUnicode_InternFromString("tx_bytes")) == NULL
            || (s_tx_gso_sends = PyUnicode_InternFromString("tx_gso_sends")) == NULL
            || (s_stale_feedback = PyUnicode_InternFromString("stale_feedback")) == NULL))
        return NULL;
    if (ATTR[0] == NULL && txstep_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *layout = PyTuple_New(NWORDS);
    if (layout == NULL)
        goto fail;
    for (int i = 0; i < NWORDS; i++) {
        PyObject *t = Py_BuildValue("(ii)", LAYOUT[i][0], LAYOUT[i][1]);
        if (t == NULL) {
            Py_DECREF(layout);
            goto fail;
        }
        PyTuple_SET_ITEM(layout, i, t);
    }
    if (PyModule_AddObject(m, "LAYOUT", layout) < 0) {
        Py_DECREF(layout);
        goto fail;
    }
    PyObject *sizes = PyTuple_New(NDTYPES);
    if (sizes == NULL)
        goto fail;
    for (size_t i = 0; i < NDTYPES; i++)
        PyTuple_SET_ITEM(sizes, i, PyLong_FromLong(ITEMSIZES[i]));
    if (PyModule_AddObject(m, "ITEMSIZE", sizes) < 0) {
        Py_DECREF(sizes);
        goto fail;
    }
    if (PyModule_AddIntConstant(m, "VERSION", VERSION) < 0 || PyModule_AddIntConstant(m, "HEADER_LEN", HEADER_LEN) < 0
        || PyModule_AddIntConstant(m, "F_ELIGIBLE", F_ELIGIBLE) < 0
        || PyModule_AddIntConstant(m, "F_RETRANSMIT", F_RETRANSMIT) < 0
        || PyModule_AddIntConstant(m, "CTL_LEN", CTL_LEN) < 0 || PyModule_AddIntConstant(m, "CTL_DONE", CTL_DONE) < 0
        || PyModule_AddIntConstant(m, "W_TIMEOUT", W_TIMEOUT) < 0 || PyModule_AddIntConstant(m, "W_SOCK", W_SOCK) < 0
        || PyModule_AddIntConstant(m, "W_WAKE", W_WAKE) < 0 || PyModule_AddIntConstant(m, "W_TIMER", W_TIMER) < 0
        || PyModule_AddIntConstant(m, "W_CLOSED", W_CLOSED) < 0
        || PyModule_AddIntConstant(m, "W_SENDERR", W_SENDERR) < 0
        || PyModule_AddIntConstant(m, "W_PROGRESS", W_PROGRESS) < 0
        || PyModule_AddIntConstant(m, "W_TXPY", W_TXPY) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
