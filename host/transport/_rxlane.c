/* host.transport._rxlane: the receive fast lane of the DLCP transport, in C.
 *
 * Why: on a CPU-bound host (four endpoints on two cores, the 4-host all-to-all and the P=4 collectives) the
 * receiver's per-packet Python work -- unpack a header, a dozen checks, a memoryview copy, the arrival
 * bookkeeping -- was about two thirds of the I/O thread's user time. A receive record (one datagram, or one UDP
 * GRO buffer of up to ~44 datagrams at MTU 1500, 7 at MTU 9000) whose datagrams are all well-formed DATA packets
 * of one transfer that already has its buffer is the common case; this module handles such a record in one call.
 *
 * Contract (``data_record``): all or nothing. A first pass checks every datagram of the record exactly as
 * ``Endpoint._handle`` does (version, message type DATA, reserved bits, dtype, seq < total, offset aligned,
 * payload length == count * itemsize, job id, nonce), and that each belongs to the given transfer (rank,
 * transfer id, total, dtype) and fits the destination buffer. If any check fails nothing is written and None is
 * returned: the caller runs the record through the general Python path, which names the bad field, counts the
 * foreign packet, fails the transfer, grows a staging buffer, and so on. Otherwise a second pass copies each new
 * payload to its offset and records it in the Reassembly arrays (arrived, offsets, counts); a seq already
 * arrived (or repeated in the record) is a duplicate and is only counted. The scalar bookkeeping is returned for
 * ``Reassembly.add_counted``.
 *
 * The header layout below must match host/wire.py: tests/host/test_rxlane.py compares LAYOUT and VERSION with
 * wire.WIRE_DTYPE and wire.VERSION, and runs random records through this function and the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_LEN 36
#define VERSION 1
#define MT_DATA 0
#define F_ELIGIBLE 0x01

/* byte offsets of the 14 header words (network order), in wire order */
enum {
    O_VT = 0, O_FLAGS = 1, O_PMR = 2, O_DTYPE = 3, O_LAYER = 4, O_RANK = 6, O_JOB = 8, O_TID = 12,
    O_STEP = 16, O_SEQ = 20, O_TOTAL = 24, O_OFFSET = 28, O_COUNT = 32, O_NONCE = 34
};
static const int LAYOUT[14][2] = {
    {O_VT, 1}, {O_FLAGS, 1}, {O_PMR, 1}, {O_DTYPE, 1}, {O_LAYER, 2}, {O_RANK, 2}, {O_JOB, 4}, {O_TID, 4},
    {O_STEP, 4}, {O_SEQ, 4}, {O_TOTAL, 4}, {O_OFFSET, 4}, {O_COUNT, 2}, {O_NONCE, 2}
};

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Does the datagram at h (ln bytes) pass the checks for the given transfer? */
static inline int datagram_ok(const uint8_t *h, Py_ssize_t ln, uint32_t job, uint32_t nonce, uint32_t rank,
                              uint32_t tid, uint32_t total, uint32_t dtype, uint32_t itemsize, Py_ssize_t cap)
{
    if (ln < HEADER_LEN)
        return 0;
    if (h[O_VT] != ((VERSION << 4) | MT_DATA) || (h[O_FLAGS] & 0xF0) || (h[O_PMR] & 3) || h[O_DTYPE] != dtype)
        return 0;
    if (be32(h + O_JOB) != job || be16(h + O_NONCE) != nonce || be16(h + O_RANK) != rank || be32(h + O_TID) != tid
        || be32(h + O_TOTAL) != total)
        return 0;
    uint32_t seq = be32(h + O_SEQ), off = be32(h + O_OFFSET), count = be16(h + O_COUNT);
    Py_ssize_t plen = ln - HEADER_LEN;
    if (seq >= total || off % itemsize || plen != (Py_ssize_t)count * itemsize)
        return 0;
    return (Py_ssize_t)off + plen <= cap;
}

static inline int get_buffer(PyObject *obj, Py_buffer *view, int writable)
{
    return PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE);
}

PyDoc_STRVAR(data_record_doc,
"data_record(buf, start, nbytes, seg, job, nonce, rank, tid, total, dtype, itemsize, dst, arrived, offsets, counts,\n"
"            cum)\n"
"--\n\n"
"Consume one receive record of ``buf[start:start+nbytes]`` (datagrams of ``seg`` bytes, the last one shorter; 0 =\n"
"one datagram) if every datagram is a valid DATA packet of transfer (rank, tid) with ``total`` packets of\n"
"``dtype`` that fits ``dst``. Returns None (nothing written) otherwise, else\n"
"(datagrams, fresh, duplicates, bytes, elements, max_count, max_end, min_eligible_seq, max_seq, cum) over the\n"
"fresh packets (min_eligible_seq = total and max_seq = -1 when there are none; cum: the first seq at or after the\n"
"given ``cum`` that has not arrived). ``arrived`` (bool), ``offsets`` and ``counts`` (int64) are the transfer's\n"
"Reassembly arrays, at least ``total`` long.");

