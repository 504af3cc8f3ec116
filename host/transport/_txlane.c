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
#include <stdlib.h>
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

/* ---- mag_classes: the policy's magnitude octiles in one native pass ---------------------------------------------
 *
 * Why: a large send's classification (host.policy: per-packet mean |x|, then the octile of each mean among all of
 * them) took a dozen numpy calls after the sums (partition, lerp, searchsorted, clip, boolean masks), each taking
 * the GIL back from the I/O thread: about a quarter of a 16 MiB all-reduce's caller-thread CPU on veth. Here the
 * whole of it runs with the GIL released, and gives what packet_mean_abs + magnitude_classes give, bit for bit
 * (tests/host/test_policy.py): the same sums (abs_sum_*), the same float64 division, the same order statistics
 * (a selection instead of numpy's partition: order statistics are unique values), numpy's linear interpolation
 * (_lerp) and numpy's binary search (searchsorted, side="left", with its narrowing from the previous key). */

static inline void dswap(double *a, Py_ssize_t i, Py_ssize_t j)
{
    double t = a[i];
    a[i] = a[j];
    a[j] = t;
}

static int dcmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* a[k] becomes the order statistic k of a[lo:hi] (no NaN), smaller-or-equal values before it, larger-or-equal after:
 * Hoare's selection with a median-of-three pivot, a sort of the rest past 64 rounds (no quadratic inputs) */
static void dselect(double *a, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t k)
{
    for (int round = 0; hi - lo > 1; round++) {
        if (round == 64) {
            qsort(a + lo, (size_t)(hi - lo), sizeof(double), dcmp);
            return;
        }
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo]) dswap(a, mid, lo);
        if (a[hi - 1] < a[lo]) dswap(a, hi - 1, lo);
        if (a[hi - 1] < a[mid]) dswap(a, hi - 1, mid);
        double piv = a[mid];
        Py_ssize_t i = lo, j = hi - 1;
        while (i <= j) {
            while (a[i] < piv) i++;
            while (a[j] > piv) j--;
            if (i <= j) {
                dswap(a, i, j);
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j + 1;
        else if (k >= i)
            lo = i;
        else
            return;  /* a[j+1 .. i-1] all equal the pivot */
    }
}

/* policy.octile_edges over the ``n`` (> 0) finite values ``a`` (reordered) */
static void octile_edges_c(double *a, Py_ssize_t n, double edges[7])
{
    Py_ssize_t lo[7], hi[7], want[14];
    double t[7];
    for (int k = 0; k < 7; k++) {
        double pos = ((double)(k + 1) / 8.0) * (double)(n - 1);
        lo[k] = (Py_ssize_t)floor(pos);
        hi[k] = lo[k] + 1 < n - 1 ? lo[k] + 1 : n - 1;
        t[k] = pos - (double)lo[k];
        want[2 * k] = lo[k];
        want[2 * k + 1] = hi[k];
    }
    /* ascending already (lo[k] <= hi[k] <= lo[k+1] + 1, and hi[k] <= lo[k+1] unless lo[k+1] == lo[k]): select each
     * in the part after the previous one */
    Py_ssize_t from = 0, prev = -1;
    for (int w = 0; w < 14; w++) {
        Py_ssize_t p = want[w];
        if (p == prev)
            continue;
        if (p < prev) {  /* (hi[k] > lo[k+1]: that statistic is selected already, before prev) */
            continue;
        }
        dselect(a, from, n, p);
        from = p + 1;
        prev = p;
    }
    for (int k = 0; k < 7; k++) {
        double x = a[lo[k]], y = a[hi[k]], diff = y - x;
        edges[k] = t[k] >= 0.5 ? y - diff * (1 - t[k]) : x + diff * t[k];
    }
}

/* ---- classify_packets: the default policy's whole verdict in one native pass ------------------------------------
 *
 * Why: a send's classification on the caller's thread (host.policy.LayerMagnitudePolicy.classify) was, after the
 * means and classes (mag_classes), Python's octile edges for a few dozen packets or numpy's argsort, cumsum and
 * masks for more: about 75 us of a 60-packet segment's send set-up, hot, and twice that on a cold cache. Here the
 * classes and the drop-eligible packets come out of one call with the GIL released, bit for bit what the Python
 * functions give (tests/host/test_policy.py): mag_classes's means and classes, then policy.eligible_smallest's
 * rule: the finite means in a stable ascending order (ties by position), eligible while the elements so far fit
 * floor(loss_bound * elements + 1e-9). */

