/* The host plane's first walk, compiled (tfdevices.verify._hostwalk).
 *
 * Reads a serialized XSpace's wire format directly (no protobuf library): planes() finds
 * the top-level XPlanes, walk() reads the host plane as tfdevices/verify/host.py's
 * _read_lines(plane, names, ids, trace, None) does (the first pass: no thread-pool links).
 *
 * Every byte read is bounds-checked and the whole plane is validated as protobuf's parser
 * validates it (wire types, lengths, varints, UTF-8 of string fields); anything this reader
 * is not sure to read exactly as protobuf would raises ValueError, and the caller falls back
 * to protobuf and the Python walk. No recursion: the XPlane schema is walked level by level.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* Event kinds: tfdevices/verify/kinds.py's _KERNEL ... _STEP (host.py checks them against CODES). */
enum {
    K_KERNEL = 0, K_PROCESS, K_ASYNC, K_EAGER, K_RUN, K_ASYNC_DONE, K_DONE_CALLBACK,
    K_SCHEDULED, K_REGION_START, K_REGION_STOP, K_STEP
};

/* ------------------------------------------------------------------ wire format */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Rd;

static int
malformed(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed XSpace: %s", what);
    return -1;
}

static int
rd_varint_long(Rd *r, uint64_t *out)
{
    uint64_t v = 0;
    int shift;
    for (shift = 0; shift < 70; shift += 7) {
        uint8_t b;
        if (r->p >= r->end)
            return malformed("truncated varint");
        b = *r->p++;
        if (shift == 63 && b > 1)
            return malformed("varint over 64 bits");
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return malformed("varint over 10 bytes");
}

static inline int
rd_varint(Rd *r, uint64_t *out)
{
    if (r->p < r->end && *r->p < 0x80) {
        *out = *r->p++;
        return 0;
    }
    return rd_varint_long(r, out);
}

/* The next field's number and wire type; only wire types 0, 1, 2 and 5 are accepted. */
static inline int
rd_tag(Rd *r, uint32_t *field, int *wire)
{
    uint64_t tag;
    if (r->p < r->end && *r->p < 0x80 && *r->p >= 8) {
        tag = *r->p;
        *wire = (int)(tag & 7);
        if (*wire == 0 || *wire == 1 || *wire == 2 || *wire == 5) {
            r->p++;
            *field = (uint32_t)(tag >> 3);
            return 0;
        }
    }
    if (rd_varint(r, &tag) < 0)
        return -1;
    if ((tag >> 3) > 536870911u || (tag >> 3) == 0) /* protobuf's field numbers: 1 to 2^29 - 1 */
        return malformed("bad field number");
    *wire = (int)(tag & 7);
    *field = (uint32_t)(tag >> 3);
    if (*wire != 0 && *wire != 1 && *wire != 2 && *wire != 5)
        return malformed("unsupported wire type");
    return 0;
}

static inline int
rd_bytes(Rd *r, Rd *out)
{
    uint64_t n;
    if (rd_varint(r, &n) < 0)
        return -1;
    if (n > (uint64_t)(r->end - r->p))
        return malformed("length past the end");
    out->p = r->p;
    out->end = r->p + n;
    r->p += n;
    return 0;
}

static int
rd_fixed64(Rd *r, uint64_t *out)
{
    uint64_t v = 0;
    int i;
    if (r->end - r->p < 8)
        return malformed("truncated fixed64");
    for (i = 7; i >= 0; i--)
        v = (v << 8) | r->p[i];
    r->p += 8;
    *out = v;
    return 0;
}

static int
skip_field(Rd *r, int wire)
{
    uint64_t v;
    Rd s;
    switch (wire) {
    case 0:
        return rd_varint(r, &v);
    case 1:
        if (r->end - r->p < 8)
            return malformed("truncated fixed64");
        r->p += 8;
        return 0;
    case 2:
        return rd_bytes(r, &s);
    case 5:
        if (r->end - r->p < 4)
            return malformed("truncated fixed32");
        r->p += 4;
        return 0;
    }
    return malformed("unsupported wire type");
}

/* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF), as protobuf checks string fields. */
static int
utf8_ok(const uint8_t *s, const uint8_t *end)
{
    while (s < end) {
        uint8_t c;
        uint64_t word;
        if (end - s >= 8) {
            memcpy(&word, s, 8);
            if (!(word & 0x8080808080808080ull)) {
                s += 8;
                continue;
            }
        }
        c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            if (end - s < 2 || (s[1] & 0xc0) != 0x80)
                return 0;
            s += 2;
        }
        else if (c >= 0xe0 && c <= 0xef) {
            uint8_t lo = 0x80, hi = 0xbf;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
            if (end - s < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xc0) != 0x80)
                return 0;
            s += 3;
        }
        else if (c >= 0xf0 && c <= 0xf4) {
            uint8_t lo = 0x80, hi = 0xbf;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
            if (end - s < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
                return 0;
            s += 4;
        }
        else
            return 0;
    }
    return 1;
}

static int
rd_string(Rd *r, Rd *out)
{
    if (rd_bytes(r, out) < 0)
        return -1;
    if (!utf8_ok(out->p, out->end))
        return malformed("string field not UTF-8");
    return 0;
}

#define EXPECT(w) \
    do { \
        if (wire != (w)) \
            return malformed("unexpected wire type"); \
    } while (0)

/* ------------------------------------------------------------------ messages */

enum { V_NONE = 0, V_DOUBLE, V_UINT, V_INT, V_STR, V_BYTES, V_REF };

typedef struct {
    int64_t metadata_id;
    int which; /* V_*: the oneof ``value``'s set field, the last one on the wire */
    uint64_t bits;
    Rd s;
} Stat;

static int
parse_stat(Rd r, Stat *st)
{
    st->metadata_id = 0;
    st->which = V_NONE;
    st->bits = 0;
    st->s.p = st->s.end = NULL;
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        uint64_t v;
        if (rd_tag(&r, &field, &wire) < 0)
            return -1;
        switch (field) {
        case 1:
            EXPECT(0);
            if (rd_varint(&r, &v) < 0)
                return -1;
            st->metadata_id = (int64_t)v;
            break;
        case 2:
            EXPECT(1);
            if (rd_fixed64(&r, &st->bits) < 0)
                return -1;
            st->which = V_DOUBLE;
            break;
        case 3:
        case 4:
        case 7:
            EXPECT(0);
            if (rd_varint(&r, &st->bits) < 0)
                return -1;
            st->which = field == 3 ? V_UINT : field == 4 ? V_INT : V_REF;
            break;
        case 5:
            EXPECT(2);
            if (rd_string(&r, &st->s) < 0)
                return -1;
            st->which = V_STR;
            break;
        case 6:
            EXPECT(2);
            if (rd_bytes(&r, &st->s) < 0)
                return -1;
            st->which = V_BYTES;
            break;
        default:
            if (skip_field(&r, wire) < 0)
                return -1;
        }
    }
    return 0;
}

/* An integer as host.py's _int_stat reads it: ``uint64_value or int64_value``. */
typedef struct {
    uint64_t bits;
    int is_unsigned;
} IntVal;

static PyObject *
int_obj(IntVal v)
{
    return v.is_unsigned ? PyLong_FromUnsignedLongLong(v.bits) : PyLong_FromLongLong((long long)(int64_t)v.bits);
}

static IntVal
int_of(const Stat *st)
{
    IntVal v = {0, 0};
    if (st->which == V_UINT) {
        v.bits = st->bits;
        v.is_unsigned = 1;
    }
    else if (st->which == V_INT)
        v.bits = st->bits;
    return v;
}

/* The ids of the stats the walk reads by id (-1: none, as host.py's ids.get(name, -1)). */
typedef struct {
    int64_t consumed, produced, step_num;
} Ids;

typedef struct {
    int64_t metadata_id;
    int64_t offset;   /* offset_ps: 0 when the oneof holds num_occurrences */
    int64_t duration; /* duration_ps */
    IntVal consumed, produced, step;
    int has_step;
    Rd body; /* the whole event, read again for its stats when needed */
} Event;

