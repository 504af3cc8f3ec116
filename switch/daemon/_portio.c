/* switch.daemon._portio: batched frame receive and send on the switch daemon's AF_PACKET port sockets, in C.
 *
 * Why: the daemon's packet thread spent more of each packet in the per-frame socket calls (a Python
 * ``recvfrom`` and ``send``, their argument parsing, address tuples and exceptions) than in the P4 pipeline.
 * Python has no ``recvmmsg``/``sendmmsg``; this module makes one system call per batch in each direction, with
 * the GIL released while the kernel works, so the gRPC threads run meanwhile.
 *
 * ``recv_frames(fd, buf, slot, budget, port, out)``: one ``recvmmsg(MSG_DONTWAIT)`` of up to ``budget`` frames
 * into ``buf`` (a writable buffer of at least ``budget * slot`` bytes, one slot per frame); every frame that did
 * not come from this host (``sll_pkttype != PACKET_OUTGOING``) is appended to the list ``out`` as the tuple
 * ``(port, bytes)``, the shape the packet loop hands the pipeline.  Returns the number appended.  Nothing to
 * read (EAGAIN) or an interrupted call returns 0; any other socket error raises OSError.  A frame longer than
 * ``slot`` (MSG_TRUNC) is not delivered and counts in the second item of the result.
 *
 * ``send_frames(fd, frames)``: sends each ``bytes`` of the list ``frames`` as one frame with ``sendmmsg``
 * (64 per call).  A frame the kernel refuses (full buffer, too large, interface down) is skipped and the rest
 * are still sent.  Returns the list of the indices that were refused (normally empty).
 *
 * tests/switch/test_portio.py runs both against the plain socket calls on a real veth pair.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define MAX_BATCH 64

static PyObject *recv_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "recv_frames(fd, buf, slot, budget, port, out) takes 6 arguments");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    Py_ssize_t slot = PyLong_AsSsize_t(args[2]);
    Py_ssize_t budget = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *port = args[4], *out = args[5];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "recv_frames: out must be a list");
        return NULL;
    }
    if (budget < 1 || budget > MAX_BATCH || slot < 64) {
        PyErr_Format(PyExc_ValueError, "recv_frames: budget must be 1..%d and slot >= 64", MAX_BATCH);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (view.len < budget * slot) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "recv_frames: buffer of %zd bytes cannot hold %zd slots of %zd",
                     view.len, budget, slot);
        return NULL;
    }
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    struct sockaddr_ll addr[MAX_BATCH];
    char *base = view.buf;
    memset(msgs, 0, sizeof(msgs[0]) * (size_t)budget);
    for (Py_ssize_t i = 0; i < budget; i++) {
        iov[i].iov_base = base + i * slot;
        iov[i].iov_len = (size_t)slot;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &addr[i];
        msgs[i].msg_hdr.msg_namelen = sizeof(addr[i]);
    }
    int n, err = 0;
    Py_BEGIN_ALLOW_THREADS
    n = recvmmsg(fd, msgs, (unsigned int)budget, MSG_DONTWAIT, NULL);
    if (n < 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (n < 0) {
        PyBuffer_Release(&view);
        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
            return Py_BuildValue("(ii)", 0, 0);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int got = 0, truncated = 0;
    for (int i = 0; i < n; i++) {
        if (addr[i].sll_pkttype == PACKET_OUTGOING)
            continue;
        if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
            truncated++;
            continue;
        }
        PyObject *data = PyBytes_FromStringAndSize(base + (Py_ssize_t)i * slot, (Py_ssize_t)msgs[i].msg_len);
        if (data == NULL)
            goto fail;
        PyObject *t = PyTuple_Pack(2, port, data);
        Py_DECREF(data);
        if (t == NULL)
            goto fail;
        int r = PyList_Append(out, t);
        Py_DECREF(t);
        if (r < 0)
            goto fail;
        got++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(ii)", got, truncated);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *send_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send_frames(fd, frames) takes 2 arguments");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    PyObject *frames = args[1];
    if (!PyList_Check(frames)) {
        PyErr_SetString(PyExc_TypeError, "send_frames: frames must be a list of bytes");
        return NULL;
    }
    PyObject *refused = PyList_New(0);
    if (refused == NULL)
        return NULL;
    Py_ssize_t total = PyList_GET_SIZE(frames);
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    PyObject *held[MAX_BATCH];
    for (Py_ssize_t start = 0; start < total; start += MAX_BATCH) {
        Py_ssize_t k = total - start;
        if (k > MAX_BATCH)
            k = MAX_BATCH;
        if (start + k > PyList_GET_SIZE(frames))          /* the list shrank under us */
            k = PyList_GET_SIZE(frames) - start;
        if (k <= 0)
            break;
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *f = PyList_GET_ITEM(frames, start + i);
            if (!PyBytes_Check(f)) {
                for (Py_ssize_t j = 0; j < i; j++)
                    Py_DECREF(held[j]);
                Py_DECREF(refused);
                PyErr_Format(PyExc_TypeError, "send_frames: frame %zd is %.100s, not bytes", start + i,
                             Py_TYPE(f)->tp_name);
                return NULL;
            }
            Py_INCREF(f);                                   /* kept alive while the GIL is released */
            held[i] = f;
            iov[i].iov_base = PyBytes_AS_STRING(f);
            iov[i].iov_len = (size_t)PyBytes_GET_SIZE(f);
            memset(&msgs[i], 0, sizeof(msgs[i]));
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        Py_ssize_t i = 0;
        int bad[MAX_BATCH], nbad = 0;
        Py_BEGIN_ALLOW_THREADS
        while (i < k) {
            int r = sendmmsg(fd, msgs + i, (unsigned int)(k - i), 0);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                bad[nbad++] = (int)i;                       /* this frame was refused: skip it */
                i++;
            } else {
                i += r;
            }
        }
        Py_END_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < k; j++)
            Py_DECREF(held[j]);
        for (int j = 0; j < nbad; j++) {
            PyObject *ix = PyLong_FromSsize_t(start + bad[j]);
            if (ix == NULL || PyList_Append(refused, ix) < 0) {
                Py_XDECREF(ix);
                Py_DECREF(refused);
                return NULL;
            }
            Py_DECREF(ix);
        }
    }
    return refused;
}

PyDoc_STRVAR(recv_frames_doc,
"recv_frames(fd, buf, slot, budget, port, out) -> (appended, truncated)\n\n"
"One recvmmsg of up to budget frames into buf (budget slots of slot bytes); frames not sent by this host are\n"
"appended to the list out as (port, bytes). EAGAIN/EINTR give (0, 0); other errors raise OSError.");
PyDoc_STRVAR(send_frames_doc,
"send_frames(fd, frames) -> list of refused indices\n\n"
"Send every bytes object of the list frames as one frame (sendmmsg, 64 per call); refused frames are skipped.");

static PyMethodDef methods[] = {
    {"recv_frames", (PyCFunction)(void (*)(void))recv_frames, METH_FASTCALL, recv_frames_doc},
    {"send_frames", (PyCFunction)(void (*)(void))send_frames, METH_FASTCALL, send_frames_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_portio",
    "Batched AF_PACKET receive (recvmmsg) and send (sendmmsg) for the switch daemon's ports.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__portio(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAX_BATCH", MAX_BATCH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
