/* host.transport._txlane: the send fast lane of the DLCP transport, in C.
 *
 * Why: the I/O thread sends a burst as runs of consecutive, equal-size packets, each run one sendmsg with a
 * UDP_SEGMENT control message (GSO). In Python every packet of a run costs two memoryview slices (header and
 * payload), list appends, and sendmsg's own per-buffer argument parsing; at MTU 9000 a run is up to 7 packets, at
 * MTU 1500 up to 43. ``send_run`` builds the iovec from the plan's header array, the tensor's bytes and the
 * packets' offsets and lengths directly and makes the one sendmsg, with the GIL released around the system call
 * (as socket.sendmsg does).
 *
 * Contract: ``send_run(fd, hdr, payload, offs, lens, seqs, i, j, ip4, port, tos, seg, key)`` sends the datagrams
 * of seqs[i:j] (each: the 48-byte header hdr[48*s : 48*s+48], then payload[offs[s] : offs[s]+lens[s]]) to ip4:port
 * (4 packed address bytes, host-order port) with IP TOS ``tos``, as one sendmsg; ``seg`` > 0 adds UDP_SEGMENT
 * ``seg`` (the caller's GSO run: every datagram but the last exactly ``seg`` bytes), 0 sends one datagram (j = i+1).
 * ``key`` (16 bytes, or None for an unkeyed job) first writes each packet's keyed tag (``_tag.h``) into its
 * header's tag field, in ``hdr`` itself.
 * Returns the bytes sent. A system call error raises OSError with its errno (BlockingIOError for a full socket
 * buffer, so the caller waits and retries exactly as with socket.sendmsg); bad arguments raise ValueError or
 * IndexError and send nothing. The bytes on the wire are those the Python path sends: tests/host/test_txlane.py
 * compares them datagram by datagram, TOS included.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "_tagkey.h"
#include "_sendrun.h"

#define HEADER_LEN 48
#define MAX_RUN SENDRUN_MAX

static int list_index(PyObject *list, Py_ssize_t k, Py_ssize_t *out, const char *what)
{
    if (k < 0 || k >= PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_IndexError, "send_run: %s index %zd out of range", what, k);
        return -1;
    }
    Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(list, k));
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

PyDoc_STRVAR(send_run_doc,
"send_run(fd, hdr, payload, offs, lens, seqs, i, j, ip4, port, tos, seg, key)\n"
"--\n\n"
"Send the datagrams of seqs[i:j] (header hdr[48*s:48*s+48], payload payload[offs[s]:offs[s]+lens[s]]) to\n"
"ip4:port with IP TOS ``tos`` as one sendmsg; ``seg`` > 0 adds UDP_SEGMENT ``seg`` (GSO), 0 sends one datagram.\n"
"``key`` (16 bytes or None): write each packet's keyed tag into its header first (``hdr`` must be writable).\n"
"Returns the bytes sent; a system call error raises OSError with its errno.");

static PyObject *send_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "send_run takes 13 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *offs = args[3], *lens = args[4], *seqs = args[5];
    if (!PyList_Check(offs) || !PyList_Check(lens) || !PyList_Check(seqs)) {
        PyErr_SetString(PyExc_TypeError, "send_run: offs, lens and seqs must be lists");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    Py_ssize_t i = PyLong_AsSsize_t(args[6]), j = PyLong_AsSsize_t(args[7]);
    long port = PyLong_AsLong(args[9]), tos = PyLong_AsLong(args[10]), seg = PyLong_AsLong(args[11]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t n = j - i;
    if (n < 1 || n > MAX_RUN || i < 0 || (seg == 0 && n != 1) || seg < 0 || seg > 65535 || port < 0 || port > 65535
        || tos < 0 || tos > 255) {
        PyErr_Format(PyExc_ValueError, "send_run: bad run [%zd, %zd) (1..%d datagrams; seg 0 only for one), seg %ld, "
                     "port %ld or tos %ld", i, j, MAX_RUN, seg, port, tos);
        return NULL;
    }
    char ip[4];
    if (!PyBytes_Check(args[8]) || PyBytes_GET_SIZE(args[8]) != 4) {
        PyErr_SetString(PyExc_ValueError, "send_run: ip4 must be 4 packed bytes");
        return NULL;
    }
    memcpy(ip, PyBytes_AS_STRING(args[8]), 4);
    PyObject *sched;
    if (schedule_of(args[12], &sched) < 0)
        return NULL;
    const uint8_t *key = schedule_bytes(sched);
    Py_buffer vh, vp;
    if (PyObject_GetBuffer(args[1], &vh, key ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        Py_XDECREF(sched);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &vp, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&vh);
        Py_XDECREF(sched);
        return NULL;
    }
    PyObject *result = NULL;
    struct iovec iov[2 * MAX_RUN];
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t s, off, ln;
        if (list_index(seqs, i + k, &s, "seqs") < 0 || list_index(offs, s, &off, "offs") < 0
            || list_index(lens, s, &ln, "lens") < 0)
            goto done;
        if ((s + 1) * HEADER_LEN > vh.len || off < 0 || ln < 0 || off + ln > vp.len || ln > NH_MAX_PAYLOAD) {
            PyErr_Format(PyExc_ValueError, "send_run: packet %zd (header or payload [%zd, %zd)) outside its buffers",
                         s, off, off + ln);
            goto done;
        }
        iov[2 * k].iov_base = (char *)vh.buf + s * HEADER_LEN;
        iov[2 * k].iov_len = HEADER_LEN;
        iov[2 * k + 1].iov_base = (char *)vp.buf + off;
        iov[2 * k + 1].iov_len = (size_t)ln;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    memcpy(&sa.sin_addr, ip, 4);
    ssize_t r;
    Py_BEGIN_ALLOW_THREADS
    r = dlcp_send_run(fd, iov, (size_t)n, &sa, (int)tos, (int)seg, key);  /* (the tags, then the system call) */
    Py_END_ALLOW_THREADS
    if (r < 0)
        PyErr_SetFromErrno(PyExc_OSError);
    else
        result = PyLong_FromSsize_t(r);