static int
parse_event(Rd r, const Ids *ids, Event *ev)
{
    ev->metadata_id = ev->offset = ev->duration = 0;
    ev->consumed.bits = ev->produced.bits = ev->step.bits = 0;
    ev->consumed.is_unsigned = ev->produced.is_unsigned = ev->step.is_unsigned = 0;
    ev->has_step = 0;
    ev->body = r;
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        uint64_t v;
        Rd s;
        Stat st;
        if (rd_tag(&r, &field, &wire) < 0)
            return -1;
        switch (field) {
        case 1:
        case 2:
        case 3:
        case 5:
            EXPECT(0);
            if (rd_varint(&r, &v) < 0)
                return -1;
            if (field == 1)
                ev->metadata_id = (int64_t)v;
            else if (field == 2)
                ev->offset = (int64_t)v;
            else if (field == 3)
                ev->duration = (int64_t)v;
            else
                ev->offset = 0; /* num_occurrences: the oneof no longer holds offset_ps */
            break;
        case 4:
            EXPECT(2);
            if (rd_bytes(&r, &s) < 0 || parse_stat(s, &st) < 0)
                return -1;
            if (st.metadata_id == ids->consumed)
                ev->consumed = int_of(&st);
            if (st.metadata_id == ids->produced)
                ev->produced = int_of(&st);
            if (st.metadata_id == ids->step_num) {
                ev->step = int_of(&st);
                ev->has_step = 1;
            }
            break;
        default:
            if (skip_field(&r, wire) < 0)
                return -1;
        }
    }
    return 0;
}

/* A stat's value as host.py's _stat_value gives it. */
static PyObject *
stat_value(const Stat *st, PyObject *names)
{
    PyObject *key, *name;
    double d;
    switch (st->which) {
    case V_DOUBLE:
        memcpy(&d, &st->bits, sizeof d);
        return PyFloat_FromDouble(d);
    case V_UINT:
        return PyLong_FromUnsignedLongLong(st->bits);
    case V_INT:
        return PyLong_FromLongLong((long long)(int64_t)st->bits);
    case V_STR:
        return PyUnicode_DecodeUTF8((const char *)st->s.p, st->s.end - st->s.p, "strict");
    case V_BYTES:
        return PyBytes_FromStringAndSize((const char *)st->s.p, st->s.end - st->s.p);
    case V_REF:
        key = PyLong_FromUnsignedLongLong(st->bits);
        if (key == NULL)
            return NULL;
        name = PyDict_GetItemWithError(names, key);
        if (name != NULL) {
            Py_DECREF(key);
            Py_INCREF(name);
            return name;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
        return key;
    }
    Py_RETURN_NONE;
}

/* host.py's _stats(event, names): stat name -> value, in the event's order. */
static PyObject *
event_stats(const Event *ev, PyObject *names)
{
    Rd r = ev->body;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        Rd s;
        Stat st;
        PyObject *key, *name, *value;
        if (rd_tag(&r, &field, &wire) < 0)
            goto fail;
        if (field != 4) {
            if (skip_field(&r, wire) < 0)
                goto fail;
            continue;
        }
        if (rd_bytes(&r, &s) < 0 || parse_stat(s, &st) < 0)
            goto fail;
        key = PyLong_FromLongLong(st.metadata_id);
        if (key == NULL)
            goto fail;
        name = PyDict_GetItemWithError(names, key);
        Py_DECREF(key);
        if (name == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue; /* a stat with no metadata: left out, as the Python reader leaves it */
        }
        Py_INCREF(name);
        value = stat_value(&st, names);
        if (value == NULL || PyDict_SetItem(out, name, value) < 0) {
            Py_DECREF(name);
            Py_XDECREF(value);
            goto fail;
        }
        Py_DECREF(name);
        Py_DECREF(value);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* str(stats.get(key, "")) */
static PyObject *
stats_str(PyObject *stats, const char *key)
{
    PyObject *value = PyDict_GetItemString(stats, key);
    if (value == NULL)
        return PyUnicode_FromString("");
    return PyObject_Str(value);
}

/* ------------------------------------------------------------------ event metadata table */

typedef struct {
    PyObject *kind_key;    /* a kernel's (op name, kernel): the kind's own tuple (owned) */
    PyObject *kernel_name; /* borrowed from kind_key */
    int code;              /* K_*; -1: not read; -3: its name is not in kinds_by_name yet */
    int transfer;
} Meta;

/* The plane's event metadata, in the order of their entries, found by key through an index:
 * dense (key - min_key) when the keys are few apart (TensorFlow numbers them 1..n), else a
 * hash table. */
typedef struct {
    Meta *metas;
    int64_t *keys;
    Rd *names, *displays;
    size_t n;
    int dense;
    int64_t min_key;
    uint64_t span;  /* the index's length */
    int32_t *index; /* -> metas, -1: none */
    size_t mask;    /* hash: span - 1 */
} Table;

static size_t
hash_key(int64_t key)
{
    uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29));
}

/* The index slot of ``key``: where it is, or the free slot where it goes. */
static int32_t *
table_slot(const Table *t, int64_t key)
{
    size_t i;
    if (t->dense) {
        uint64_t at = (uint64_t)key - (uint64_t)t->min_key;
        return at < t->span ? &t->index[at] : NULL;
    }
    i = hash_key(key) & t->mask;
    while (t->index[i] >= 0 && t->keys[t->index[i]] != key)
        i = (i + 1) & t->mask;
    return &t->index[i];
}

static const Meta *
table_get(const Table *t, int64_t key)
{
    const int32_t *slot = table_slot(t, key);
    const Meta *m;
    if (slot == NULL || *slot < 0)
        return NULL;
    m = &t->metas[*slot];
    return m->code >= 0 ? m : NULL;
}

static void
table_free(Table *t)
{
    size_t i;
    if (t->metas != NULL)
        for (i = 0; i < t->n; i++)
            Py_XDECREF(t->metas[i].kind_key);
    PyMem_Free(t->metas);
    PyMem_Free(t->keys);
    PyMem_Free(t->names);
    PyMem_Free(t->displays);
    PyMem_Free(t->index);
    memset(t, 0, sizeof *t);
}

/* The next value of a map entry (protobuf's MapEntry: key 1, value 2, unknown fields skipped), the key read
 * on the way into *key: 1 when a value was read into *value, 0 at the entry's end, -1 on malformed bytes.
 * A value given twice is merged: its fields are read in turn. */
static int
next_map_value(Rd *r, int64_t *key, Rd *value)
{
    while (r->p < r->end) {
        uint32_t field;
        int wire;
        uint64_t v;
        if (rd_tag(r, &field, &wire) < 0)
            return -1;
        if (field == 1) {
            EXPECT(0);
            if (rd_varint(r, &v) < 0)
                return -1;
            *key = (int64_t)v;
        }
        else if (field == 2) {
            EXPECT(2);
            return rd_bytes(r, value) < 0 ? -1 : 1;
        }
        else if (skip_field(r, wire) < 0)
            return -1;
    }
    return 0;
}

/* An event metadata map entry: its key, its (merged) value's name and display name. */
static int
parse_event_meta_entry(Rd r, int64_t *key, Rd *name, Rd *display)
{
    Rd value;
    int more;
    *key = 0;
    name->p = name->end = display->p = display->end = NULL;
    while ((more = next_map_value(&r, key, &value)) > 0) {
        /* XEventMetadata */
        while (value.p < value.end) {
            uint32_t field;
            int wire;
            uint64_t v;
            Rd s, p;
            Stat st;
            if (rd_tag(&value, &field, &wire) < 0)
                return -1;
            switch (field) {
            case 1:
                EXPECT(0);
                if (rd_varint(&value, &v) < 0)
                    return -1;
                break;
            case 2:
            case 4:
                EXPECT(2);
                if (rd_string(&value, field == 2 ? name : display) < 0)
                    return -1;
                break;
            case 3:
                EXPECT(2);
                if (rd_bytes(&value, &s) < 0)
                    return -1;
                break;
            case 5:
                EXPECT(2);
                if (rd_bytes(&value, &s) < 0 || parse_stat(s, &st) < 0)
                    return -1;
                break;
            case 6: /* child_id: repeated int64, packed or not */
                if (wire == 0) {
                    if (rd_varint(&value, &v) < 0)
                        return -1;
                }
                else {
                    EXPECT(2);
                    if (rd_bytes(&value, &p) < 0)
                        return -1;
                    while (p.p < p.end)
                        if (rd_varint(&p, &v) < 0)
                            return -1;
                }
                break;
            default:
                if (skip_field(&value, wire) < 0)
                    return -1;
            }
        }
    }
    return more;
}

