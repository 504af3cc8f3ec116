/* The tag key as the fast lanes use it: a job's 16-byte key (a Python bytes object) turned into its expanded
 * schedule (_tag.h, 64 KiB: the PRF key and the NH key) once per key and module, and kept in a small cache, so a
 * call that tags or checks datagrams costs one dictionary lookup. Included by _txlane.c and _rxlane.c (each keeps
 * its own cache; a process has one key per job, so a handful of entries at most).
 *
 * A schedule is a bytes object: a caller holds a reference for as long as it uses the schedule's bytes, with or
 * without the GIL, so clearing the cache (when it holds TAG_CACHE_MAX keys) never frees one in use. */
#ifndef DLCP_TAGKEY_H
#define DLCP_TAGKEY_H

#include <Python.h>
#include "_tag.h"

#define TAG_CACHE_MAX 64

static PyObject *tag_cache;  /* key bytes -> schedule bytes */

/* ``*sched`` := a new reference to the schedule of ``obj`` (16 bytes), or NULL for None. 0 on success, -1 with an
 * exception for anything else. */
static int schedule_of(PyObject *obj, PyObject **sched)
{
    *sched = NULL;
    if (obj == Py_None)
        return 0;
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != SIP_KEY_LEN) {
        PyErr_Format(PyExc_ValueError, "the tag key must be %d bytes or None", SIP_KEY_LEN);
        return -1;
    }
    if (tag_cache == NULL && (tag_cache = PyDict_New()) == NULL)
        return -1;
    PyObject *s = PyDict_GetItemWithError(tag_cache, obj);  /* borrowed */
    if (s != NULL) {
        Py_INCREF(s);
        *sched = s;
        return 0;
    }
    if (PyErr_Occurred())
        return -1;
    s = PyBytes_FromStringAndSize(NULL, TAG_SCHEDULE_LEN);
    if (s == NULL)
        return -1;
    tag_schedule((const uint8_t *)PyBytes_AS_STRING(obj), (uint8_t *)PyBytes_AS_STRING(s));
    if (PyDict_GET_SIZE(tag_cache) >= TAG_CACHE_MAX)
        PyDict_Clear(tag_cache);
    if (PyDict_SetItem(tag_cache, obj, s) < 0) {
        Py_DECREF(s);
        return -1;
    }
    *sched = s;
    return 0;
}

static inline const uint8_t *schedule_bytes(PyObject *sched)
{
    return sched == NULL ? NULL : (const uint8_t *)PyBytes_AS_STRING(sched);
}

#endif /* DLCP_TAGKEY_H */