done:
    PyBuffer_Release(&vp);
    PyBuffer_Release(&vh);
    Py_XDECREF(sched);
    return result;
}

/* Sum of |x| in double, with eight independent partial sums in two-lane vectors (GCC/clang vector extensions:
 * SSE2 on x86-64, NEON elsewhere) so the adds overlap: memory-bound instead of add-latency-bound. */
typedef double v2d __attribute__((vector_size(16)));

static inline v2d v2_abs(v2d v)
{
    return (v2d){fabs(v[0]), fabs(v[1])};
}

#define DEFINE_ABS_SUM(name, T)                                                                                 \
    static double name(const T *x, Py_ssize_t n)                                                                \
    {                                                                                                           \
        v2d s0 = {0, 0}, s1 = {0, 0}, s2 = {0, 0}, s3 = {0, 0};                                                 \
        Py_ssize_t i = 0;                                                                                       \
        for (; i + 8 <= n; i += 8) {                                                                            \
            s0 += v2_abs((v2d){x[i], x[i + 1]});                                                                \
            s1 += v2_abs((v2d){x[i + 2], x[i + 3]});                                                            \
            s2 += v2_abs((v2d){x[i + 4], x[i + 5]});                                                            \
            s3 += v2_abs((v2d){x[i + 6], x[i + 7]});                                                            \
        }                                                                                                       \
        v2d t = (s0 + s1) + (s2 + s3);                                                                          \
        double s = t[0] + t[1];                                                                                 \
        for (; i < n; i++)                                                                                      \
            s += fabs((double)x[i]);                                                                            \
        return s;                                                                                               \
    }

DEFINE_ABS_SUM(abs_sum_f32, float)
DEFINE_ABS_SUM(abs_sum_f64, double)

PyDoc_STRVAR(abs_sums_doc,
"abs_sums(values, chunk, out)\n"
"--\n\n"
"Per packet of ``chunk`` elements of the flat float32 or float64 buffer ``values`` (the last packet shorter), the\n"
"sum of |x| into the float64 array ``out`` (at least ceil(n / chunk) long), in one pass with the GIL released.\n"
"Sums are taken in double; for float32 data each is then rounded to float32, so a sum past float32's range is\n"
"+inf, as numpy's float32 row sums are (the policy protects such a packet). NaN stays NaN. Returns the packets.");