/* A stat metadata map entry: its key and its (merged) value's name. */
static int
parse_stat_meta_entry(Rd r, int64_t *key, Rd *name)
{
    Rd value;
    int more;
    *key = 0;
    name->p = name->end = NULL;
    while ((more = next_map_value(&r, key, &value)) > 0) {
        /* XStatMetadata */
        while (value.p < value.end) {
            uint32_t field;
            int wire;
            uint64_t v;
            Rd s;
            if (rd_tag(&value, &field, &wire) < 0)
                return -1;
            if (field == 1) {
                EXPECT(0);
                if (rd_varint(&value, &v) < 0)
                    return -1;
            }
            else if (field == 2 || field == 3) {
                EXPECT(2);
                if (rd_string(&value, field == 2 ? name : &s) < 0)
                    return -1;
            }
            else if (skip_field(&value, wire) < 0)
                return -1;
        }
    }
    return more;
}

/* ------------------------------------------------------------------ the walk */

enum { W_NONE = 0, W_INT, W_ASYNC, W_EAGER };

typedef struct {
    int tag;
    IntVal value;  /* W_INT: the executor context */
    PyObject *obj; /* W_INT: it as an int (borrowed: the walk's pool holds it) */
} Where;

typedef struct {
    int64_t end; /* relative to the line's base */
    Where where;
} Span;

typedef struct {
    PyObject *name;
    int is_function;
    PyObject *start;
    int64_t duration;
    PyObject *contexts;
    int xla;
    int64_t end_rel; /* start + duration, relative to its line's base */
} Execution;

/* An asynchronous kernel's completion (ProcessAsync::Done), paired with its start after the walk. */
typedef struct {
    IntVal consumed; /* its _c: the _p of its start */
    int64_t ts;      /* its line's timestamp_ns */
    int64_t start;   /* relative to its line's base */
    Event ev;
} Done;

typedef struct {
    /* inputs */
    PyObject *names; /* stat metadata key -> name */
    Ids ids;
    Table table;
    /* outputs */
    PyObject *kernels, *parents, *outside, *steps;
    PyObject *pool; /* the ints the spans point to */
    Execution *executions;
    Py_ssize_t n_executions;
    size_t cap_executions;
    long long host_events;
    /* the line being read */
    int64_t ts;         /* timestamp_ns */
    int zero_mode;      /* how a relative time compares with absolute 0: 1 always >=, -1 never, 0 by zero_rel */
    int64_t zero_rel;   /* -timestamp_ns * 1000 */
    Span *spans;
    size_t n_spans, cap_spans;
    /* the asynchronous kernels: the _p of each start, each completion */
    PyObject *started;
    PyObject *done_at; /* executor context -> its step's done callback's start (the first) */
    Done *dones;
    size_t n_dones, cap_dones;
} Walk;

/* Whether base + rel >= 0, base = timestamp_ns * 1000 (exact: no 64-bit overflow). */
static int
nonneg(const Walk *w, int64_t rel)
{
    return w->zero_mode > 0 ? 1 : w->zero_mode < 0 ? 0 : rel >= w->zero_rel;
}

static void
set_line_base(Walk *w, int64_t ts)
{
    w->ts = ts;
    if (ts > INT64_MAX / 1000)
        w->zero_mode = 1;
    else if (ts < INT64_MIN / 1000)
        w->zero_mode = -1;
    else {
        w->zero_mode = 0;
        w->zero_rel = -ts * 1000;
    }
}

/* The absolute time timestamp_ns * 1000 + rel, as a Python int. */
static PyObject *
abs_time(const Walk *w, int64_t rel)
{
#if defined(__SIZEOF_INT128__)
    __int128 v = (__int128)w->ts * 1000 + rel;
    unsigned char buf[16];
    int i;
    if (v >= INT64_MIN && v <= INT64_MAX)
        return PyLong_FromLongLong((long long)v);
    for (i = 0; i < 16; i++)
        buf[i] = (unsigned char)((unsigned __int128)v >> (8 * i));
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromNativeBytes(buf, 16, Py_ASNATIVEBYTES_LITTLE_ENDIAN);
#else
    return _PyLong_FromByteArray(buf, 16, 1, 1);
#endif
#else
    PyObject *base, *scale, *offset, *sum;
    base = PyLong_FromLongLong(w->ts);
    scale = PyLong_FromLong(1000);
    offset = PyLong_FromLongLong(rel);
    sum = NULL;
    if (base != NULL && scale != NULL && offset != NULL) {
        PyObject *product = PyNumber_Multiply(base, scale);
        if (product != NULL) {
            sum = PyNumber_Add(product, offset);
            Py_DECREF(product);
        }
    }
    Py_XDECREF(base);
    Py_XDECREF(scale);
    Py_XDECREF(offset);
    return sum;
#endif
}

static int
add_rel(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return malformed("time past 64 bits");
    *out = a + b;
    return 0;
}

/* A full array of ``*cap`` items of ``size`` bytes, reallocated to twice as many (``first`` the first time):
 * the new array, ``*cap`` updated; NULL with MemoryError (``items`` and ``*cap`` left as they were). */
static void *
grown(void *items, size_t *cap, size_t size, size_t first)
{
    size_t want = *cap ? 2 * *cap : first;
    void *more = want > PY_SSIZE_T_MAX / size ? NULL : PyMem_Realloc(items, want * size);
    if (more == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *cap = want;
    return more;
}

static int
push_span(Walk *w, int64_t end, Where where)
{
    if (w->n_spans == w->cap_spans) {
        Span *spans = grown(w->spans, &w->cap_spans, sizeof(Span), 64);
        if (spans == NULL)
            return -1;
        w->spans = spans;
    }
    w->spans[w->n_spans].end = end;
    w->spans[w->n_spans].where = where;
    w->n_spans++;
    return 0;
}

static PyObject *zero_obj; /* the int 0 */

/* ``v`` as an int the walk's pool holds (borrowed). */
static PyObject *
pooled_int(Walk *w, IntVal v)
{
    PyObject *obj = int_obj(v);
    int rc;
    if (obj == NULL)
        return NULL;
    rc = PyList_Append(w->pool, obj);
    Py_DECREF(obj);
    return rc < 0 ? NULL : obj;
}

/* A tuple of strings holds no cycle: off the collector's lists, as its first pass would take it. */
static void
untrack_names(PyObject *key)
{
    Py_ssize_t i;
    if (!PyTuple_CheckExact(key) || !PyObject_GC_IsTracked(key))
        return;
    for (i = 0; i < PyTuple_GET_SIZE(key); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(key, i)))
            return;
    PyObject_GC_UnTrack(key);
}

/* Appends (key, start, duration, context, stats); steals nothing. */
static int
add_kernel(Walk *w, PyObject *key, int64_t start, int64_t duration, PyObject *context, PyObject *stats)
{
    PyObject *t = PyTuple_New(5), *s, *d;
    int rc;
    if (t == NULL)
        return -1;
    s = abs_time(w, start);
    d = PyLong_FromLongLong(duration);
    if (s == NULL || d == NULL) {
        Py_XDECREF(s);
        Py_XDECREF(d);
        Py_DECREF(t);
        return -1;
    }
    Py_INCREF(key);
    Py_INCREF(context);
    Py_INCREF(stats);
    PyTuple_SET_ITEM(t, 0, key);
    PyTuple_SET_ITEM(t, 1, s);
    PyTuple_SET_ITEM(t, 2, d);
    PyTuple_SET_ITEM(t, 3, context);
    PyTuple_SET_ITEM(t, 4, stats);
    if (stats == Py_None && !PyObject_GC_IsTracked(key))
        PyObject_GC_UnTrack(t); /* nothing in it can hold a cycle: what the collector would do on its first pass */
    rc = PyList_Append(w->kernels, t);
    Py_DECREF(t);
    return rc;
}

#define NEED_LINKS 1