typedef struct {
    double m;
    Py_ssize_t i;
} mean_at;

static int mean_at_cmp(const void *x, const void *y)
{
    const mean_at *a = x, *b = y;
    if (a->m != b->m)
        return (a->m > b->m) - (a->m < b->m);
    return (a->i > b->i) - (a->i < b->i);
}

/* means (+inf where not finite) and octile classes of the packets of ``chunk`` elements of ``vals`` (n elements,
 * npk packets); ``tmp``: npk doubles of scratch */
static void means_and_classes(const void *vals, int f32, Py_ssize_t n, Py_ssize_t chunk, Py_ssize_t npk,
                              double *means, uint8_t *cls, double *tmp)
{
    Py_ssize_t nfin = 0;
    for (Py_ssize_t k = 0; k < npk; k++) {
        Py_ssize_t a = k * chunk, b = a + chunk < n ? a + chunk : n;
        double s = f32 ? (double)(float)abs_sum_f32((const float *)vals + a, b - a)
                       : abs_sum_f64((const double *)vals + a, b - a);
        double m = s / (double)(b - a);
        if (!isfinite(m))
            m = INFINITY;
        else
            tmp[nfin++] = m;
        means[k] = m;
    }
    if (nfin == 0) {
        memset(cls, 7, (size_t)npk);
        return;
    }
    double edges[7];
    octile_edges_c(tmp, nfin, edges);
    /* numpy's searchsorted(edges, means, side="left"): a binary search narrowed from the previous key's */
    Py_ssize_t min_idx = 0, max_idx = 7;
    double last = means[0];
    for (Py_ssize_t k = 0; k < npk; k++) {
        double key = means[k];
        if (last < key) {
            max_idx = 7;
        } else {
            min_idx = 0;
            max_idx = max_idx < 7 ? max_idx + 1 : 7;
        }
        last = key;
        while (min_idx < max_idx) {
            Py_ssize_t mid = min_idx + ((max_idx - min_idx) >> 1);
            if (edges[mid] < key)
                min_idx = mid + 1;
            else
                max_idx = mid;
        }
        cls[k] = (uint8_t)min_idx;
    }
}

PyDoc_STRVAR(mag_classes_doc,
"mag_classes(values, chunk, means, classes)\n"
"--\n\n"
"host.policy's packet_mean_abs and magnitude_classes in one call with the GIL released: per packet of ``chunk``\n"
"elements of the flat float32 or float64 buffer ``values`` (the last packet shorter, none empty), its mean |x| into\n"
"the float64 array ``means`` (+inf where not finite) and its octile class 0..7 among all finite means into the\n"
"uint8 array ``classes`` (7 for all when none is finite). Bit for bit what the Python functions give with the\n"
"abs_sums kernel. Returns the packets.");