static PyObject *abs_sums(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "abs_sums takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t chunk = PyLong_AsSsize_t(args[1]);
    if (chunk == -1 && PyErr_Occurred())
        return NULL;
    if (chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "abs_sums: chunk must be > 0");
        return NULL;
    }
    Py_buffer vv, vo;
    if (PyObject_GetBuffer(args[0], &vv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &vo, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vv);
        return NULL;
    }
    PyObject *result = NULL;
    const char *fv = vv.format ? vv.format : "B", *fo = vo.format ? vo.format : "B";
    int f32 = strcmp(fv, "f") == 0, f64 = strcmp(fv, "d") == 0;
    if ((!f32 && !f64) || strcmp(fo, "d") != 0) {
        PyErr_Format(PyExc_TypeError, "abs_sums: values must be float32 or float64 (got format '%s'), out float64 "
                     "(got '%s')", fv, fo);
        goto done;
    }
    Py_ssize_t n = vv.len / vv.itemsize, npk = (n + chunk - 1) / chunk;
    if (vo.len / (Py_ssize_t)sizeof(double) < npk) {
        PyErr_Format(PyExc_ValueError, "abs_sums: out has %zd entries, %zd packets need them",
                     vo.len / (Py_ssize_t)sizeof(double), npk);
        goto done;
    }
    double *out = (double *)vo.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < npk; k++) {
        Py_ssize_t a = k * chunk, b = a + chunk < n ? a + chunk : n;
        out[k] = f32 ? (double)(float)abs_sum_f32((const float *)vv.buf + a, b - a)
                     : abs_sum_f64((const double *)vv.buf + a, b - a);
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(npk);
done:
    PyBuffer_Release(&vo);
    PyBuffer_Release(&vv);
    return result;
}

PyDoc_STRVAR(packet_tag_doc,
"packet_tag(key, header, payload)\n"
"--\n\n"
"The keyed tag (_tag.h: NH then SipHash-2-4, under the 16-byte ``key``) of a datagram whose header is the\n"
"first 48 bytes of "
"``header`` (its tag field not covered) and whose payload is ``payload``, as an int: host.wire.packet_tag at C\n"
"speed, for the endpoint's Python paths.");

static PyObject *packet_tag(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "packet_tag takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    if (args[0] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "packet_tag: no key");
        return NULL;
    }
    PyObject *sched;
    if (schedule_of(args[0], &sched) < 0)
        return NULL;
    Py_buffer vh, vp;
    if (PyObject_GetBuffer(args[1], &vh, PyBUF_SIMPLE) < 0) {
        Py_DECREF(sched);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &vp, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&vh);
        Py_DECREF(sched);
        return NULL;
    }
    PyObject *result = NULL;
    if (vh.len < HEADER_LEN)
        PyErr_Format(PyExc_ValueError, "packet_tag: a header has %d bytes, got %zd", HEADER_LEN, vh.len);
    else if (vp.len > NH_MAX_PAYLOAD)
        PyErr_Format(PyExc_ValueError, "packet_tag: a payload has at most %d bytes, got %zd", NH_MAX_PAYLOAD, vp.len);
    else
        result = PyLong_FromUnsignedLongLong(dlcp_tag(schedule_bytes(sched), vh.buf, vp.buf, (size_t)vp.len));
    PyBuffer_Release(&vp);
    PyBuffer_Release(&vh);
    Py_DECREF(sched);
    return result;
}


/* ---- ack_scan: the sender's general ACK (with a bitmap) over the transfer's per-seq arrays ---------------------
 *
 * Why: on paths that reorder (per-packet spraying) or drop eligible packets, most ACKs carry a bitmap, and the
 * Python ``sender.on_ack`` spent two dozen numpy calls on each (unpack the bitmap, find the new seqs, fancy-index
 * five arrays, judge losses): the largest share of a demo worker's GIL-held time. This is the same arithmetic in one
 * pass over the ACK's range. ``sender.on_ack_native`` keeps everything that touches Python objects (the window, the
 * retransmission queue, the RTT sample); tests/host/test_ack_scan.py holds both to the same state on random
 * transfers and ACKs. */

typedef struct {
    const char *name;
    Py_ssize_t itemsize;
    int writable;
} ArraySpec;