/* One event of the other kinds (host.py's _read_call); ``current`` is the line's current call (index or -1). */
static int
read_call(Walk *w, int code, const Event *ev, int64_t start, Where where, int64_t process_end, int process_end_zero,
          Py_ssize_t *current)
{
    int64_t end;
    Where at = {W_NONE, {0, 0}, NULL};
    if (code != K_ASYNC && add_rel(start, ev->duration, &end) < 0)
        return -1;
    if (code == K_ASYNC) {
        PyObject *stats, *name, *type, *key, *context, *produced = int_obj(ev->produced);
        int rc = produced == NULL ? -1 : PySet_Add(w->started, produced);
        Py_XDECREF(produced);
        if (rc < 0)
            return -1;
        stats = event_stats(ev, w->names);
        if (stats == NULL)
            return -1;
        name = stats_str(stats, "name");
        type = stats_str(stats, "kernel_type");
        Py_DECREF(stats);
        if (name == NULL || type == NULL) {
            Py_XDECREF(name);
            Py_XDECREF(type);
            return -1;
        }
        key = PyTuple_Pack(2, name, type);
        Py_DECREF(name);
        Py_DECREF(type);
        if (key == NULL)
            return -1;
        untrack_names(key);
        if (where.tag == W_INT) {
            context = where.obj;
            Py_INCREF(context);
        }
        else if (where.tag != W_EAGER) {
            Py_DECREF(key);
            return NEED_LINKS;
        }
        else {
            context = zero_obj;
            Py_INCREF(context);
        }
        rc = context == NULL ? -1 : add_kernel(w, key, start, ev->duration, context, Py_None);
        Py_XDECREF(context);
        Py_DECREF(key);
        return rc;
    }
    if (code == K_ASYNC_DONE) {
        if (w->n_dones == w->cap_dones) {
            Done *dones = grown(w->dones, &w->cap_dones, sizeof(Done), 16);
            if (dones == NULL)
                return -1;
            w->dones = dones;
        }
        w->dones[w->n_dones].consumed = ev->consumed;
        w->dones[w->n_dones].ts = w->ts;
        w->dones[w->n_dones].start = start;
        w->dones[w->n_dones].ev = *ev;
        w->n_dones++;
        at.tag = W_ASYNC;
        return push_span(w, end, at);
    }
    if (code == K_DONE_CALLBACK) {
        PyObject *context = int_obj(ev->consumed), *at_obj = context == NULL ? NULL : abs_time(w, start), *set;
        set = at_obj == NULL ? NULL : PyDict_SetDefault(w->done_at, context, at_obj);
        Py_XDECREF(context);
        Py_XDECREF(at_obj);
        if (set == NULL)
            return -1;
        return push_span(w, end, at);
    }
    if (code == K_EAGER) {
        PyObject *stats = event_stats(ev, w->names), *name, *start_obj, *contexts;
        PyObject *is_func_obj;
        int is_func;
        Execution *e;
        if (stats == NULL)
            return -1;
        name = stats_str(stats, "eager_op");
        is_func_obj = PyDict_GetItemString(stats, "is_func");
        is_func = is_func_obj == NULL ? 0 : PyObject_IsTrue(is_func_obj);
        Py_DECREF(stats);
        if (name == NULL || is_func < 0) {
            Py_XDECREF(name);
            return -1;
        }
        start_obj = abs_time(w, start);
        contexts = PyList_New(0);
        if (start_obj == NULL || contexts == NULL) {
            Py_DECREF(name);
            Py_XDECREF(start_obj);
            Py_XDECREF(contexts);
            return -1;
        }
        if ((size_t)w->n_executions == w->cap_executions) {
            Execution *executions = grown(w->executions, &w->cap_executions, sizeof(Execution), 16);
            if (executions == NULL) {
                Py_DECREF(name);
                Py_DECREF(start_obj);
                Py_DECREF(contexts);
                return -1;
            }
            w->executions = executions;
        }
        e = &w->executions[w->n_executions];
        e->name = name;
        e->is_function = is_func;
        e->start = start_obj;
        e->duration = ev->duration;
        e->contexts = contexts;
        e->xla = 0;
        e->end_rel = end;
        *current = w->n_executions++;
        at.tag = W_EAGER;
        return push_span(w, end, at);
    }
    /* K_RUN: a function partition starts; its executor steps consume the context it produces */
    {
        Where caller = {W_NONE, {0, 0}, NULL};
        PyObject *produced, *caller_obj;
        size_t i;
        int rc;
        for (i = w->n_spans; i > 0; i--)
            if (w->spans[i - 1].where.tag == W_INT) {
                caller = w->spans[i - 1].where;
                break;
            }
        produced = pooled_int(w, ev->produced);
        if (produced == NULL)
            return -1;
        at.tag = W_INT;
        at.value = ev->produced;
        at.obj = produced;
        if (push_span(w, end, at) < 0)
            return -1;
        Py_INCREF(produced);
        if (*current >= 0 && start < w->executions[*current].end_rel) {
            rc = PyList_Append(w->executions[*current].contexts, produced);
        }
        else if (caller.tag == W_INT && caller.value.bits != 0
                 && (process_end_zero ? !nonneg(w, start) : start < process_end)) {
            caller_obj = caller.obj;
            rc = PyDict_SetItem(w->parents, produced, caller_obj);
        }
        else {
            rc = PySet_Add(w->outside, produced);
        }
        Py_DECREF(produced);
        return rc;
    }
}