static PyObject *mag_classes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "mag_classes takes 4 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t chunk = PyLong_AsSsize_t(args[1]);
    if (chunk == -1 && PyErr_Occurred())
        return NULL;
    if (chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "mag_classes: chunk must be > 0");
        return NULL;
    }
    Py_buffer vv, vm, vc;
    if (PyObject_GetBuffer(args[0], &vv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &vm, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vv);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &vc, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vm);
        PyBuffer_Release(&vv);
        return NULL;
    }
    PyObject *result = NULL;
    double *tmp = NULL;
    const char *fv = vv.format ? vv.format : "B", *fm = vm.format ? vm.format : "B", *fc = vc.format ? vc.format : "B";
    int f32 = strcmp(fv, "f") == 0, f64 = strcmp(fv, "d") == 0;
    if ((!f32 && !f64) || strcmp(fm, "d") != 0 || strcmp(fc, "B") != 0) {
        PyErr_Format(PyExc_TypeError, "mag_classes: values must be float32 or float64 (got format '%s'), means "
                     "float64 (got '%s'), classes uint8 (got '%s')", fv, fm, fc);
        goto done;
    }
    Py_ssize_t n = vv.len / vv.itemsize, npk = (n + chunk - 1) / chunk;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "mag_classes: no values");
        goto done;
    }
    if (vm.len / (Py_ssize_t)sizeof(double) != npk || vc.len != npk) {
        PyErr_Format(PyExc_ValueError, "mag_classes: means has %zd entries and classes %zd, %zd packets need them",
                     vm.len / (Py_ssize_t)sizeof(double), vc.len, npk);
        goto done;
    }
    if ((tmp = PyMem_RawMalloc((size_t)npk * sizeof(double))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *means = (double *)vm.buf;
    uint8_t *cls = (uint8_t *)vc.buf;
    Py_BEGIN_ALLOW_THREADS
    means_and_classes(vv.buf, f32, n, chunk, npk, means, cls, tmp);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(npk);
done:
    PyMem_RawFree(tmp);
    PyBuffer_Release(&vc);
    PyBuffer_Release(&vm);
    PyBuffer_Release(&vv);
    return result;
}

PyDoc_STRVAR(classify_packets_doc,
"classify_packets(values, chunk, loss_bound, classes, eligible)\n"
"--\n\n"
"host.policy's LayerMagnitudePolicy verdict on packets of ``chunk`` elements of the flat float32 or float64 buffer\n"
"``values`` (the last packet shorter, none empty), in one call with the GIL released: each packet's magnitude class\n"
"into the uint8 array ``classes`` (as mag_classes) and into the bool array ``eligible`` whether it is drop-eligible\n"
"(policy.eligible_smallest: the smallest finite means, ties by position, while their elements fit\n"
"floor(loss_bound * elements + 1e-9)). Returns the number of eligible packets.");

static PyObject *classify_packets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "classify_packets takes 5 arguments, got %zd", nargs);
        return NULL;
    }
    Py_ssize_t chunk = PyLong_AsSsize_t(args[1]);
    if (chunk == -1 && PyErr_Occurred())
        return NULL;
    double lb = PyFloat_AsDouble(args[2]);
    if (lb == -1.0 && PyErr_Occurred())
        return NULL;
    if (chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "classify_packets: chunk must be > 0");
        return NULL;
    }
    if (!(lb >= 0.0 && lb < 1.0)) {
        PyErr_Format(PyExc_ValueError, "classify_packets: loss_bound must be in [0, 1), got %R", args[2]);
        return NULL;
    }
    Py_buffer vv, vc, ve;
    if (PyObject_GetBuffer(args[0], &vv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[3], &vc, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vv);
        return NULL;
    }
    if (PyObject_GetBuffer(args[4], &ve, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vc);
        PyBuffer_Release(&vv);
        return NULL;
    }
    PyObject *result = NULL;
    double *means = NULL, *tmp = NULL;
    mean_at *order = NULL;
    const char *fv = vv.format ? vv.format : "B", *fc = vc.format ? vc.format : "B", *fe = ve.format ? ve.format : "B";
    int f32 = strcmp(fv, "f") == 0, f64 = strcmp(fv, "d") == 0;
    if ((!f32 && !f64) || strcmp(fc, "B") != 0 || strcmp(fe, "?") != 0) {
        PyErr_Format(PyExc_TypeError, "classify_packets: values must be float32 or float64 (got format '%s'), classes "
                     "uint8 (got '%s'), eligible bool (got '%s')", fv, fc, fe);
        goto done;
    }
    Py_ssize_t n = vv.len / vv.itemsize, npk = (n + chunk - 1) / chunk;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "classify_packets: no values");
        goto done;
    }
    if (vc.len != npk || ve.len != npk) {
        PyErr_Format(PyExc_ValueError, "classify_packets: classes has %zd entries and eligible %zd, %zd packets need "
                     "them", vc.len, ve.len, npk);
        goto done;
    }
    means = PyMem_RawMalloc((size_t)npk * sizeof(double));
    tmp = PyMem_RawMalloc((size_t)npk * sizeof(double));
    order = PyMem_RawMalloc((size_t)npk * sizeof(mean_at));
    if (means == NULL || tmp == NULL || order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *cls = (uint8_t *)vc.buf;
    char *elig = (char *)ve.buf;
    Py_ssize_t n_elig = 0;
    Py_BEGIN_ALLOW_THREADS
    means_and_classes(vv.buf, f32, n, chunk, npk, means, cls, tmp);
    memset(elig, 0, (size_t)npk);
    double prod = lb * (double)n;  /* (-ffp-contract=off: rounded as Python's lb * n, then + 1e-9) */
    double budget = floor(prod + 1e-9);
    if (budget >= 1.0) {
        Py_ssize_t nfin = 0;
        for (Py_ssize_t k = 0; k < npk; k++)
            if (isfinite(means[k])) {
                order[nfin].m = means[k];
                order[nfin].i = k;
                nfin++;
            }
        qsort(order, (size_t)nfin, sizeof(mean_at), mean_at_cmp);
        double used = 0;
        for (Py_ssize_t j = 0; j < nfin; j++) {
            Py_ssize_t k = order[j].i, a = k * chunk, b = a + chunk < n ? a + chunk : n;
            used += (double)(b - a);
            if (used > budget)
                break;
            elig[k] = 1;
            n_elig++;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(n_elig);
done:
    PyMem_RawFree(order);
    PyMem_RawFree(tmp);
    PyMem_RawFree(means);
    PyBuffer_Release(&ve);
    PyBuffer_Release(&vc);
    PyBuffer_Release(&vv);
    return result;
}

/* ---- in_order_headers: chunking.write_headers in one pass ----------------------------------------------------
 *
 * The per-packet words of an in-order plan's headers (seq = position): the template, then the flags (LAST on the
 * transfer's last seq), the magnitude class's bits, the seq, the byte offset and the element count, big-endian.
 * numpy's version is eight whole-array operations over a structured array (about 1 ms per 1,000 headers on a cold
 * cache); tests/host/test_chunking.py holds the two byte for byte. HEADER_LAYOUT (below) is where the words lie;
 * chunking.py uses this only while it matches host.wire's layout. */

#define HL_FLAGS 1
#define HL_MAG 2
#define HL_MAG_SHIFT 2
#define HL_SEQ 20
#define HL_OFFSET 28
#define HL_COUNT 32
#define HL_LAST 0x08

PyDoc_STRVAR(in_order_headers_doc,
"in_order_headers(headers, template, lo, hi, total, chunk, itemsize, nelems, mag)\n"
"--\n\n"
"Write the headers of seqs ``lo..hi-1`` of an in-order plan of ``total`` packets of ``chunk`` elements of\n"
"``itemsize`` bytes (``nelems`` in all) into ``headers`` (the plan's ``total`` x 48 bytes): each the 48-byte\n"
"``template`` with its flags (LAST on seq total-1), magnitude class (``mag``: hi-lo uint8, or None for 0), seq,\n"
"byte offset and element count set. chunking.write_headers's bytes.");

static PyObject *in_order_headers(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "in_order_headers takes 9 arguments, got %zd", nargs);
        return NULL;
    }
    long long lo = PyLong_AsLongLong(args[2]), hi = PyLong_AsLongLong(args[3]), total = PyLong_AsLongLong(args[4]);
    long long chunk = PyLong_AsLongLong(args[5]), itemsize = PyLong_AsLongLong(args[6]);
    long long nelems = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    if (lo < 0 || hi < lo || hi > total || chunk < 1 || chunk > 0xFFFF || itemsize < 1 || nelems < 0
        || (total - 1) * chunk * itemsize > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "in_order_headers: seqs %lld..%lld of %lld packets of %lld x %lld bytes do not "
                     "make a plan", lo, hi, total, chunk, itemsize);
        return NULL;
    }
    Py_buffer vh, vt, vm = {0};
    if (PyObject_GetBuffer(args[0], &vh, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &vt, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&vh);
        return NULL;
    }
    PyObject *result = NULL;
    if (args[8] != Py_None && PyObject_GetBuffer(args[8], &vm, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (vh.len != total * HEADER_LEN || vt.len != HEADER_LEN || (vm.obj != NULL && vm.len != hi - lo)) {
        PyErr_Format(PyExc_ValueError, "in_order_headers: headers hold %zd bytes (%lld wanted), the template %zd "
                     "(%d), mag %zd (%lld)", vh.len, total * HEADER_LEN, vt.len, HEADER_LEN,
                     vm.obj != NULL ? vm.len : (Py_ssize_t)0, hi - lo);
        goto done;
    }
    const uint8_t *tp = vt.buf, *mag = vm.obj != NULL ? vm.buf : NULL;
    for (long long i = 0; mag != NULL && i < hi - lo; i++)  /* (checked before anything is written) */
        if (mag[i] > 7) {
            PyErr_Format(PyExc_ValueError, "magnitude classes are 0..7, got %d (seq %lld)", mag[i], lo + i);
            goto done;
        }
    uint8_t *h = (uint8_t *)vh.buf + lo * HEADER_LEN;
    for (long long s = lo; s < hi; s++, h += HEADER_LEN) {
        memcpy(h, tp, HEADER_LEN);
        h[HL_FLAGS] = s == total - 1 ? HL_LAST : 0;
        if (mag != NULL)
            h[HL_MAG] |= (uint8_t)(mag[s - lo] << HL_MAG_SHIFT);
        long long off = s * chunk, cnt = nelems - off;
        if (cnt > chunk)
            cnt = chunk;
        if (cnt < 0)
            cnt = 0;
        uint32_t seq = (uint32_t)s, boff = (uint32_t)(off * itemsize);
        h[HL_SEQ] = seq >> 24; h[HL_SEQ + 1] = seq >> 16; h[HL_SEQ + 2] = seq >> 8; h[HL_SEQ + 3] = seq;
        h[HL_OFFSET] = boff >> 24; h[HL_OFFSET + 1] = boff >> 16; h[HL_OFFSET + 2] = boff >> 8; h[HL_OFFSET + 3] = boff;
        h[HL_COUNT] = (uint8_t)(cnt >> 8);
        h[HL_COUNT + 1] = (uint8_t)cnt;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (vm.obj != NULL)
        PyBuffer_Release(&vm);
    PyBuffer_Release(&vt);
    PyBuffer_Release(&vh);
    return result;
}

/* ---- classified_plan: chunking.plan_packets's arrays in one pass ---------------------------------------------
 *
 * A plan with the policy's classes: seqs in the wire's order (the drop-eligible positions first, then the
 * protected ones, each in position order), every header the template with its per-packet words, and the plan's
 * per-seq arrays. numpy's builder (chunking._plan_arrays) is about twenty whole-array calls, Python's for a few
 * packets (_plan_lists) a loop each: 40-90 us of a 60-packet send's set-up; tests/host/test_chunking.py holds all
 * three equal, byte for byte. */

#define HL_ELIGIBLE 0x01

PyDoc_STRVAR(classified_plan_doc,
"classified_plan(headers, offsets, lengths, eligible, tos, template, chunk, itemsize, nelems, elig_pos, mag_pos,\n"
"                tos_protected, tos_eligible)\n"
"--\n\n"
"Fill a plan of ``len(offsets)`` packets of ``chunk`` elements of ``itemsize`` bytes (``nelems`` in all) whose\n"
"position k is drop-eligible when ``elig_pos[k]`` (bool, or None: none) and of magnitude class ``mag_pos[k]``\n"
"(uint8, or None: 0): per seq, in the wire's order, its header (the 48-byte ``template`` with flags, class, seq,\n"
"byte offset and count) into ``headers``, its byte offset and length (int64) into ``offsets`` and ``lengths``,\n"
"whether it is eligible into ``eligible`` (bool) and its TOS byte into ``tos`` (uint8). chunking.plan_packets's\n"
"arrays.");

static PyObject *classified_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "classified_plan takes 13 arguments, got %zd", nargs);
        return NULL;
    }
    long long chunk = PyLong_AsLongLong(args[6]), itemsize = PyLong_AsLongLong(args[7]);
    long long nelems = PyLong_AsLongLong(args[8]);
    long tos_p = PyLong_AsLong(args[11]), tos_e = PyLong_AsLong(args[12]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer b[8];
    int got = 0, nbuf = 8;
    PyObject *result = NULL;
    memset(b, 0, sizeof b);
    static const int writable[8] = {1, 1, 1, 1, 1, 0, 0, 0};
    static const int argi[8] = {0, 1, 2, 3, 4, 5, 9, 10};
    for (; got < nbuf; got++) {
        PyObject *o = args[argi[got]];
        if (o == Py_None && got >= 6)
            continue;
        if (PyObject_GetBuffer(o, &b[got], (writable[got] ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
    }
    long long total = b[1].len / 8;
    if (chunk < 1 || chunk > 0xFFFF || itemsize < 1 || nelems < 0 || total != (nelems > 0 ? (nelems + chunk - 1) / chunk : 1)
        || (total - 1) * chunk * itemsize > 0xFFFFFFFFLL || tos_p < 0 || tos_p > 255 || tos_e < 0 || tos_e > 255) {
        PyErr_Format(PyExc_ValueError, "classified_plan: %lld packets of %lld x %lld bytes (%lld elements) do not make "
                     "a plan", total, chunk, itemsize, nelems);
        goto done;
    }
    if (b[0].len != total * HEADER_LEN || b[2].len != total * 8 || b[3].len != total || b[4].len != total
        || b[5].len != HEADER_LEN || (b[6].obj != NULL && b[6].len != total) || (b[7].obj != NULL && b[7].len != total)) {
        PyErr_Format(PyExc_ValueError, "classified_plan: the arrays do not match %lld packets (headers %zd bytes, "
                     "lengths %zd, eligible %zd, tos %zd, template %zd, elig_pos %zd, mag_pos %zd)", total, b[0].len,
                     b[2].len, b[3].len, b[4].len, b[5].len, b[6].obj != NULL ? b[6].len : (Py_ssize_t)0,
                     b[7].obj != NULL ? b[7].len : (Py_ssize_t)0);
        goto done;
    }
    const char *ep = b[6].obj != NULL ? b[6].buf : NULL;
    const uint8_t *mag = b[7].obj != NULL ? b[7].buf : NULL, *tp = b[5].buf;
    long long n_elig = 0;
    for (long long k = 0; k < total; k++) {
        if (mag != NULL && mag[k] > 7) {
            PyErr_Format(PyExc_ValueError, "magnitude classes are 0..7, got %d (position %lld)", mag[k], k);
            goto done;
        }
        n_elig += ep != NULL && ep[k];
    }
    if (n_elig >= total) {
        PyErr_Format(PyExc_ValueError, "classified_plan: all %lld packets drop-eligible", total);
        goto done;
    }
    uint8_t *h = b[0].buf, *el = b[3].buf, *tos = b[4].buf;
    int64_t *off = b[1].buf, *len = b[2].buf;
    long long seq = 0;
    for (int pass = 0; pass < 2; pass++)  /* eligible positions, then protected ones */
        for (long long k = 0; k < total; k++) {
            int e = ep != NULL && ep[k];
            if (e != (pass == 0))
                continue;
            long long cnt = nelems - k * chunk;
            if (cnt > chunk)
                cnt = chunk;
            if (cnt < 0)
                cnt = 0;
            uint32_t s32 = (uint32_t)seq, boff = (uint32_t)(k * chunk * itemsize);
            memcpy(h, tp, HEADER_LEN);
            h[HL_FLAGS] = (uint8_t)((e ? HL_ELIGIBLE : 0) | (seq == total - 1 ? HL_LAST : 0));
            if (mag != NULL)
                h[HL_MAG] |= (uint8_t)(mag[k] << HL_MAG_SHIFT);
            h[HL_SEQ] = s32 >> 24; h[HL_SEQ + 1] = s32 >> 16; h[HL_SEQ + 2] = s32 >> 8; h[HL_SEQ + 3] = s32;
            h[HL_OFFSET] = boff >> 24; h[HL_OFFSET + 1] = boff >> 16; h[HL_OFFSET + 2] = boff >> 8;
            h[HL_OFFSET + 3] = boff;
            h[HL_COUNT] = (uint8_t)(cnt >> 8);
            h[HL_COUNT + 1] = (uint8_t)cnt;
            off[seq] = k * chunk * itemsize;
            len[seq] = cnt * itemsize;
            el[seq] = (uint8_t)e;
            tos[seq] = (uint8_t)(e ? tos_e : tos_p);
            h += HEADER_LEN;
            seq++;
        }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < nbuf; i++)
        if (b[i].obj != NULL)
            PyBuffer_Release(&b[i]);
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
    {"mag_classes", (PyCFunction)(void (*)(void))mag_classes, METH_FASTCALL, mag_classes_doc},
    {"classify_packets", (PyCFunction)(void (*)(void))classify_packets, METH_FASTCALL, classify_packets_doc},
    {"in_order_headers", (PyCFunction)(void (*)(void))in_order_headers, METH_FASTCALL, in_order_headers_doc},
    {"classified_plan", (PyCFunction)(void (*)(void))classified_plan, METH_FASTCALL, classified_plan_doc},
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
    /* (byte offsets of flags, mag_class's byte, its shift, seq, offset, count, the LAST and DROP_ELIGIBLE flags) */
    PyObject *layout = Py_BuildValue("(iiiiiiii)", HL_FLAGS, HL_MAG, HL_MAG_SHIFT, HL_SEQ, HL_OFFSET, HL_COUNT, HL_LAST,
                                     HL_ELIGIBLE);
    if (layout == NULL || PyModule_AddObject(m, "HEADER_LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "HEADER_LEN", HEADER_LEN) < 0 || PyModule_AddIntConstant(m, "MAX_RUN", MAX_RUN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
