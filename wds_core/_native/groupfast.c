/* The common case of grouping members into samples in C (wds_core._native.groupfast), for grouping.group_members.
 * Built by setup.py when a C compiler is there; without it grouping is all Python, with the same results
 * (tests/core/test_fuzz.py compares them).
 *
 * Grouper(members, url, path, budget, cursor) is an iterator of samples.  It takes members from the iterator
 * members while each is one the Python loop would take the quick way: a 3-tuple (name, data, offset) with data
 * bytes or a memoryview, name an ASCII str not starting with '_' and without a newline, whose basename has a
 * dot after its first character, whose field is not in the sample yet, and whose data fit in what is left of
 * the sample's budget of bytes.  The first member that is not such a member is left to the Python loop
 * (handed()), with the state it needs (state()): the key, the sample being built, the bytes it may still
 * take.  Samples are yielded as the Python loop yields them: when a member with another key arrives (after
 * setting the cursor's offset and name to that member's, where the next sample starts) and at the end (offset -1,
 * name None), the cursor being None or an object with offset and name attributes (tar/cursor.py).  An error
 * raised by members is passed on; state() then gives the sample in progress.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *members;  /* the iterator of (name, data, offset) */
    PyObject *url;
    PyObject *path;     /* the local path, or None */
    PyObject *cursor;   /* what the next sample's offset and name are set on, or None */
    Py_ssize_t budget;  /* bytes a sample may take */
    Py_ssize_t left;    /* bytes the sample being built may still take */
    PyObject *key;      /* the key of the sample being built (or of the last one), or NULL */
    PyObject *sample;   /* the sample being built, or NULL */
    PyObject *next;     /* a member taken from members, not grouped yet (it starts the next sample) */
    PyObject *handed;   /* the member left to the Python loop, or NULL */
    int done;
} Grouper;

static PyObject *KEY, *URL, *LOCAL_PATH, *OFFSET, *NAME, *MINUS_ONE;

/* where the next sample starts: the offset of its first member's first header, and that member's name */
static int set_at(Grouper *g, PyObject *offset, PyObject *name)
{
    if (g->cursor == Py_None)
        return 0;
    return PyObject_SetAttr(g->cursor, OFFSET, offset) < 0 ? -1 : PyObject_SetAttr(g->cursor, NAME, name);
}

/* name[from:to] lower-cased (ASCII) */
static PyObject *lowered(PyObject *name, const char *s, Py_ssize_t from, Py_ssize_t to)
{
    Py_ssize_t i = from;
    while (i < to && !(s[i] >= 'A' && s[i] <= 'Z'))
        i++;
    if (i == to)
        return PyUnicode_Substring(name, from, to);
    PyObject *field = PyUnicode_New(to - from, 127);
    if (field == NULL)
        return NULL;
    Py_UCS1 *into = PyUnicode_1BYTE_DATA(field);
    for (i = from; i < to; i++)
        into[i - from] = (Py_UCS1)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] + ('a' - 'A') : s[i]);
    return field;
}

/* A new sample for key: {"__key__": key, "__url__": url} and "__local_path__" when there is a path */
static PyObject *new_sample(Grouper *g, PyObject *key)
{
    PyObject *sample = PyDict_New();
    if (sample == NULL)
        return NULL;
    if (PyDict_SetItem(sample, KEY, key) < 0 || PyDict_SetItem(sample, URL, g->url) < 0 ||
        (g->path != Py_None && PyDict_SetItem(sample, LOCAL_PATH, g->path) < 0)) {
        Py_DECREF(sample);
        return NULL;
    }
    return sample;
}