static int
kernel_name_equal(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    return PyUnicode_Compare(a, b) == 0 ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* One line (host.py's _read_line without links). */
static int
read_line(Walk *w, Rd r)
{
    Rd events_probe = r, s;
    int64_t ts = 0;
    uint64_t v;
    Py_ssize_t current = -1;
    int open = 0, process_end_zero = 1, rc;
    int64_t end = 0, process_end = 0;
    Where inner = {W_NONE, {0, 0}, NULL};
    const Where none = {W_NONE, {0, 0}, NULL};
    /* the line's fields: its timestamp and how many events, strings checked */
    while (events_probe.p < events_probe.end) {
        uint32_t field;
        int wire;
        if (rd_tag(&events_probe, &field, &wire) < 0)
            return -1;
        switch (field) {
        case 1:
        case 3:
        case 9:
        case 10:
            EXPECT(0);
            if (rd_varint(&events_probe, &v) < 0)
                return -1;
            if (field == 3)
                ts = (int64_t)v;
            break;
        case 2:
        case 11:
            EXPECT(2);
            if (rd_string(&events_probe, &s) < 0)
                return -1;
            break;
        case 4:
            EXPECT(2);
            if (rd_bytes(&events_probe, &s) < 0)
                return -1;
            w->host_events++;
            break;
        default:
            if (skip_field(&events_probe, wire) < 0)
                return -1;
        }
    }
    set_line_base(w, ts);
    w->n_spans = 0;
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        Event ev;
        const Meta *meta;
        int64_t start;
        Where where;
        if (rd_tag(&r, &field, &wire) < 0)
            return -1;
        if (field != 4) {
            if (skip_field(&r, wire) < 0)
                return -1;
            continue;
        }
        if (rd_bytes(&r, &s) < 0 || parse_event(s, &w->ids, &ev) < 0)
            return -1;
        meta = table_get(&w->table, ev.metadata_id);
        if (meta == NULL)
            continue;
        start = ev.offset;
        if (meta->code == K_STEP) {
            if (ev.has_step) {
                PyObject *step = int_obj(ev.step);
                rc = step == NULL ? -1 : PySet_Add(w->steps, step);
                Py_XDECREF(step);
                if (rc < 0)
                    return -1;
            }
            continue;
        }
        /* the spans this event starts after are closed */
        if (open && start >= end) {
            while (w->n_spans && w->spans[w->n_spans - 1].end <= start)
                w->n_spans--;
            if (w->n_spans) {
                w->n_spans--;
                end = w->spans[w->n_spans].end;
                inner = w->spans[w->n_spans].where;
                open = nonneg(w, end);
            }
            else {
                open = 0;
                inner = none;
            }
        }
        where = open ? inner : none;
        if (meta->code == K_KERNEL) {
            PyObject *context, *stats;
            if (current >= 0 && w->executions[current].is_function) {
                int same = kernel_name_equal(meta->kernel_name, w->executions[current].name);
                if (same < 0)
                    return -1;
                if (same) {
                    w->executions[current].xla = 1; /* the function ran as one compiled XLA executable */
                    continue;
                }
            }
            if (where.tag == W_INT) {
                context = where.obj;
                Py_INCREF(context);
            }
            else if (ev.consumed.bits != 0)
                continue; /* an asynchronous kernel's body, run outside any step */
            else if (where.tag != W_EAGER)
                return NEED_LINKS;
            else {
                context = zero_obj;
                Py_INCREF(context);
            }
            if (context == NULL)
                return -1;
            if (meta->transfer) {
                stats = event_stats(&ev, w->names);
                if (stats == NULL) {
                    Py_DECREF(context);
                    return -1;
                }
            }
            else {
                stats = Py_None;
                Py_INCREF(stats);
            }
            rc = add_kernel(w, meta->kind_key, start, ev.duration, context, stats);
            Py_DECREF(context);
            Py_DECREF(stats);
            if (rc < 0)
                return -1;
        }
        else if (meta->code == K_PROCESS) {
            if (add_rel(start, ev.duration, &process_end) < 0)
                return -1;
            process_end_zero = 0;
            if (open && push_span(w, end, inner) < 0)
                return -1;
            end = process_end;
            inner.tag = W_INT;
            inner.value = ev.consumed;
            inner.obj = pooled_int(w, ev.consumed);
            if (inner.obj == NULL)
                return -1;
            open = nonneg(w, end);
        }
        else {
            if (open) { /* the other events read the whole stack: the innermost span joins it */
                if (push_span(w, end, inner) < 0)
                    return -1;
                open = 0;
                inner = none;
            }
            rc = read_call(w, meta->code, &ev, start, where, process_end, process_end_zero, &current);
            if (rc != 0)
                return rc;
            if (w->n_spans) {
                w->n_spans--;
                end = w->spans[w->n_spans].end;
                inner = w->spans[w->n_spans].where;
                open = nonneg(w, end);
            }
        }
    }
    return 0;
}

/* What ``kind`` (an item of kinds_by_name, or what kind_of_name gave) makes of an event metadata. */
static int
set_kind(Meta *m, PyObject *kind, PyObject *skipped)
{
    PyObject *code_obj, *key;
    long code;
    int transfer;
    m->code = -1;
    if (kind == skipped)
        return 0;
    if (!PyTuple_Check(kind) || PyTuple_GET_SIZE(kind) < 1 || !PyLong_Check(code_obj = PyTuple_GET_ITEM(kind, 0)))
        return malformed("unexpected event kind");
    code = PyLong_AsLong(code_obj);
    if (code == -1 && PyErr_Occurred())
        return -1;
    if (code == K_SCHEDULED || code == K_REGION_START || code == K_REGION_STOP) /* the links: not read */
        return 0;
    if (code < 0 || code > K_STEP)
        return malformed("unexpected event kind");
    if (code == K_KERNEL) {
        if (PyTuple_GET_SIZE(kind) < 3 || !PyTuple_Check(key = PyTuple_GET_ITEM(kind, 1)) || PyTuple_GET_SIZE(key) != 2
            || !PyUnicode_Check(PyTuple_GET_ITEM(key, 1)))
            return malformed("unexpected kernel kind");
        transfer = PyObject_IsTrue(PyTuple_GET_ITEM(kind, 2));
        if (transfer < 0)
            return -1;
        untrack_names(key);
        Py_INCREF(key);
        m->kind_key = key;
        m->kernel_name = PyTuple_GET_ITEM(key, 1);
        m->transfer = transfer;
    }
    m->code = (int)code;
    return 0;
}

static PyObject *
decode(const Rd *s)
{
    return PyUnicode_DecodeUTF8((const char *)s->p, s->end - s->p, "strict");
}

/* The kinds of the metadata whose names kinds_by_name did not hold, in order, as kinds.py's
 * _event_kinds reads them: looked up again (an earlier one may have added it), else kind_of_name. */
static int
classify_rest(Walk *w, PyObject *kinds_by_name, PyObject *kind_of_name, PyObject *skipped)
{
    size_t i;
    for (i = 0; i < w->table.n; i++) {
        Meta *m = &w->table.metas[i];
        PyObject *name, *display, *kind;
        int rc;
        if (m->code != -3)
            continue;
        name = decode(&w->table.names[i]);
        if (name == NULL)
            return -1;
        kind = PyDict_GetItemWithError(kinds_by_name, name);
        if (kind != NULL && kind != Py_None)
            Py_INCREF(kind);
        else if (PyErr_Occurred())
            kind = NULL;
        else {
            display = decode(&w->table.displays[i]);
            kind = display == NULL ? NULL : PyObject_CallFunctionObjArgs(kind_of_name, name, display, NULL);
            Py_XDECREF(display);
        }
        Py_DECREF(name);
        if (kind == NULL)
            return -1;
        rc = set_kind(m, kind, skipped);
        Py_DECREF(kind);
        if (rc < 0)
            return -1;
    }
    return 0;
}

typedef struct {
    Rd *items;
    size_t n, cap;
} Slices;

static int
slices_add(Slices *s, Rd r)
{
    if (s->n == s->cap) {
        Rd *items = grown(s->items, &s->cap, sizeof(Rd), 16);
        if (items == NULL)
            return -1;
        s->items = items;
    }
    s->items[s->n++] = r;
    return 0;
}

/* The plane's fields: its lines and metadata entries, every nested message checked. */
static int
read_plane_fields(Rd r, Slices *lines, Slices *event_meta, Slices *stat_meta)
{
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        uint64_t v;
        Rd s;
        Stat st;
        if (rd_tag(&r, &field, &wire) < 0)
            return -1;
        switch (field) {
        case 1:
            EXPECT(0);
            if (rd_varint(&r, &v) < 0)
                return -1;
            break;
        case 2:
            EXPECT(2);
            if (rd_string(&r, &s) < 0)
                return -1;
            break;
        case 3:
        case 4:
        case 5:
            EXPECT(2);
            if (rd_bytes(&r, &s) < 0 || slices_add(field == 3 ? lines : field == 4 ? event_meta : stat_meta, s) < 0)
                return -1;
            break;
        case 6:
            EXPECT(2);
            if (rd_bytes(&r, &s) < 0 || parse_stat(s, &st) < 0)
                return -1;
            break;
        default:
            if (skip_field(&r, wire) < 0)
                return -1;
        }
    }
    return 0;
}

static int
read_names(Walk *w, const Slices *stat_meta)
{
    size_t i;
    static const char *wanted[3] = {"_c", "_p", "step_num"};
    int64_t *slots[3];
    int found[3] = {0, 0, 0};
    PyObject *key, *name;
    Py_ssize_t pos = 0;
    slots[0] = &w->ids.consumed;
    slots[1] = &w->ids.produced;
    slots[2] = &w->ids.step_num;
    for (i = 0; i < stat_meta->n; i++) {
        int64_t k;
        Rd n;
        int rc;
        if (parse_stat_meta_entry(stat_meta->items[i], &k, &n) < 0)
            return -1;
        key = PyLong_FromLongLong(k);
        name = PyUnicode_DecodeUTF8((const char *)n.p, n.end - n.p, "strict");
        rc = key == NULL || name == NULL ? -1 : PyDict_SetItem(w->names, key, name);
        Py_XDECREF(key);
        Py_XDECREF(name);
        if (rc < 0)
            return -1;
    }
    w->ids.consumed = w->ids.produced = w->ids.step_num = -1;
    while (PyDict_Next(w->names, &pos, &key, &name)) {
        int j;
        for (j = 0; j < 3; j++) {
            if (PyUnicode_CompareWithASCIIString(name, wanted[j]) != 0)
                continue;
            if (found[j]) /* which one host.py takes depends on protobuf's map order */
                return malformed("two stat metadata of one flow name");
            found[j] = 1;
            *slots[j] = PyLong_AsLongLong(key);
        }
    }
    return 0;
}

/* The event metadata: each entry's kind where kinds_by_name holds its name (read while its bytes
 * are at hand), the index by key. A key given twice (protobuf keeps the last entry; TensorFlow
 * writes each once) is left to protobuf. */
