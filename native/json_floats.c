/* The big-float walk of a decoded record, in C: journal._json_floats; and json_like, the walk
 * of an event about to be written (below).
 *
 * Why: journal/record.py reads a dict event's payload with orjson, which reads an integer
 * beyond 64 bits as the nearest float where json reads the int. So before orjson's value is
 * handed on, every float in it, at any depth, is looked at: one at least 2**63 in magnitude may
 * be such an integer, and the payload is then read by json instead. In Python that walk cost
 * about a tenth of a decode scan (one call per nested dict or list, a type test per value);
 * here it is one call per record.
 *
 * no_big_float(value) answers exactly what journal/record.py's pure-Python _no_big_float does,
 * which stays as its twin (JOURNAL_PURE=1, or no compiler) and which tests/test_json_floats.py
 * holds it equal to (hypothesis): True when no float of exact type float in ``value`` (a dict
 * or a list of exact type) or in its dicts and lists of exact type lies outside
 * (-2**63, 2**63); values of other types are not looked into. Dict keys are not looked at
 * (orjson's keys are strings). A nesting too deep raises RecursionError, as the twin does (on
 * 3.11 at the same depth, the interpreter's recursion limit; from 3.12 at its own limit for C
 * code), and the caller has json read the payload then: orjson itself reads no nesting deeper
 * than 1024, so a record never comes near either.
 *
 * It reads objects only (no references kept, nothing allocated), on the limited API of 3.11,
 * and holds the GIL throughout: the values it walks belong to the calling thread until it
 * returns.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* 2**63: the smallest magnitude of a float orjson can have read from an integer literal
 * (journal/record.py's _BIG_FLOAT; tests compare them). */
#define BIG_FLOAT 9223372036854775808.0

/* A check of one value: 1 if it passes, 0 if not, -1 with an exception set. */
typedef int (*value_check)(PyObject *x);

/* Every value of ``container`` (an exact dict, list or tuple: a dict's values, not its keys)
 * through ``check``, the nesting counted against Python's recursion limit (``where`` says what
 * for): 1 if each passes, else the first 0 or -1. Neither walk calls back into Python, so the
 * container is not changed while this runs and its length and items stay as read. */
static int each_value(PyObject *container, value_check check, const char *where) {
    if (Py_EnterRecursiveCall(where)) {
        return -1;
    }
    int ok = 1;
    if (PyDict_CheckExact(container)) {
        Py_ssize_t pos = 0;
        PyObject *key;
        PyObject *value;
        while (ok == 1 && PyDict_Next(container, &pos, &key, &value)) {
            ok = check(value);
        }
    } else {
        int list = PyList_CheckExact(container);
        Py_ssize_t n = list ? PyList_Size(container) : PyTuple_Size(container);
        for (Py_ssize_t i = 0; ok == 1 && i < n; i++) {
            PyObject *item = list ? PyList_GetItem(container, i) : PyTuple_GetItem(container, i); /* borrowed */
            ok = item == NULL ? -1 : check(item);
        }
    }
    Py_LeaveRecursiveCall();
    return ok;
}

#define FLOATS_WHERE " while looking for floats read from big integers"

/* 1 if ``x`` holds no big float, 0 if it does, -1 with an exception set. */
static int value_ok(PyObject *x) {
    if (PyUnicode_CheckExact(x) || PyLong_CheckExact(x)) {
        return 1;
    }
    if (PyFloat_CheckExact(x)) {
        double d = PyFloat_AsDouble(x); /* an exact float: cannot fail */
        return -BIG_FLOAT < d && d < BIG_FLOAT; /* NaN is outside, as in the twin */
    }
    if (PyDict_CheckExact(x) || PyList_CheckExact(x)) {
        return each_value(x, value_ok, FLOATS_WHERE);
    }
    return 1;
}

/* --- json_like: whether orjson writes an event as json does --------------------------------
 *
 * journal/engine/encoding.py writes an event with orjson and keeps its bytes only where json
 * would have written the same ones: every value in the event, at any depth, a str, int, bool or
 * None, a finite float, or an exact dict, list or tuple (NaN and the infinities orjson writes as
 * null; a subclass, a UUID, a datetime it writes otherwise or refuses). Every durable append
 * walks its event so, holding the GIL; in Python the walk was about a tenth of that append's
 * Python. json_like(value) answers exactly what encoding._json_like does, which stays as its
 * twin (JOURNAL_PURE=1, or no compiler) and which tests/test_json_floats.py holds it equal to
 * (hypothesis). Dict keys are not looked at (orjson refused any key but a str before). A nesting
 * too deep raises RecursionError, as the twin does, and the caller has json decide. */

#define LIKE_WHERE " while checking an event's values"

/* 1 if json writes ``x`` as orjson does, 0 if not, -1 with an exception set. */
static int like_value(PyObject *x) {
    if (PyUnicode_CheckExact(x) || PyLong_CheckExact(x) || PyBool_Check(x) || x == Py_None) {
        return 1;
    }
    if (PyFloat_CheckExact(x)) {
        double d = PyFloat_AsDouble(x); /* an exact float: cannot fail */
        return d - d == 0.0;            /* NaN for NaN and the infinities, as in the twin */
    }
    if (PyDict_CheckExact(x) || PyList_CheckExact(x) || PyTuple_CheckExact(x)) {
        return each_value(x, like_value, LIKE_WHERE);
    }
    return 0;
}

/* json_like(value) -> bool, ``value`` an exact dict, list or tuple. */
static PyObject *json_like(PyObject *self, PyObject *value) {
    (void)self;
    if (!PyDict_CheckExact(value) && !PyList_CheckExact(value) && !PyTuple_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "json_like takes a dict, a list or a tuple (of exact type)");
        return NULL;
    }
    int ok = each_value(value, like_value, LIKE_WHERE);
    if (ok < 0) {
        return NULL;
    }
    return PyBool_FromLong(ok);
}

/* no_big_float(value) -> bool, ``value`` an exact dict or list. */
static PyObject *no_big_float(PyObject *self, PyObject *value) {
    (void)self;
    if (!PyDict_CheckExact(value) && !PyList_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "no_big_float takes a dict or a list (of exact type)");
        return NULL;
    }
    int ok = each_value(value, value_ok, FLOATS_WHERE);
    if (ok < 0) {
        return NULL;
    }
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"no_big_float", no_big_float, METH_O,
     "no_big_float(value) -> whether no float in value, at any depth, is at least 2**63 in magnitude"},
    {"json_like", json_like, METH_O,
     "json_like(value) -> whether every value in value, at any depth, is one json writes as orjson does"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_json_floats", "the big-float walk of a decoded record (journal/record.py)", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__json_floats(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    PyObject *big = PyFloat_FromDouble(BIG_FLOAT);
    int rc = big == NULL ? -1 : PyModule_AddObjectRef(m, "BIG_FLOAT", big);
    Py_XDECREF(big);
    if (rc != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