static PyObject *grouper_next(Grouper *g)
{
    while (!g->done) {
        PyObject *member = g->next;
        g->next = NULL;
        if (member == NULL && (member = PyIter_Next(g->members)) == NULL) {
            if (PyErr_Occurred())
                return NULL;
            g->done = 1;
            if (g->sample == NULL || set_at(g, MINUS_ONE, Py_None) < 0)
                return NULL;
            PyObject *last = g->sample;
            g->sample = NULL;
            return last;
        }
        if (!PyTuple_CheckExact(member) || PyTuple_GET_SIZE(member) != 3)
            goto hand;
        PyObject *name = PyTuple_GET_ITEM(member, 0), *data = PyTuple_GET_ITEM(member, 1);
        if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_ASCII(name) || !(PyBytes_CheckExact(data) || PyMemoryView_Check(data)))
            goto hand;
        const char *s = (const char *)PyUnicode_1BYTE_DATA(name);
        Py_ssize_t len = PyUnicode_GET_LENGTH(name), slash = -1, dot = -1;
        if (len == 0 || s[0] == '_' || memchr(s, '\n', (size_t)len) != NULL)
            goto hand;
        for (Py_ssize_t i = len - 1; i >= 0; i--)
            if (s[i] == '/') {
                slash = i;
                break;
            }
        const char *found = memchr(s + slash + 1, '.', (size_t)(len - slash - 1));
        if (found != NULL)
            dot = found - s;
        if (dot <= slash + 1)
            goto hand;
        Py_ssize_t size = PyBytes_CheckExact(data) ? PyBytes_GET_SIZE(data) : PyObject_Length(data);
        if (size < 0) {
            Py_DECREF(member);
            return NULL;
        }
        int same = g->key != NULL && PyUnicode_IS_ASCII(g->key) && PyUnicode_GET_LENGTH(g->key) == dot &&
                   memcmp(PyUnicode_1BYTE_DATA(g->key), s, (size_t)dot) == 0;
        if (!same && g->sample != NULL) { /* the sample before is complete: it goes first, this member next */
            if (set_at(g, PyTuple_GET_ITEM(member, 2), name) < 0) {
                Py_DECREF(member);
                return NULL;
            }
            g->next = member;
            PyObject *complete = g->sample;
            g->sample = NULL;
            return complete;
        }
        if (!same) {
            PyObject *key = PyUnicode_Substring(name, 0, dot);
            PyObject *sample = key == NULL ? NULL : new_sample(g, key);
            if (sample == NULL) {
                Py_XDECREF(key);
                Py_DECREF(member);
                return NULL;
            }
            Py_XSETREF(g->key, key);
            g->sample = sample;
            g->left = g->budget;
        } else if (g->sample == NULL) {
            goto hand; /* never here: only the Python loop drops a sample and keeps its key */
        }
        PyObject *field = lowered(name, s, dot + 1, len);
        if (field == NULL) {
            Py_DECREF(member);
            return NULL;
        }
        int twice = PyDict_Contains(g->sample, field);
        if (twice != 0 || size > g->left) {
            Py_DECREF(field);
            if (twice < 0) {
                Py_DECREF(member);
                return NULL;
            }
            goto hand; /* a field given twice, a sample over its budget: the Python loop says so */
        }
        g->left -= size;
        int failed = PyDict_SetItem(g->sample, field, data);
        Py_DECREF(field);
        Py_DECREF(member);
        if (failed)
            return NULL;
        continue;
    hand:
        g->handed = member;
        g->done = 1;
    }
    return NULL;
}

static PyObject *grouper_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *members, *url, *path, *cursor;
    Py_ssize_t budget;
    if (!PyArg_ParseTuple(args, "OOOnO", &members, &url, &path, &budget, &cursor))
        return NULL;
    PyObject *iterator = PyObject_GetIter(members);
    if (iterator == NULL)
        return NULL;
    Grouper *g = (Grouper *)type->tp_alloc(type, 0);
    if (g == NULL) {
        Py_DECREF(iterator);
        return NULL;
    }
    g->members = iterator;
    g->url = Py_NewRef(url);
    g->path = Py_NewRef(path);
    g->cursor = Py_NewRef(cursor);
    g->budget = g->left = budget;
    return (PyObject *)g;
}

static int grouper_traverse(Grouper *g, visitproc visit, void *arg)
{
    Py_VISIT(g->members);
    Py_VISIT(g->url);
    Py_VISIT(g->path);
    Py_VISIT(g->cursor);
    Py_VISIT(g->key);
    Py_VISIT(g->sample);
    Py_VISIT(g->next);
    Py_VISIT(g->handed);
    return 0;
}

static int grouper_clear(Grouper *g)
{
    Py_CLEAR(g->members);
    Py_CLEAR(g->url);
    Py_CLEAR(g->path);
    Py_CLEAR(g->cursor);
    Py_CLEAR(g->key);
    Py_CLEAR(g->sample);
    Py_CLEAR(g->next);
    Py_CLEAR(g->handed);
    return 0;
}

static void grouper_dealloc(Grouper *g)
{
    PyObject_GC_UnTrack(g);
    grouper_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *grouper_state(Grouper *g, PyObject *unused)
{
    return Py_BuildValue("(OOn)", g->key ? g->key : Py_None, g->sample ? g->sample : Py_None, g->left);
}

static PyObject *grouper_handed(Grouper *g, PyObject *unused)
{
    return Py_NewRef(g->handed ? g->handed : Py_None);
}

static PyMethodDef grouper_methods[] = {
    {"state", (PyCFunction)grouper_state, METH_NOARGS, "(key, sample being built or None, bytes it may still take)"},
    {"handed", (PyCFunction)grouper_handed, METH_NOARGS, "The member left to the Python loop, or None."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GrouperType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wds_core._native.groupfast.Grouper",
    .tp_basicsize = sizeof(Grouper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Samples grouped from members while they are plain (groupfast.c says which).",
    .tp_new = grouper_new,
    .tp_dealloc = (destructor)grouper_dealloc,
    .tp_traverse = (traverseproc)grouper_traverse,
    .tp_clear = (inquiry)grouper_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)grouper_next,
    .tp_methods = grouper_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "groupfast", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_groupfast(void)
{
    if (PyType_Ready(&GrouperType) < 0)
        return NULL;
    KEY = PyUnicode_InternFromString("__key__");
    URL = PyUnicode_InternFromString("__url__");
    LOCAL_PATH = PyUnicode_InternFromString("__local_path__");
    OFFSET = PyUnicode_InternFromString("offset");
    NAME = PyUnicode_InternFromString("name");
    MINUS_ONE = PyLong_FromLong(-1);
    if (KEY == NULL || URL == NULL || LOCAL_PATH == NULL || OFFSET == NULL || NAME == NULL || MINUS_ONE == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Grouper", (PyObject *)&GrouperType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