static int
build_table(Walk *w, const Slices *event_meta, PyObject *kinds_by_name, PyObject *skipped)
{
    Table *t = &w->table;
    size_t count = event_meta->n, i;
    int64_t min_key = 0, max_key = 0;
    if (count > 0x3fffffff)
        return malformed("too many event metadata");
    t->metas = PyMem_Calloc(count + 1, sizeof(Meta));
    t->keys = PyMem_Calloc(count + 1, sizeof(int64_t));
    t->names = PyMem_Calloc(count + 1, sizeof(Rd));
    t->displays = PyMem_Calloc(count + 1, sizeof(Rd));
    if (t->metas == NULL || t->keys == NULL || t->names == NULL || t->displays == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < count; i++) {
        Meta *m = &t->metas[i];
        PyObject *name, *kind;
        int rc;
        t->n = i + 1;
        m->code = -3;
        if (parse_event_meta_entry(event_meta->items[i], &t->keys[i], &t->names[i], &t->displays[i]) < 0)
            return -1;
        if (i == 0 || t->keys[i] < min_key)
            min_key = t->keys[i];
        if (i == 0 || t->keys[i] > max_key)
            max_key = t->keys[i];
        name = decode(&t->names[i]);
        if (name == NULL)
            return -1;
        kind = PyDict_GetItemWithError(kinds_by_name, name);
        Py_DECREF(name);
        if (kind == NULL && PyErr_Occurred())
            return -1;
        if (kind != NULL && kind != Py_None) {
            Py_INCREF(kind);
            rc = set_kind(m, kind, skipped);
            Py_DECREF(kind);
            if (rc < 0)
                return -1;
        }
    }
    t->min_key = min_key;
    t->span = (uint64_t)max_key - (uint64_t)min_key + 1;
    t->dense = count > 0 && t->span <= 2 * (uint64_t)count + 1024;
    if (!t->dense) {
        size_t cap = 16;
        while (cap < 2 * count + 1)
            cap *= 2;
        t->mask = cap - 1;
        t->span = cap;
    }
    t->index = PyMem_Malloc((size_t)t->span * sizeof(int32_t));
    if (t->index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(t->index, 0xff, (size_t)t->span * sizeof(int32_t));
    for (i = 0; i < count; i++) {
        int32_t *slot = table_slot(t, t->keys[i]);
        if (*slot >= 0)
            return malformed("an event metadata key given twice");
        *slot = (int32_t)i;
    }
    return 0;
}

/* The kernels whose start the trace lost (host.py's _read_lines, after its lines): each completion with
 * no start of its _p becomes a kernel of no step, at the completion's start, with no time. Returns how
 * many, or -1. */
static Py_ssize_t
add_lost_starts(Walk *w)
{
    Py_ssize_t lost = 0;
    size_t i;
    for (i = 0; i < w->n_dones; i++) {
        Done *d = &w->dones[i];
        PyObject *consumed, *stats, *name, *type, *key;
        int known, rc;
        if (d->consumed.bits == 0)
            continue;
        consumed = int_obj(d->consumed);
        if (consumed == NULL)
            return -1;
        known = PySet_Contains(w->started, consumed);
        Py_DECREF(consumed);
        if (known < 0)
            return -1;
        if (known)
            continue;
        stats = event_stats(&d->ev, w->names);
        if (stats == NULL)
            return -1;
        name = stats_str(stats, "name");
        type = stats_str(stats, "kernel_type");
        Py_DECREF(stats);
        key = name == NULL || type == NULL ? NULL : PyTuple_Pack(2, name, type);
        Py_XDECREF(name);
        Py_XDECREF(type);
        if (key == NULL)
            return -1;
        untrack_names(key);
        set_line_base(w, d->ts);
        rc = add_kernel(w, key, d->start, 0, zero_obj, Py_None);
        Py_DECREF(key);
        if (rc < 0)
            return -1;
        lost++;
    }
    return lost;
}

static PyObject *
executions_list(Walk *w)
{
    PyObject *out = PyList_New(w->n_executions);
    Py_ssize_t i;
    if (out == NULL)
        return NULL;
    for (i = 0; i < w->n_executions; i++) {
        Execution *e = &w->executions[i];
        PyObject *t = Py_BuildValue("(OOOLOO)", e->name, e->is_function ? Py_True : Py_False, e->start,
                                    (long long)e->duration, e->contexts, e->xla ? Py_True : Py_False);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *
hostwalk_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    PyObject *kinds_by_name, *kind_of_name, *skipped, *result = NULL;
    Walk w;
    Slices lines = {NULL, 0, 0}, event_meta = {NULL, 0, 0}, stat_meta = {NULL, 0, 0};
    Rd r;
    size_t i;
    int rc = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!OO:walk", &buf, &PyDict_Type, &kinds_by_name, &kind_of_name, &skipped))
        return NULL;
    memset(&w, 0, sizeof w);
    w.names = PyDict_New();
    w.kernels = PyList_New(0);
    w.parents = PyDict_New();
    w.outside = PySet_New(NULL);
    w.steps = PySet_New(NULL);
    w.pool = PyList_New(0);
    w.started = PySet_New(NULL);
    w.done_at = PyDict_New();
    if (w.started == NULL || w.done_at == NULL || w.pool == NULL || w.names == NULL || w.kernels == NULL || w.parents == NULL || w.outside == NULL || w.steps == NULL)
        goto done;
    r.p = buf.buf;
    r.end = r.p + buf.len;
    if (read_plane_fields(r, &lines, &event_meta, &stat_meta) < 0 || read_names(&w, &stat_meta) < 0
        || build_table(&w, &event_meta, kinds_by_name, skipped) < 0
        || classify_rest(&w, kinds_by_name, kind_of_name, skipped) < 0)
        goto done;
    for (i = 0; i < lines.n; i++) {
        rc = read_line(&w, lines.items[i]);
        if (rc != 0)
            break;
    }
    if (rc < 0)
        goto done;
    if (rc == NEED_LINKS) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    {
        Py_ssize_t lost = add_lost_starts(&w);
        PyObject *executions = lost < 0 ? NULL : executions_list(&w);
        if (executions != NULL) {
            result = Py_BuildValue("(OOOOOLnO)", w.kernels, executions, w.parents, w.outside, w.steps, w.host_events,
                                   lost, w.done_at);
            Py_DECREF(executions);
        }
    }
done:
    for (i = 0; i < (size_t)w.n_executions; i++) {
        Py_DECREF(w.executions[i].name);
        Py_DECREF(w.executions[i].start);
        Py_DECREF(w.executions[i].contexts);
    }
    PyMem_Free(w.executions);
    PyMem_Free(w.spans);
    PyMem_Free(w.dones);
    Py_XDECREF(w.started);
    Py_XDECREF(w.done_at);
    table_free(&w.table);
    PyMem_Free(lines.items);
    PyMem_Free(event_meta.items);
    PyMem_Free(stat_meta.items);
    Py_XDECREF(w.names);
    Py_XDECREF(w.kernels);
    Py_XDECREF(w.parents);
    Py_XDECREF(w.outside);
    Py_XDECREF(w.steps);
    Py_XDECREF(w.pool);
    PyBuffer_Release(&buf);
    return result;
}

/* planes(data): each top-level XPlane's (name, start, end) within the serialized XSpace. */
static PyObject *
hostwalk_planes(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    PyObject *out;
    Rd r;
    const uint8_t *base;
    (void)self;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    out = PyList_New(0);
    if (out == NULL)
        goto fail;
    base = buf.buf;
    r.p = base;
    r.end = base + buf.len;
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        Rd s, plane, name = {NULL, NULL};
        PyObject *name_obj, *t;
        if (rd_tag(&r, &field, &wire) < 0)
            goto fail;
        if (field >= 2 && field <= 4) {
            if (wire != 2) {
                malformed("unexpected wire type");
                goto fail;
            }
            if (rd_string(&r, &s) < 0)
                goto fail;
            continue;
        }
        if (field != 1) {
            if (skip_field(&r, wire) < 0)
                goto fail;
            continue;
        }
        if (wire != 2) {
            malformed("unexpected wire type");
            goto fail;
        }
        if (rd_bytes(&r, &plane) < 0)
            goto fail;
        s = plane;
        while (s.p < s.end) { /* the plane's name; the rest is read with the plane */
            Rd value;
            if (rd_tag(&s, &field, &wire) < 0)
                goto fail;
            if (field == 2) {
                if (wire != 2) {
                    malformed("unexpected wire type");
                    goto fail;
                }
                if (rd_string(&s, &value) < 0)
                    goto fail;
                name = value;
            }
            else if (skip_field(&s, wire) < 0)
                goto fail;
        }
        name_obj = PyUnicode_DecodeUTF8((const char *)name.p, name.end - name.p, "strict");
        if (name_obj == NULL)
            goto fail;
        t = Py_BuildValue("(Nnn)", name_obj, (Py_ssize_t)(plane.p - base), (Py_ssize_t)(plane.end - base));
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    PyBuffer_Release(&buf);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ------------------------------------------------------------------ the builder's hot loop */

/* add_kernels(): tfdevices/verify/building.py's _add_kernels loop, compiled. Each op record is made as
 * records.py's _make_op makes it (object.__new__, then each slot set), its slots written directly: the
 * record type's layout is checked on every call against the fields below, and where it differs the
 * call declines (returns None) and the Python loop runs. */

#if PY_VERSION_HEX >= 0x030C0000
#define OBJECT_SLOT Py_T_OBJECT_EX
#define SLOT_READONLY Py_READONLY
#else
#include <structmember.h>
#define OBJECT_SLOT T_OBJECT_EX
#define SLOT_READONLY READONLY
#endif

/* OpPlacement's fields, in the order add_kernels fills them. */
enum {
    F_NAME = 0, F_TYPE, F_DEVICE, F_REQUESTED, F_CALL, F_KERNEL, F_KERNEL_NAME, F_START, F_DURATION, F_LAUNCH,
    F_KERNELS, N_OP_FIELDS
};
static const char *const op_fields[N_OP_FIELDS] = {
    "name", "type", "device", "requested", "call", "kernel", "kernel_name", "start_us", "duration_us", "launch_us",
    "kernels",
};

static PyObject *thousand_obj;    /* the int 1000 */
static PyObject *empty_tuple_obj; /* () */

/* Whether ``names`` (a tuple or, with ``keys``, a dict's keys) is op_fields, in order: 1, 0 (not), -1 (error). */
static int
names_are_fields(PyObject *names, int keys)
{
    Py_ssize_t i = 0, pos = 0;
    PyObject *name, *value;
    if (keys ? !PyDict_CheckExact(names) || PyDict_GET_SIZE(names) != N_OP_FIELDS
             : !PyTuple_CheckExact(names) || PyTuple_GET_SIZE(names) != N_OP_FIELDS)
        return 0;
    for (i = 0; i < N_OP_FIELDS; i++) {
        if (keys) {
            if (!PyDict_Next(names, &pos, &name, &value))
                return 0;
        }
        else
            name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, op_fields[i]) != 0)
            return 0;
    }
    return 1;
}

/* Whether ``type`` is a plain slotted record of op_fields (each an object slot, set by its own member
 * descriptor, nothing else in its instances): 1 with each field's offset in ``offsets``, 0 (it is not:
 * the caller declines), -1 (error). */
static int
op_layout(PyObject *type, Py_ssize_t offsets[N_OP_FIELDS])
{
    PyTypeObject *t;
    PyObject *names;
    PyMemberDef *m;
    Py_ssize_t n = 0;
    int i, ok;
    if (!PyType_Check(type))
        return 0;
    t = (PyTypeObject *)type;
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_base != &PyBaseObject_Type || t->tp_itemsize != 0
        || t->tp_dictoffset != 0 || t->tp_weaklistoffset != 0 || t->tp_alloc == NULL || t->tp_members == NULL
        || t->tp_dict == NULL || (t->tp_flags & Py_TPFLAGS_IS_ABSTRACT))
        return 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
    if (t->tp_flags & Py_TPFLAGS_MANAGED_DICT)
        return 0;
#endif
    for (i = 0; i < 2; i++) {
        names = PyObject_GetAttrString(type, i == 0 ? "__slots__" : "__dataclass_fields__");
        if (names == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            return 0;
        }
        ok = names_are_fields(names, i == 1);
        Py_DECREF(names);
        if (ok <= 0)
            return ok;
    }
    for (i = 0; i < N_OP_FIELDS; i++)
        offsets[i] = -1;
    for (m = t->tp_members; m->name != NULL; m++, n++) {
        PyObject *descr;
        for (i = 0; i < N_OP_FIELDS && strcmp(m->name, op_fields[i]) != 0; i++)
            ;
        if (i == N_OP_FIELDS || offsets[i] != -1 || m->type != OBJECT_SLOT || (m->flags & SLOT_READONLY)
            || m->offset < (Py_ssize_t)sizeof(PyObject) || m->offset + (Py_ssize_t)sizeof(PyObject *) > t->tp_basicsize
            || m->offset % (Py_ssize_t)sizeof(PyObject *) != 0)
            return 0;
        descr = PyDict_GetItemString(t->tp_dict, m->name); /* borrowed; the class's own attribute */
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)descr)->d_member != m || PyDescr_TYPE(descr) != t)
            return 0;
        offsets[i] = m->offset;
    }
    return n == N_OP_FIELDS;
}