static PyObject *data_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    PyObject *result = NULL;
    if (nargs != 16) {
        PyErr_Format(PyExc_TypeError, "data_record takes 16 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), nbytes = PyLong_AsSsize_t(args[2]), seg = PyLong_AsSsize_t(args[3]);
    unsigned long job = PyLong_AsUnsignedLong(args[4]), nonce = PyLong_AsUnsignedLong(args[5]);
    unsigned long rank = PyLong_AsUnsignedLong(args[6]), tid = PyLong_AsUnsignedLong(args[7]);
    unsigned long total = PyLong_AsUnsignedLong(args[8]), dtype = PyLong_AsUnsignedLong(args[9]);
    unsigned long itemsize = PyLong_AsUnsignedLong(args[10]);
    Py_ssize_t cum = PyLong_AsSsize_t(args[15]);
    if (PyErr_Occurred())
        return NULL;
    if (itemsize == 0 || total == 0 || start < 0 || nbytes < 0 || seg < 0 || cum < 0 || cum > (Py_ssize_t)total) {
        PyErr_SetString(PyExc_ValueError,
                        "data_record: itemsize and total must be > 0, start/nbytes/seg >= 0, 0 <= cum <= total");
        return NULL;
    }
    Py_buffer vb, vd, va, vo, vc;
    if (get_buffer(args[0], &vb, 0) < 0)
        return NULL;
    if (get_buffer(args[11], &vd, 1) < 0)
        goto fail_b;
    if (get_buffer(args[12], &va, 1) < 0)
        goto fail_d;
    if (get_buffer(args[13], &vo, 1) < 0)
        goto fail_a;
    if (get_buffer(args[14], &vc, 1) < 0)
        goto fail_o;
    if (start + nbytes > vb.len || va.len < (Py_ssize_t)total || vo.len < (Py_ssize_t)(8 * total)
        || vc.len < (Py_ssize_t)(8 * total)) {
        PyErr_SetString(PyExc_ValueError, "data_record: record outside buf, or Reassembly arrays shorter than total");
        goto done;
    }
    const uint8_t *base = (const uint8_t *)vb.buf + start;
    uint8_t *dst = (uint8_t *)vd.buf;
    uint8_t *arrived = (uint8_t *)va.buf;
    int64_t *offsets = (int64_t *)vo.buf, *counts = (int64_t *)vc.buf;
    Py_ssize_t cap = vd.len;
    if (seg == 0 || seg > nbytes)
        seg = nbytes;
    if (nbytes == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* pass 1: every datagram valid and of this transfer, or nothing happens */
    for (Py_ssize_t s = 0; s < nbytes; s += seg) {
        Py_ssize_t ln = nbytes - s < seg ? nbytes - s : seg;
        if (!datagram_ok(base + s, ln, (uint32_t)job, (uint32_t)nonce, (uint32_t)rank, (uint32_t)tid,
                         (uint32_t)total, (uint32_t)dtype, (uint32_t)itemsize, cap)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    /* pass 2: copy and record */
    long long ndgrams = 0, fresh = 0, dups = 0, got = 0, nelems = 0, max_count = 0, max_end = 0;
    long long min_elig = (long long)total, max_seq = -1;
    for (Py_ssize_t s = 0; s < nbytes; s += seg) {
        Py_ssize_t ln = nbytes - s < seg ? nbytes - s : seg;
        const uint8_t *h = base + s;
        uint32_t seq = be32(h + O_SEQ), off = be32(h + O_OFFSET), count = be16(h + O_COUNT);
        Py_ssize_t plen = ln - HEADER_LEN;
        ndgrams++;
        if (arrived[seq]) {
            dups++;
            continue;
        }
        memcpy(dst + off, h + HEADER_LEN, (size_t)plen);
        arrived[seq] = 1;
        offsets[seq] = off;
        counts[seq] = count;
        fresh++;
        got += plen;
        nelems += count;
        if (count > max_count)
            max_count = count;
        if ((long long)off + plen > max_end)
            max_end = (long long)off + plen;
        if ((h[O_FLAGS] & F_ELIGIBLE) && (long long)seq < min_elig)
            min_elig = seq;
        if ((long long)seq > max_seq)
            max_seq = seq;
    }
    while (cum < (Py_ssize_t)total && arrived[cum])
        cum++;
    result = Py_BuildValue("(LLLLLLLLLn)", ndgrams, fresh, dups, got, nelems, max_count, max_end, min_elig, max_seq,
                           cum);
done:
    PyBuffer_Release(&vc);
fail_o:
    PyBuffer_Release(&vo);
fail_a:
    PyBuffer_Release(&va);
fail_d:
    PyBuffer_Release(&vd);
fail_b:
    PyBuffer_Release(&vb);
    return result;
}

static PyMethodDef methods[] = {
    {"data_record", (PyCFunction)(void (*)(void))data_record, METH_FASTCALL, data_record_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rxlane",
    "The DLCP receive fast lane: one C call per receive record of well-formed DATA packets of one transfer.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rxlane(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *layout = PyTuple_New(14);
    if (layout == NULL)
        goto fail;
    for (int i = 0; i < 14; i++) {
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
    if (PyModule_AddIntConstant(m, "VERSION", VERSION) < 0 || PyModule_AddIntConstant(m, "HEADER_LEN", HEADER_LEN) < 0
        || PyModule_AddIntConstant(m, "F_ELIGIBLE", F_ELIGIBLE) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