static int get_array(PyObject *obj, Py_buffer *view, const ArraySpec *spec, Py_ssize_t need)
{
    if (PyObject_GetBuffer(obj, view, (spec->writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != spec->itemsize || view->len < need * spec->itemsize) {
        PyErr_Format(PyExc_ValueError, "ack_scan: %s must hold %zd items of %zd bytes", spec->name, need,
                     spec->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(ack_scan_doc,
"ack_scan(acked, inflight, queued, retx, eligible, sent_order, sent_time, lengths, bitmap, count, lo, base, total,\n"
"         reo, reorder_pkts)\n"
"--\n\n"
"Apply an ACK of every seq below ``base`` and of the seqs ``base + i`` whose bit i is set in ``bitmap`` (``count``\n"
"bits, MSB first, padding bits 0) to a send's arrays (``lo``: its cum_acked; ``total``: its packets): mark the new\n"
"seqs (sent ones only) acked and not in flight, then judge lost, in ``lo .. min(total, base + count)``, what is in\n"
"flight, unacked, sent more than ``reorder_pkts`` sends and ``reo`` seconds before the newest acked packet (no\n"
"longer in flight; protected ones not yet queued are marked queued). Returns None, changing nothing, for a\n"
"malformed bitmap; else (new packets, their bytes, bytes of them that were in flight, the newest-sent new seq or -1,\n"
"the highest new seq or -1, the new cum_acked, bytes judged lost, [protected seqs to queue], the earliest send\n"
"time of a new packet never resent or inf).");

static PyObject *ack_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 15) {
        PyErr_Format(PyExc_TypeError, "ack_scan takes 15 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[9]), lo = PyLong_AsSsize_t(args[10]);
    Py_ssize_t base = PyLong_AsSsize_t(args[11]), total = PyLong_AsSsize_t(args[12]);
    double reo = PyFloat_AsDouble(args[13]);
    long long reorder_pkts = PyLong_AsLongLong(args[14]);
    if (PyErr_Occurred())
        return NULL;
    if (count < 0 || lo < 0 || base < 0 || total < 0 || lo > total || base + count > total) {
        PyErr_SetString(PyExc_ValueError, "ack_scan: need 0 <= lo <= total, 0 <= count, base + count <= total");
        return NULL;
    }
    static const ArraySpec specs[8] = {
        {"acked", 1, 1}, {"inflight", 1, 1}, {"queued", 1, 1}, {"retx", 1, 0}, {"eligible", 1, 0},
        {"sent_order", 8, 0}, {"sent_time", 8, 0}, {"lengths", 8, 0},
    };
    Py_buffer v[8], vb;
    int got = 0;
    PyObject *result = NULL, *prot = NULL;
    for (; got < 8; got++)
        if (get_array(args[got], &v[got], &specs[got], total) < 0)
            goto done;
    if (PyObject_GetBuffer(args[8], &vb, PyBUF_SIMPLE) < 0)
        goto done;
    got++;
    const uint8_t *bm = (const uint8_t *)vb.buf;
    /* a malformed bitmap changes nothing: the caller names the field (wire.unpack_bitmap) */
    if (vb.len != (count + 7) / 8 || (count % 8 && (bm[count / 8] & (0xFF >> (count % 8))))) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    uint8_t *acked = (uint8_t *)v[0].buf, *inflight = (uint8_t *)v[1].buf, *queued = (uint8_t *)v[2].buf;
    const uint8_t *retx = (const uint8_t *)v[3].buf, *elig = (const uint8_t *)v[4].buf;
    const int64_t *order = (const int64_t *)v[5].buf, *lens = (const int64_t *)v[7].buf;
    const double *stime = (const double *)v[6].buf;

    long long n_new = 0, nbytes = 0, infl_bytes = 0, lost_bytes = 0;
    Py_ssize_t newest = -1, top = -1;
    int64_t newest_order = -1;
    double first_clean = INFINITY;
    /* the new seqs, ascending: unacked below base (from lo), then the bitmap's */
    Py_ssize_t hi = base + count;
    for (Py_ssize_t s = lo < base ? lo : base; s < hi; s++) {
        if (s < base) {
            if (s < lo)
                continue;
        } else if (!(bm[(s - base) >> 3] & (0x80 >> ((s - base) & 7)))) {
            continue;
        }
        if (acked[s] || order[s] < 0)
            continue;
        acked[s] = 1;
        n_new++;
        nbytes += lens[s];
        if (inflight[s]) {
            inflight[s] = 0;
            infl_bytes += lens[s];
        }
        if (order[s] > newest_order) {
            newest_order = order[s];
            newest = s;
        }
        top = s;
        if (!retx[s] && stime[s] < first_clean)
            first_clean = stime[s];
    }
    prot = PyList_New(0);
    if (prot == NULL)
        goto done;
    if (n_new) {
        /* loss detection by send order and time over lo .. min(total, base + count) */
        Py_ssize_t end = hi < total ? hi : total;
        double cutoff = stime[newest] - reo;
        int64_t before = newest_order - reorder_pkts;
        for (Py_ssize_t s = lo; s < end; s++) {
            if (!inflight[s] || acked[s] || order[s] >= before || stime[s] > cutoff)
                continue;
            inflight[s] = 0;
            lost_bytes += lens[s];
            if (!elig[s] && !queued[s]) {
                queued[s] = 1;
                PyObject *k = PyLong_FromSsize_t(s);
                if (k == NULL || PyList_Append(prot, k) < 0) {
                    Py_XDECREF(k);
                    goto done;
                }
                Py_DECREF(k);
            }
        }
    }
    Py_ssize_t cum = lo;
    while (cum < total && acked[cum])
        cum++;
    result = Py_BuildValue("(LLLnnnLOd)", n_new, nbytes, infl_bytes, newest, top, cum, lost_bytes, prot, first_clean);
done:
    Py_XDECREF(prot);
    for (int k = 0; k < got && k < 8; k++)
        PyBuffer_Release(&v[k]);
    if (got > 8)
        PyBuffer_Release(&vb);
    return result;
}

/* The I/O thread's wake-up timer: a CLOCK_MONOTONIC timerfd (Python 3.11's os module has none). A caller that sent
 * a whole transfer itself arms it for the transfer's first deadline (its RTO) instead of waking the sleeping I/O
 * thread, which sleeps in select on it with its socket: the DONE that normally answers the send wakes the thread
 * once, and the timer only if that answer does not come in time. */
PyDoc_STRVAR(timer_fd_doc, "timer_fd() -> fd: a non-blocking, close-on-exec CLOCK_MONOTONIC timerfd, disarmed.");

static PyObject *timer_fd(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(fd);
}

PyDoc_STRVAR(timer_arm_doc,
             "timer_arm(fd, when): arm timerfd ``fd`` to expire once at ``when`` (seconds on time.monotonic()'s "
             "clock, CLOCK_MONOTONIC; a time already past expires at once), or disarm it when ``when`` <= 0.");

static PyObject *timer_arm(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "timer_arm(fd, when) takes 2 arguments");
        return NULL;
    }
    (void)self;
    long fd = PyLong_AsLong(args[0]);
    double when = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (!isfinite(when)) {
        PyErr_SetString(PyExc_ValueError, "timer_arm: when must be finite");
        return NULL;
    }
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (when > 0) {
        double sec = floor(when);
        its.it_value.tv_sec = (time_t)sec;
        its.it_value.tv_nsec = (long)((when - sec) * 1e9);
        if (its.it_value.tv_nsec >= 1000000000L)
            its.it_value.tv_nsec = 999999999L;
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1; /* (all zero would disarm) */
    }
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "timer_arm: fd out of range");
        return NULL;
    }
    if (timerfd_settime((int)fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"packet_tag", (PyCFunction)(void (*)(void))packet_tag, METH_FASTCALL, packet_tag_doc},
    {"send_run", (PyCFunction)(void (*)(void))send_run, METH_FASTCALL, send_run_doc},
    {"abs_sums", (PyCFunction)(void (*)(void))abs_sums, METH_FASTCALL, abs_sums_doc},
    {"ack_scan", (PyCFunction)(void (*)(void))ack_scan, METH_FASTCALL, ack_scan_doc},
    {"timer_fd", (PyCFunction)timer_fd, METH_NOARGS, timer_fd_doc},
    {"timer_arm", (PyCFunction)(void (*)(void))timer_arm, METH_FASTCALL, timer_arm_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_txlane",
    "The DLCP send fast lane: one C call builds and sends a GSO run of data packets.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__txlane(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "HEADER_LEN", HEADER_LEN) < 0 || PyModule_AddIntConstant(m, "MAX_RUN", MAX_RUN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