/* Python's ``a, b, ... = obj`` for ``n`` names: new references in ``out``, or -1 with Python's error. */
static int
unpack(PyObject *obj, Py_ssize_t n, PyObject **out)
{
    PyObject *it, *extra;
    Py_ssize_t i;
    if (PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == n) {
        for (i = 0; i < n; i++) {
            out[i] = PyTuple_GET_ITEM(obj, i);
            Py_INCREF(out[i]);
        }
        return 0;
    }
    it = PyObject_GetIter(obj);
    if (it == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError) && Py_TYPE(obj)->tp_iter == NULL && !PySequence_Check(obj)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object", Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    for (i = 0; i < n; i++) {
        out[i] = PyIter_Next(it);
        if (out[i] == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %zd, got %zd)", n, i);
            goto fail;
        }
    }
    extra = PyIter_Next(it);
    if (extra != NULL) {
        Py_DECREF(extra);
        PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %zd)", n);
        goto fail;
    }
    if (PyErr_Occurred())
        goto fail;
    Py_DECREF(it);
    return 0;
fail:
    while (i-- > 0)
        Py_CLEAR(out[i]);
    Py_DECREF(it);
    return -1;
}

/* ``x // 1000 / 1000`` as Python computes it for an int in 64 bits; NULL without an error: out of range. */
static PyObject *
us_of_int64(int64_t x)
{
    int64_t q = x / 1000;
    if (x % 1000 != 0 && x < 0)
        q--; /* floor division */
    if (q > ((int64_t)1 << 53) || q < -((int64_t)1 << 53))
        return NULL; /* not exact in a double: Python's own division rounds it */
    return PyFloat_FromDouble((double)q / 1000.0); /* int / int: correctly rounded, as IEEE division of exact operands */
}

/* ``x // 1000 / 1000`` as Python computes it, by the number protocol where ``x`` is not a 64-bit int. */
static PyObject *
us_of(PyObject *x)
{
    PyObject *q, *us;
    if (PyLong_CheckExact(x)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (!overflow && !(v == -1 && PyErr_Occurred()) && (us = us_of_int64((int64_t)v)) != NULL)
            return us;
        if (PyErr_Occurred())
            return NULL;
    }
    q = PyNumber_FloorDivide(x, thousand_obj);
    if (q == NULL)
        return NULL;
    us = PyNumber_TrueDivide(q, thousand_obj);
    Py_DECREF(q);
    return us;
}

/* ``(begin - origin) // 1000 / 1000``. */
static PyObject *
start_us(PyObject *begin, PyObject *origin)
{
    PyObject *d, *us;
    if (PyLong_CheckExact(begin) && PyLong_CheckExact(origin)) {
        int o1, o2;
        long long b = PyLong_AsLongLongAndOverflow(begin, &o1), o = PyLong_AsLongLongAndOverflow(origin, &o2);
        long long diff;
        if (PyErr_Occurred())
            return NULL;
        if (!o1 && !o2 && (o >= 0 ? b >= LLONG_MIN + o : b <= LLONG_MAX + o) /* b - o does not overflow */
            && (us = us_of_int64((int64_t)(diff = b - o))) != NULL)
            return us;
        if (PyErr_Occurred())
            return NULL;
    }
    d = PyNumber_Subtract(begin, origin);
    if (d == NULL)
        return NULL;
    us = us_of(d);
    Py_DECREF(d);
    return us;
}

typedef struct {
    PyObject *known, *miss, *device, *index, *origin, *spans, *ops, *transfers, *collectives;
    PyTypeObject *op_type;
    Py_ssize_t offsets[N_OP_FIELDS];
} Adding;

/* A value that holds no reference: a str, int or float (exactly), None or (). */
static int
atomic(PyObject *v)
{
    return v == Py_None || PyUnicode_CheckExact(v) || PyFloat_CheckExact(v) || PyLong_CheckExact(v) ||
           (PyTuple_CheckExact(v) && PyTuple_GET_SIZE(v) == 0);
}

/* One op record, appended to ``ops``: ``op`` is (op name, model op, requested device). */
static int
append_op(Adding *a, PyObject *op, PyObject *kind, PyObject *name, PyObject *start, PyObject *duration)
{
    PyObject *f[3], *record;
    PyObject *values[N_OP_FIELDS];
    int i, rc;
    if (unpack(op, 3, f) < 0)
        return -1;
    values[F_NAME] = f[0];
    values[F_TYPE] = f[1];
    values[F_DEVICE] = a->device;
    values[F_REQUESTED] = f[2];
    values[F_CALL] = a->index;
    values[F_KERNEL] = kind;
    values[F_KERNEL_NAME] = name;
    values[F_START] = start;
    values[F_DURATION] = duration;
    values[F_LAUNCH] = Py_None;
    values[F_KERNELS] = empty_tuple_obj;
    record = a->op_type->tp_alloc(a->op_type, 0); /* what object.__new__ does: zeroed slots, tracked by the collector */
    if (record == NULL) {
        rc = -1;
        goto done;
    }
    for (i = 0; i < N_OP_FIELDS; i++) {
        Py_INCREF(values[i]);
        *(PyObject **)((char *)record + a->offsets[i]) = values[i];
    }
    /* A record of strings, numbers, None and () can be part of no reference cycle: the collector need not
     * visit it (CPython leaves tuples of such values alone too). Tracked, the records of each capture would
     * count towards the full collections that walk every object of the process (TensorFlow's included). */
    for (i = 0; i < N_OP_FIELDS && atomic(values[i]); i++)
        ;
    if (i == N_OP_FIELDS)
        PyObject_GC_UnTrack(record);
    rc = PyList_Append(a->ops, record);
    Py_DECREF(record);
done:
    for (i = 0; i < 3; i++)
        Py_DECREF(f[i]);
    return rc;
}

/* One kernel (key, start_ps, duration_ps, context, stats), as one turn of _add_kernels' loop. */
static int
add_one(Adding *a, PyObject *kernel)
{
    PyObject *k[5], *placed, *pc[2] = {NULL, NULL}, *start = NULL, *duration = NULL, *nk[2] = {NULL, NULL};
    PyObject *ops, *it = NULL, *op;
    int rc = -1, i, truth;
    if (unpack(kernel, 5, k) < 0)
        return -1;
    placed = PyDict_GetItemWithError(a->known, k[0]); /* known.get(key) */
    if (placed == NULL && PyErr_Occurred())
        goto done;
    if (placed == NULL || placed == Py_None)
        placed = PyObject_CallOneArg(a->miss, k[0]);
    else
        Py_INCREF(placed);
    if (placed == NULL)
        goto done;
    i = unpack(placed, 2, pc);
    Py_DECREF(placed);
    if (i < 0)
        goto done;
    ops = pc[0];
    if (PyTuple_CheckExact(ops) && PyTuple_GET_SIZE(ops) == 0 && k[4] == Py_None) { /* ops is _SKIPPED */
        rc = 0;
        goto done;
    }
    start = start_us(k[1], a->origin);
    if (start == NULL)
        goto done;
    duration = us_of(k[2]);
    if (duration == NULL)
        goto done;
    if (a->spans != Py_None) {
        PyObject *end = PyNumber_Add(k[1], k[2]), *span;
        if (end == NULL)
            goto done;
        span = PyTuple_New(2);
        if (span == NULL) {
            Py_DECREF(end);
            goto done;
        }
        Py_INCREF(k[1]);
        PyTuple_SET_ITEM(span, 0, k[1]);
        PyTuple_SET_ITEM(span, 1, end);
        i = PyList_Append(a->spans, span);
        Py_DECREF(span);
        if (i < 0)
            goto done;
    }
    if (k[4] != Py_None) { /* a transfer: Python makes its record */
        PyObject *t = PyTuple_Pack(3, kernel, start, duration);
        if (t == NULL)
            goto done;
        i = PyList_Append(a->transfers, t);
        Py_DECREF(t);
        rc = i;
        goto done;
    }
    if (unpack(k[0], 2, nk) < 0) /* name, kind = key */
        goto done;
    if (PyTuple_CheckExact(ops)) {
        for (i = 0; i < PyTuple_GET_SIZE(ops); i++)
            if (append_op(a, PyTuple_GET_ITEM(ops, i), nk[1], nk[0], start, duration) < 0)
                goto done;
    }
    else {
        it = PyObject_GetIter(ops);
        if (it == NULL)
            goto done;
        while ((op = PyIter_Next(it)) != NULL) {
            i = append_op(a, op, nk[1], nk[0], start, duration);
            Py_DECREF(op);
            if (i < 0)
                goto done;
        }
        if (PyErr_Occurred())
            goto done;
    }
    truth = PyObject_IsTrue(pc[1]);
    if (truth < 0 || (truth && PyList_Append(a->collectives, kernel) < 0))
        goto done;
    rc = 0;
done:
    for (i = 0; i < 5; i++)
        Py_DECREF(k[i]);
    for (i = 0; i < 2; i++) {
        Py_XDECREF(pc[i]);
        Py_XDECREF(nk[i]);
    }
    Py_XDECREF(start);
    Py_XDECREF(duration);
    Py_XDECREF(it);
    return rc;
}

/* add_kernels(kernels, known, miss, device, index, origin, spans, ops, op_type) -> (transfers, collectives) or None. */
static PyObject *
hostwalk_add_kernels(PyObject *self, PyObject *args)
{
    Adding a;
    PyObject *kernels, *op_type, *it, *kernel, *result = NULL;
    int layout;
    (void)self;
    memset(&a, 0, sizeof a);
    if (!PyArg_ParseTuple(args, "OO!OOOOOO!O:add_kernels", &kernels, &PyDict_Type, &a.known, &a.miss, &a.device,
                          &a.index, &a.origin, &a.spans, &PyList_Type, &a.ops, &op_type))
        return NULL;
    if (a.spans != Py_None && !PyList_Check(a.spans)) {
        PyErr_SetString(PyExc_TypeError, "add_kernels: spans must be a list or None");
        return NULL;
    }
    layout = op_layout(op_type, a.offsets);
    if (layout < 0)
        return NULL;
    if (layout == 0)
        Py_RETURN_NONE; /* not the record this loop makes: the caller's Python loop runs */
    a.op_type = (PyTypeObject *)op_type;
    it = PyObject_GetIter(kernels);
    if (it == NULL)
        return NULL;
    a.transfers = PyList_New(0);
    a.collectives = PyList_New(0);
    if (a.transfers == NULL || a.collectives == NULL)
        goto done;
    while ((kernel = PyIter_Next(it)) != NULL) {
        int rc = add_one(&a, kernel);
        Py_DECREF(kernel);
        if (rc < 0)
            goto done;
    }
    if (PyErr_Occurred())
        goto done;
    result = PyTuple_Pack(2, a.transfers, a.collectives);
done:
    Py_DECREF(it);
    Py_XDECREF(a.transfers);
    Py_XDECREF(a.collectives);
    return result;
}

static PyMethodDef methods[] = {
    {"planes", hostwalk_planes, METH_O,
     "planes(data) -> [(name, start, end)]: each XPlane of a serialized XSpace, by its bytes' offsets."},
    {"walk", hostwalk_walk, METH_VARARGS,
     "walk(plane, kinds_by_name, kind_of_name, skipped_kind) -> (kernels, executions, parents, outside, steps, "
     "host_events) or None: the host plane's first walk (None: a kernel ran outside any recorded step)."},
    {"add_kernels", hostwalk_add_kernels, METH_VARARGS,
     "add_kernels(kernels, known, miss, device, index, origin, spans, ops, op_type) -> (transfers, collectives) or "
     "None: building.py's _add_kernels loop, op records appended to ops; None: op_type is not the record it makes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tfdevices.verify._hostwalk",
    "The host plane's first walk, compiled: reads a serialized XSpace's wire format directly.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__hostwalk(void)
{
    PyObject *m = PyModule_Create(&module), *codes;
    if (m == NULL)
        return NULL;
    zero_obj = PyLong_FromLong(0);
    thousand_obj = PyLong_FromLong(1000);
    empty_tuple_obj = PyTuple_New(0);
    codes = Py_BuildValue("(iiiiiiiiiii)", K_KERNEL, K_PROCESS, K_ASYNC, K_EAGER, K_RUN, K_ASYNC_DONE, K_DONE_CALLBACK,
                          K_SCHEDULED, K_REGION_START, K_REGION_STOP, K_STEP);
    if (zero_obj == NULL || thousand_obj == NULL || empty_tuple_obj == NULL || codes == NULL || PyModule_AddObject(m, "CODES", codes) < 0) {
        Py_XDECREF(codes);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
