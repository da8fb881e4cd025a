# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled kernel of a vector set's graph: distances, the layer walks and link selection.

A line-for-line port of the pure-Python reference (``quant.distances``, ``walk.View``,
``build._select``/``_take_link``) over the same numpy arrays, so both build the same graph from
the same levels and give the same scores: each distance is computed in the order of operations
``quant``'s docstring fixes, results and candidates are ordered by (distance, slot), walks expand
``BATCH`` candidates at a time and cut their results back only when ``PRUNE_SLACK`` more piled up,
as the reference does. ``kernel`` chooses between the two (``PION_PURE=1`` forces the reference).

Threads: ``search`` and ``layer_candidates`` read a snapshot of the arrays taken when they start
(as ``walk.View`` does), skip any link outside it, and release the GIL while they walk level 0
without a filter, so a search in a worker thread runs beside the event loop. ``select`` writes
links and runs on the loop, with the GIL, as the reference does.
"""

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from libc.math cimport INFINITY, copysignf, fabsf, floorf
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort, realloc
from libc.string cimport memset

import numpy as np

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define PION_POPCOUNT64(x) __builtin_popcountll(x)
    #else
    static int PION_POPCOUNT64(unsigned long long x) {
        x = x - ((x >> 1) & 0x5555555555555555ULL);
        x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
        x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
        return (int)((x * 0x0101010101010101ULL) >> 56);
    }
    #endif

    /* x86-64 with gcc: an AVX2 copy of each distance chosen at load time where the CPU has it;
       the same operations in the same order (no fused multiply-add: -ffp-contract=off), so the
       same bits as the baseline copy and as quant.py (glibc: the copies are chosen by an ifunc) */
    #if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__GLIBC__)
    #define PION_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
    #else
    #define PION_CLONES
    #endif

    /* The Q8 integer dot with AVX-VNNI (vpdpbusd: unsigned x signed bytes summed into int32),
       chosen at import where the CPU has it (pion_simd_init). vpdpbusd wants one operand
       unsigned: a + 128 is, so sum(a * b) = sum((a ^ 0x80) * b) - 128 * sum(b), every term an
       exact integer (no saturation: this form does not saturate), so the same int as the plain
       loop for any bytes, -128 included: the distance keeps its bits. */
    #if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    #include <immintrin.h>
    #define PION_HAVE_VNNI 1
    __attribute__((target("avx2,avxvnni"))) static int pion_dot_i8_vnni(const signed char *a, const signed char *b, int dim) {
        __m256i acc = _mm256_setzero_si256(), sumb = _mm256_setzero_si256();
        const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi8(1);
        int i = 0;
        for (; i + 32 <= dim; i += 32) {
            __m256i va = _mm256_loadu_si256((const __m256i *)(a + i));
            __m256i vb = _mm256_loadu_si256((const __m256i *)(b + i));
            acc = _mm256_dpbusd_avx_epi32(acc, _mm256_xor_si256(va, flip), vb);
            sumb = _mm256_dpbusd_avx_epi32(sumb, ones, vb);
        }
        acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(sumb, 7));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        int dot = _mm_cvtsi128_si32(s);
        for (; i < dim; i++) dot += (int)a[i] * (int)b[i];
        return dot;
    }
    #else
    #define PION_HAVE_VNNI 0
    static int pion_dot_i8_vnni(const signed char *a, const signed char *b, int dim) { (void)a; (void)b; (void)dim; return 0; }
    #endif

    /* 1 when the Q8 dot runs on AVX-VNNI (set once at import; tests switch it off and on) */
    static int pion_use_vnni = 0;

    static int pion_simd_init(void) {
    #if PION_HAVE_VNNI
        __builtin_cpu_init();
        pion_use_vnni = __builtin_cpu_supports("avxvnni") && __builtin_cpu_supports("avx2");
    #endif
        return pion_use_vnni;
    }

    static int pion_simd_set(int on) {
        if (!on) { pion_use_vnni = 0; return 0; }
        return pion_simd_init();
    }

    PION_CLONES static int pion_dot_i8(const signed char *a, const signed char *b, int dim) {
        int dot = 0;
        for (int i = 0; i < dim; i++) dot += (int)a[i] * (int)b[i];
        return dot;
    }

    /* quant.py's Q8 distance: the exact integer dot, then Redis's float32 scaling */
    static inline float pion_dist_q8(const signed char *a, const signed char *b, int dim, float range_a, float qscale) {
        int dot = pion_use_vnni ? pion_dot_i8_vnni(a, b, dim) : pion_dot_i8(a, b, dim);
        float scale = (range_a / 127.0f) * qscale;
        float dotf = (float)dot * scale;
        return 1.0f - dotf;
    }

    /* quant.py's F32 distance: exact float64 products in 8 lanes, a fixed tree, float32 */
    PION_CLONES static float pion_dist_f32(const float *a, const float *b, int dim) {
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int head = dim - dim % 8, i = 0, j;
        if (head) {
            for (j = 0; j < 8; j++) acc[j] = (double)a[j] * (double)b[j];
            i = 8;
        }
        for (; i < head; i += 8)
            for (j = 0; j < 8; j++) acc[j] += (double)a[i + j] * (double)b[i + j];
        for (j = 0; head + j < dim; j++) acc[j] += (double)a[head + j] * (double)b[head + j];
        double t = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        float dotf = (float)t;
        return 1.0f - dotf;
    }

    /* quant.py's BIN distance: the Hamming distance times float32(2 / dim) */
    PION_CLONES static float pion_dist_bin(const unsigned long long *a, const unsigned long long *b, int width, float unit) {
        long long ham = 0;
        for (int w = 0; w < width; w++) ham += PION_POPCOUNT64(a[w] ^ b[w]);
        return (float)ham * unit;
    }
    """
    float pion_dist_q8(const signed char *a, const signed char *b, int dim, float range_a, float qscale) nogil
    int pion_simd_init() nogil
    int pion_simd_set(int on) nogil
    int pion_use_vnni
    float pion_dist_f32(const float *a, const float *b, int dim) nogil
    float pion_dist_bin(const unsigned long long *a, const unsigned long long *b, int width, float unit) nogil

cdef enum:
    F32 = 0
    Q8 = 1
    BIN = 2

#: as walk.py: candidates a plain walk expands per step (twice that past ef 100), results let
#: pile up past ef before a cut
pion_simd_init()


cdef bint _simd_on():
    return pion_use_vnni != 0


def simd():
    """Which code computes the Q8 integer dot: ``"avxvnni"`` or ``"baseline"`` (the plain loop,
    AVX2-vectorized by the compiler where it can). Both give the same integer, so the same bits."""
    return "avxvnni" if _simd_on() else "baseline"


def use_simd(bint on):
    """Turn the AVX-VNNI dot off (False) or back on where the CPU has it; for tests comparing
    the two. Returns whether it is on."""
    return bool(pion_simd_set(1 if on else 0))


cdef int BATCH = 4
cdef int PRUNE_SLACK = 16


# -- the arrays a call works on, and its query -------------------------------------------------

cdef struct Store:
    int quant
    int dim
    int width
    int m
    int m0
    Py_ssize_t cap
    const float *rf
    const signed char *rq
    const unsigned long long *rb
    const float *ranges
    int32_t *links0
    int32_t *n0
    const int8_t *levels
    PyObject *upper  # borrowed: the graph's dict of upper-level links (read with the GIL)
    # the query, encoded as the rows are
    const float *qf
    const signed char *qq
    const unsigned long long *qb
    float qscale
    float bin_unit


cdef class _Arrays:
    """Holds a snapshot's arrays (and the query's) alive for the duration of one call."""
    cdef object keep
    cdef Store st
    cdef signed char *qbuf

    def __dealloc__(self):
        if self.qbuf != NULL:
            free(self.qbuf)


cdef _Arrays _snapshot(object rows, object ranges, object links0, object n0, object levels, object upper,
                       int quant, int dim, int m):
    cdef _Arrays a = _Arrays()
    memset(&a.st, 0, sizeof(Store))
    cdef const float[:, ::1] rf
    cdef const signed char[:, ::1] rq
    cdef const unsigned long long[:, ::1] rb
    cdef const float[::1] rg = ranges
    cdef int32_t[:, ::1] l0 = links0
    cdef int32_t[::1] c0 = n0
    cdef const int8_t[::1] lv = levels
    a.keep = (rows, ranges, links0, n0, levels, upper)
    a.st.quant = quant
    a.st.dim = dim
    a.st.m = m
    a.st.m0 = 2 * m
    a.st.cap = c0.shape[0]
    a.st.rf = NULL
    a.st.rq = NULL
    a.st.rb = NULL
    if quant == F32:
        rf = rows
        a.st.width = rf.shape[1]
        a.st.rf = &rf[0, 0] if rf.shape[0] else NULL
    elif quant == Q8:
        rq = rows
        a.st.width = rq.shape[1]
        a.st.rq = &rq[0, 0] if rq.shape[0] else NULL
    else:
        rb = rows
        a.st.width = rb.shape[1]
        a.st.rb = &rb[0, 0] if rb.shape[0] else NULL
    a.st.ranges = &rg[0] if rg.shape[0] else NULL
    a.st.links0 = &l0[0, 0] if l0.shape[0] else NULL
    a.st.n0 = &c0[0] if c0.shape[0] else NULL
    a.st.levels = &lv[0] if lv.shape[0] else NULL
    a.st.upper = <PyObject *> upper
    a.st.bin_unit = <float> (2.0 / dim)
    return a


cdef _set_query(_Arrays a, object probe):
    """The probe as ``quant.probe`` makes it: Q8 float32 ints then range / 127; F32 floats; BIN words."""
    cdef const float[::1] pf
    cdef const unsigned long long[::1] pb
    cdef int i, dim = a.st.dim
    if a.st.quant == Q8:
        pf = probe
        if pf.shape[0] != dim + 1:
            raise ValueError("a Q8 probe has dim + 1 items")
        a.qbuf = <signed char *> malloc(<size_t> (dim if dim > 0 else 1))
        if a.qbuf == NULL:
            raise MemoryError()
        for i in range(dim):
            a.qbuf[i] = <signed char> pf[i]
        a.st.qq = a.qbuf
        a.st.qscale = pf[dim]
    elif a.st.quant == F32:
        pf = probe
        if pf.shape[0] != dim:
            raise ValueError("an F32 probe has dim items")
        a.st.qf = &pf[0]
    else:
        pb = probe
        if pb.shape[0] != a.st.width:
            raise ValueError("a BIN probe has one word per 64 dimensions")
        a.st.qb = &pb[0]
    a.keep = (a.keep, probe)


cdef _Arrays _of_graph(object g, object probe):
    cdef _Arrays a = _snapshot(g.rows, g.ranges, g.links0, g.n0, g.levels, g.upper, g.quant, g.dim, g.m)
    if probe is not None:
        _set_query(a, probe)
    return a


cdef inline float _dist(const Store *st, Py_ssize_t slot) noexcept nogil:
    """The query's distance to a stored row."""
    if st.quant == Q8:
        return pion_dist_q8(st.rq + slot * st.width, st.qq, st.dim, st.ranges[slot], st.qscale)
    if st.quant == F32:
        return pion_dist_f32(st.rf + slot * st.width, st.qf, st.dim)
    return pion_dist_bin(st.rb + slot * st.width, st.qb, st.width, st.bin_unit)


cdef inline float _node_dist(const Store *st, Py_ssize_t probe_slot, Py_ssize_t slot) noexcept nogil:
    """``quant.distances(rows[slot], node_probe(probe_slot))``: a stored node as the query."""
    cdef float qscale
    if st.quant == Q8:
        qscale = st.ranges[probe_slot] / <float> 127.0
        return pion_dist_q8(st.rq + slot * st.width, st.rq + probe_slot * st.width, st.dim, st.ranges[slot], qscale)
    if st.quant == F32:
        return pion_dist_f32(st.rf + slot * st.width, st.rf + probe_slot * st.width, st.dim)
    return pion_dist_bin(st.rb + slot * st.width, st.rb + probe_slot * st.width, st.width, st.bin_unit)


def distances(rows, ranges, probe, int quant, int dim, slots):
    """``quant.distances(rows[slots], ranges[slots], probe, quant, dim)``, bit for bit."""
    cdef const float[::1] pf
    cdef const unsigned long long[::1] pb
    cdef Py_ssize_t[::1] idx = np.ascontiguousarray(slots, dtype=np.intp)
    cdef Py_ssize_t i, n = idx.shape[0], cap
    cdef Store st
    cdef const float[:, ::1] rf
    cdef const signed char[:, ::1] rq
    cdef const unsigned long long[:, ::1] rb
    cdef const float[::1] rg = ranges
    cdef signed char *qq = NULL
    out = np.empty(n, dtype=np.float32)
    cdef float[::1] o = out
    if n == 0:
        return out
    memset(&st, 0, sizeof(Store))
    st.quant = quant
    st.dim = dim
    st.ranges = &rg[0]
    st.bin_unit = <float> (2.0 / dim)
    cap = rg.shape[0]
    if quant == Q8:
        rq = rows
        st.width = rq.shape[1]
        st.rq = &rq[0, 0]
        pf = probe
        if pf.shape[0] != dim + 1:
            raise ValueError("a Q8 probe has dim + 1 items")
        qq = <signed char *> malloc(<size_t> (dim if dim > 0 else 1))
        if qq == NULL:
            raise MemoryError()
        for i in range(dim):
            qq[i] = <signed char> pf[i]
        st.qq = qq
        st.qscale = pf[dim]
    elif quant == F32:
        rf = rows
        st.width = rf.shape[1]
        st.rf = &rf[0, 0]
        pf = probe
        if pf.shape[0] != dim:
            raise ValueError("an F32 probe has dim items")
        st.qf = &pf[0]
    else:
        rb = rows
        st.width = rb.shape[1]
        st.rb = &rb[0, 0]
        pb = probe
        if pb.shape[0] != st.width:
            raise ValueError("a BIN probe has one word per 64 dimensions")
        st.qb = &pb[0]
    try:
        for i in range(n):
            if idx[i] < 0 or idx[i] >= cap:
                raise IndexError("slot out of range")
        with nogil:
            for i in range(n):
                o[i] = _dist(&st, idx[i])
    finally:
        if qq != NULL:
            free(qq)
    return out


# -- neighbours -----------------------------------------------------------------------------------


cdef int32_t *_layer_row(const Store *st, int32_t slot, int level, Py_ssize_t *width):
    """The row of ``upper[slot]`` for ``level`` > 0 (its count, then its links; ``width``
    items), or NULL. The graph's dict keeps the array alive; the caller holds the GIL and uses
    the pointer before any Python code can run (no memoryview object: this is the hot path of
    the upper levels)."""
    cdef PyObject *obj = PyDict_GetItem(<object> st.upper, slot)
    cdef Py_buffer view
    cdef int32_t *row = NULL
    if obj == NULL:
        return NULL
    try:
        PyObject_GetBuffer(<object> obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    except Exception:
        return NULL
    if view.ndim == 2 and view.itemsize == 4 and 0 < level <= view.shape[0] and view.shape[1] > 0:
        width[0] = view.shape[1]
        row = <int32_t *> view.buf + (level - 1) * view.shape[1]
    PyBuffer_Release(&view)
    return row


cdef int _upper_links(const Store *st, int32_t node, int level, int32_t *out) noexcept with gil:
    """``node``'s links on ``level`` > 0 (within the snapshot) into ``out``; their count."""
    cdef Py_ssize_t width
    cdef int32_t *row = _layer_row(st, node, level, &width)
    cdef int n, i, k = 0
    cdef int32_t s
    if row == NULL:
        return 0
    n = row[0]
    if n > width - 1:
        n = <int> width - 1
    for i in range(n):
        s = row[1 + i]
        if 0 <= s < st.cap:
            out[k] = s
            k += 1
    return k


cdef inline int _links(const Store *st, int32_t node, int level, int32_t *out) noexcept nogil:
    """``node``'s links on ``level`` (only those within the snapshot) into ``out``; their count."""
    cdef int n, i, k = 0
    cdef int32_t s
    cdef const int32_t *row
    if level > 0:
        return _upper_links(st, node, level, out)
    n = st.n0[node]
    if n > st.m0:
        n = st.m0
    row = st.links0 + <Py_ssize_t> node * st.m0
    for i in range(n):
        s = row[i]
        if 0 <= s < st.cap:
            out[k] = s
            k += 1
    return k


# -- heaps keyed by (distance, slot) ---------------------------------------------------------------

cdef struct Item:
    float d
    int32_t s


cdef inline bint _less(Item a, Item b) noexcept nogil:
    return a.d < b.d or (a.d == b.d and a.s < b.s)


cdef struct Heap:
    Item *items
    Py_ssize_t size
    Py_ssize_t cap


cdef int _heap_init(Heap *h, Py_ssize_t cap) noexcept nogil:
    h.size = 0
    h.cap = cap if cap > 16 else 16
    h.items = <Item *> malloc(h.cap * sizeof(Item))
    return 0 if h.items != NULL else -1


cdef int _heap_push(Heap *h, Item it, bint maxheap) noexcept nogil:
    """Push onto a min-heap (the walk's candidates) or a max-heap (its results)."""
    cdef Py_ssize_t i, parent
    cdef Item *grown
    if h.size == h.cap:
        grown = <Item *> realloc(h.items, 2 * h.cap * sizeof(Item))
        if grown == NULL:
            return -1
        h.items, h.cap = grown, 2 * h.cap
    i = h.size
    h.size += 1
    while i > 0:
        parent = (i - 1) >> 1
        if (_less(h.items[parent], it) if maxheap else _less(it, h.items[parent])):
            h.items[i] = h.items[parent]
            i = parent
        else:
            break
    h.items[i] = it
    return 0


cdef void _sift_down(Heap *h, Item it, bint maxheap) noexcept nogil:
    """Place ``it`` at the root and sift it down (pop / replace-top)."""
    cdef Py_ssize_t i = 0, child, n = h.size
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and (_less(h.items[child], h.items[child + 1]) if maxheap
                              else _less(h.items[child + 1], h.items[child])):
            child += 1
        if (_less(it, h.items[child]) if maxheap else _less(h.items[child], it)):
            h.items[i] = h.items[child]
            i = child
        else:
            break
    h.items[i] = it


cdef inline Item _heap_pop(Heap *h) noexcept nogil:
    cdef Item top = h.items[0]
    h.size -= 1
    if h.size > 0:
        _sift_down(h, h.items[h.size], False)
    return top


# -- a walk's results: walk._Nearest ----------------------------------------------------------------

cdef struct Nearest:
    Heap h       # max-heap of the ef smallest (distance, slot) added so far
    int ef
    Py_ssize_t total
    Py_ssize_t pending
    float worst


cdef int _nearest_init(Nearest *r, int ef) noexcept nogil:
    r.ef = ef
    r.total = 0
    r.pending = 0
    r.worst = INFINITY
    return _heap_init(&r.h, ef + 1)


cdef inline int _nearest_put(Nearest *r, Item it) noexcept nogil:
    if r.h.size < r.ef:
        return _heap_push(&r.h, it, True)
    if _less(it, r.h.items[0]):
        _sift_down(&r.h, it, True)
    return 0


cdef inline void _nearest_added(Nearest *r, Py_ssize_t n) noexcept nogil:
    """After ``n`` >= 1 items were put: walk._Nearest.add's cut, which sets ``worst``."""
    r.total += n
    if r.worst == INFINITY:
        if r.total >= r.ef:
            r.worst = r.h.items[0].d
            r.pending = 0
    else:
        r.pending += n
        if r.pending >= PRUNE_SLACK:
            r.worst = r.h.items[0].d
            r.pending = 0


cdef Py_ssize_t _nearest_sort(Nearest *r) noexcept nogil:
    """Heap-sort the results in place, nearest first (the largest goes last); their count."""
    cdef Py_ssize_t n = r.h.size
    cdef Item *items = r.h.items
    cdef Item top
    while r.h.size > 1:
        top = items[0]
        r.h.size -= 1
        _sift_down(&r.h, items[r.h.size], True)
        items[r.h.size] = top
    r.h.size = n
    return n


cdef list _nearest_hits(Nearest *r):
    """The results nearest first, as (distance, slot)."""
    cdef Py_ssize_t n = _nearest_sort(r), i
    cdef Item *items = r.h.items
    return [(<double> items[i].d, <int> items[i].s) for i in range(n)]


# -- walks: walk.View.greedy, _beam_plain, _beam_filtered -------------------------------------------

cdef struct Walk:
    uint32_t *seen  # per slot: the mark of the last walk that saw it
    uint32_t mark
    int32_t *nb     # one step's new neighbours
    float *ds
    int32_t *buf


cdef int _walk_init(Walk *w, const Store *st) noexcept nogil:
    cdef Py_ssize_t width = 8 * (st.m0 if st.m0 > st.m else st.m) + 8
    w.mark = 0
    w.seen = <uint32_t *> calloc(st.cap if st.cap else 1, sizeof(uint32_t))
    w.nb = <int32_t *> malloc(width * sizeof(int32_t))
    w.ds = <float *> malloc(width * sizeof(float))
    w.buf = <int32_t *> malloc(width * sizeof(int32_t))
    if w.seen == NULL or w.nb == NULL or w.ds == NULL or w.buf == NULL:
        return -1
    return 0


cdef void _walk_free(Walk *w) noexcept nogil:
    free(w.seen)
    free(w.nb)
    free(w.ds)
    free(w.buf)


cdef void _greedy(const Store *st, Walk *w, int level, Item *ep) noexcept nogil:
    """Walk an upper level towards the query (ef = 1), from and into ``ep``."""
    cdef int n, i, k, best
    cdef int32_t s
    w.mark += 1
    w.seen[ep.s] = w.mark
    while True:
        n = _links(st, ep.s, level, w.buf)
        k = 0
        for i in range(n):
            s = w.buf[i]
            if w.seen[s] != w.mark:
                w.seen[s] = w.mark
                w.nb[k] = s
                k += 1
        if k == 0:
            return
        best = 0
        for i in range(k):
            w.ds[i] = _dist(st, w.nb[i])
            if w.ds[i] < w.ds[best]:
                best = i
        if w.ds[best] >= ep.d:
            return
        ep.s = w.nb[best]
        ep.d = w.ds[best]


cdef int _expand(const Store *st, Walk *w, Item *batch, int nbatch, int level) noexcept nogil:
    """The not yet seen neighbours of ``batch`` into ``w.nb`` (each once, marked seen), their
    distances into ``w.ds``; their count."""
    cdef int b, n, i, k = 0
    cdef int32_t s
    for b in range(nbatch):
        n = _links(st, batch[b].s, level, w.buf)
        for i in range(n):
            s = w.buf[i]
            if w.seen[s] != w.mark:
                w.seen[s] = w.mark
                w.nb[k] = s
                k += 1
    for i in range(k):
        w.ds[i] = _dist(st, w.nb[i])
    return k


cdef int _beam_plain(const Store *st, Walk *w, Item *entry, int nentry, int ef, int level,
                     Nearest *found) noexcept nogil:
    """walk.View._beam_plain into ``found`` (initialised here); -1 when out of memory."""
    cdef Heap cand
    cdef Item batch[8]
    cdef Item it
    cdef int size = BATCH if ef <= 100 else 2 * BATCH
    cdef int nbatch, k, i, kept
    if _heap_init(&cand, 64) < 0 or _nearest_init(found, ef) < 0:
        free(cand.items)
        return -1
    w.mark += 1
    for i in range(nentry):
        w.seen[entry[i].s] = w.mark
        if _heap_push(&cand, entry[i], False) < 0 or _nearest_put(found, entry[i]) < 0:
            free(cand.items)
            return -1
    found.total = nentry
    while cand.size and cand.items[0].d <= found.worst:
        batch[0] = _heap_pop(&cand)
        nbatch = 1
        while cand.size and nbatch < size and cand.items[0].d <= found.worst:
            batch[nbatch] = _heap_pop(&cand)
            nbatch += 1
        k = _expand(st, w, batch, nbatch, level)
        if k == 0:
            continue
        kept = 0
        for i in range(k):
            if found.worst == INFINITY or w.ds[i] < found.worst:
                it.d = w.ds[i]
                it.s = w.nb[i]
                if _heap_push(&cand, it, False) < 0 or _nearest_put(found, it) < 0:
                    free(cand.items)
                    return -1
                kept += 1
        if kept:
            _nearest_added(found, kept)
    free(cand.items)
    return 0


cdef list _beam_filtered(const Store *st, Walk *w, Item *entry, int nentry, int ef, int level,
                         object accept, int effort):
    """walk.View._beam_filtered (with the GIL: the filter is Python)."""
    cdef Heap cand
    cdef Nearest found
    cdef Item batch[8]
    cdef Item it
    cdef int nbatch, k, i, passed, grow_all
    cdef Py_ssize_t evaluated = 1
    cdef bint near_mode
    found.h.items = NULL
    if _heap_init(&cand, 64) < 0 or _nearest_init(&found, ef) < 0:
        free(cand.items)
        free(found.h.items)
        raise MemoryError()
    try:
        w.mark += 1
        passed = 0
        for i in range(nentry):
            w.seen[entry[i].s] = w.mark
            if _heap_push(&cand, entry[i], False) < 0:
                raise MemoryError()
            if accept(<int> entry[i].s):
                if _nearest_put(&found, entry[i]) < 0:
                    raise MemoryError()
                passed += 1
        found.total = passed
        while cand.size and cand.items[0].d <= found.worst and not (effort and evaluated >= effort):
            batch[0] = _heap_pop(&cand)
            nbatch = 1
            while cand.size and nbatch < BATCH and cand.items[0].d <= found.worst:
                batch[nbatch] = _heap_pop(&cand)
                nbatch += 1
            evaluated += nbatch
            k = _expand(st, w, batch, nbatch, level)
            if k == 0:
                continue
            near_mode = found.worst != INFINITY
            grow_all = not near_mode or cand.size < ef
            for i in range(k):
                if grow_all or w.ds[i] < found.worst:
                    it.d = w.ds[i]
                    it.s = w.nb[i]
                    if _heap_push(&cand, it, False) < 0:
                        raise MemoryError()
            passed = 0
            for i in range(k):
                if near_mode and not (w.ds[i] < found.worst):
                    continue
                if accept(<int> w.nb[i]):
                    it.d = w.ds[i]
                    it.s = w.nb[i]
                    if _nearest_put(&found, it) < 0:
                        raise MemoryError()
                    passed += 1
            if passed:
                _nearest_added(&found, passed)
        return _nearest_hits(&found)
    finally:
        free(cand.items)
        free(found.h.items)


cdef list _beam(const Store *st, Walk *w, Item *entry, int nentry, int ef, int level, object accept, int effort):
    """One layer search (walk.View.beam); a plain one on level 0 runs without the GIL."""
    cdef Nearest found
    cdef int rc
    if accept is not None:
        return _beam_filtered(st, w, entry, nentry, ef, level, accept, effort)
    found.h.items = NULL
    if level == 0:
        with nogil:
            rc = _beam_plain(st, w, entry, nentry, ef, level, &found)
    else:
        rc = _beam_plain(st, w, entry, nentry, ef, level, &found)
    try:
        if rc < 0:
            raise MemoryError()
        return _nearest_hits(&found)
    finally:
        free(found.h.items)


def search(g, probe, int ef, accept=None, int effort=0, int limit=0, bint clamped=False):
    """Graph.search: up to ``ef`` nearest nodes (nearest first) as (distance, slot, uid); with
    ``limit`` only the first ``limit`` of them (the walk is the same: VSIM's COUNT cuts its
    EF results), with ``clamped`` each distance as ``quant.clamp`` reports it."""
    cdef _Arrays a = _of_graph(g, probe)
    cdef Store *st = &a.st
    cdef Walk w
    cdef Item ep
    cdef int level, top = g.max_level
    cdef Py_ssize_t entry = g.entry
    cdef const int64_t[::1] uids = g.uids
    if entry < 0 or entry >= st.cap or ef <= 0:
        return []
    if _walk_init(&w, st) < 0:
        _walk_free(&w)
        raise MemoryError()
    try:
        ep.s = <int32_t> entry
        ep.d = _dist(st, entry)
        for level in range(top, 0, -1):
            _greedy(st, &w, level, &ep)
        hits = _beam(st, &w, &ep, 1, ef, 0, accept, effort)
    finally:
        _walk_free(&w)
    if limit > 0 and len(hits) > limit:
        hits = hits[:limit]
    if clamped:
        return [(0.0 if d < 0.0 else 2.0 if d > 2.0 else d, s, <long long> uids[s]) for d, s in hits]
    return [(d, s, <long long> uids[s]) for d, s in hits]


def encode_q8(unit):
    """``quant.encode(unit, Q8)`` bit for bit: the largest |component| maps to 127, each
    component scaled by float32(127 / max), rounded half away from zero (C's roundf, as
    ``floor(|x| + 0.5)`` with its sign), clipped to +-127; the range is that largest |component|.
    The same float32 operations in the same order, one pass in C instead of seven numpy calls."""
    cdef const float[::1] u = unit
    cdef Py_ssize_t i, n = u.shape[0]
    cdef float max_abs = 0, a, factor, x
    out = np.zeros(n, dtype=np.int8)
    cdef int8_t[::1] o = out
    with nogil:
        for i in range(n):
            a = fabsf(u[i])
            if a > max_abs:
                max_abs = a
        if max_abs != 0:
            factor = <float> 127.0 / max_abs
            for i in range(n):
                x = u[i] * factor
                x = copysignf(floorf(fabsf(x) + <float> 0.5), x)
                if x > 127:
                    x = 127
                elif x < -127:
                    x = -127
                o[i] = <int8_t> x
    return out, (<double> max_abs if max_abs != 0 else 0.0)


def layer_candidates(g, probe, int level, int ef, int lowest=0):
    """Graph.layer_candidates: candidate lists for levels ``lowest``..min(level, top)."""
    cdef _Arrays a = _of_graph(g, probe)
    cdef Store *st = &a.st
    cdef Walk w
    cdef Item ep
    cdef int lc, top = g.max_level, upto
    cdef Py_ssize_t entry = g.entry
    if entry < 0 or entry >= st.cap:
        return []
    if _walk_init(&w, st) < 0:
        _walk_free(&w)
        raise MemoryError()
    try:
        ep.s = <int32_t> entry
        ep.d = _dist(st, entry)
        for lc in range(top, level, -1):
            _greedy(st, &w, lc, &ep)
        upto = level if level < top else top
        found = [[] for _ in range(upto + 1)]
        for lc in range(upto, lowest - 1, -1):
            hits = _beam(st, &w, &ep, 1, ef, lc, None, 0)
            found[lc] = hits
            if hits:
                ep.d = <float> hits[0][0]
                ep.s = <int32_t> hits[0][1]
        return found
    finally:
        _walk_free(&w)


cdef class Found:
    """An insertion's candidates per level (``layer_candidates``' lists), kept as C arrays from
    the walk to the linking: no Python tuple per candidate (an insertion collects EF of them per
    level, 200 by default). Reads as those lists too (``len``, ``found[level]``), so the
    pure-Python linking takes it alike."""
    cdef Item **items
    cdef Py_ssize_t *counts
    cdef int nlevels

    def __cinit__(self, int nlevels):
        self.nlevels = 0
        self.items = <Item **> calloc(nlevels if nlevels > 0 else 1, sizeof(Item *))
        self.counts = <Py_ssize_t *> calloc(nlevels if nlevels > 0 else 1, sizeof(Py_ssize_t))
        if self.items == NULL or self.counts == NULL:
            raise MemoryError()
        self.nlevels = nlevels

    def __dealloc__(self):
        cdef int i
        if self.items != NULL:
            for i in range(self.nlevels):
                free(self.items[i])
            free(self.items)
        free(self.counts)

    def __len__(self):
        return self.nlevels

    def __getitem__(self, int level):
        cdef Py_ssize_t i
        if level < 0 or level >= self.nlevels:
            raise IndexError(level)
        return [(<double> self.items[level][i].d, <int> self.items[level][i].s) for i in range(self.counts[level])]


def packed_candidates(g, probe, int level, int ef):
    """``layer_candidates(g, probe, level, ef)`` (all levels down to 0) as a ``Found``: the same
    walks, the same candidates in the same order."""
    cdef _Arrays a = _of_graph(g, probe)
    cdef Store *st = &a.st
    cdef Walk w
    cdef Item ep
    cdef Nearest found
    cdef int lc, top = g.max_level, upto, rc
    cdef Py_ssize_t n, entry = g.entry
    cdef Found out
    if entry < 0 or entry >= st.cap:
        return Found(0)
    upto = level if level < top else top
    out = Found(upto + 1)
    if _walk_init(&w, st) < 0:
        _walk_free(&w)
        raise MemoryError()
    try:
        ep.s = <int32_t> entry
        ep.d = _dist(st, entry)
        for lc in range(top, level, -1):
            _greedy(st, &w, lc, &ep)
        for lc in range(upto, -1, -1):
            found.h.items = NULL
            if lc == 0:
                with nogil:
                    rc = _beam_plain(st, &w, &ep, 1, ef, lc, &found)
            else:
                rc = _beam_plain(st, &w, &ep, 1, ef, lc, &found)
            if rc < 0:
                free(found.h.items)
                raise MemoryError()
            n = _nearest_sort(&found)
            out.items[lc] = found.h.items  # the Found owns the array now
            out.counts[lc] = n
            if n:
                ep = found.h.items[0]
        return out
    finally:
        _walk_free(&w)


# -- linking: build._select and _take_link ----------------------------------------------------------


cdef int _count(const Store *st, int32_t slot, int level):
    cdef Py_ssize_t width
    cdef int32_t *row
    if level == 0:
        return st.n0[slot]
    row = _layer_row(st, slot, level, &width)
    return row[0] if row != NULL else 0


cdef int _get(const Store *st, int32_t slot, int level, int32_t *out):
    """All of ``slot``'s links on ``level`` (as Graph.links, unfiltered) into ``out``."""
    cdef Py_ssize_t width
    cdef int32_t *row
    cdef int n, i
    if level == 0:
        n = st.n0[slot]
        for i in range(n):
            out[i] = st.links0[<Py_ssize_t> slot * st.m0 + i]
        return n
    row = _layer_row(st, slot, level, &width)
    if row == NULL:
        return 0
    n = row[0]
    for i in range(n):
        out[i] = row[1 + i]
    return n


cdef int _add(const Store *st, int32_t slot, int32_t other, int level) except -1:
    cdef Py_ssize_t width
    cdef int32_t *row
    cdef int n
    if level == 0:
        n = st.n0[slot]
        if n >= st.m0:
            raise IndexError("level-0 links full")
        st.links0[<Py_ssize_t> slot * st.m0 + n] = other
        st.n0[slot] = n + 1
        return 0
    row = _layer_row(st, slot, level, &width)
    if row == NULL:
        raise KeyError(slot)
    n = row[0]
    if n >= width - 1:
        raise IndexError("upper links full")
    row[1 + n] = other
    row[0] = n + 1
    return 0


cdef bint _remove(const Store *st, int32_t slot, int32_t other, int level) except -1:
    cdef Py_ssize_t width
    cdef int32_t *row = NULL
    cdef int32_t *links
    cdef int n, i, j
    if level == 0:
        links = st.links0 + <Py_ssize_t> slot * st.m0
        n = st.n0[slot]
    else:
        row = _layer_row(st, slot, level, &width)
        if row == NULL:
            return False
        links = row + 1
        n = row[0]
    for i in range(n):
        if links[i] == other:
            for j in range(i, n - 1):
                links[j] = links[j + 1]
            if level == 0:
                links[n - 1] = -1
                st.n0[slot] = n - 1
            else:
                row[0] = n - 1
            return True
    return False


cdef int _replace(const Store *st, int32_t slot, int32_t old, int32_t new, int level) except -1:
    cdef Py_ssize_t width
    cdef int32_t *row
    cdef int32_t *links
    cdef int n, i
    if level == 0:
        links = st.links0 + <Py_ssize_t> slot * st.m0
        n = st.n0[slot]
    else:
        row = _layer_row(st, slot, level, &width)
        if row == NULL:
            raise KeyError(slot)
        links = row + 1
        n = row[0]
    for i in range(n):
        if links[i] == old:
            links[i] = new
            return 0
    raise IndexError("link to replace not found")


cdef bint _take_link(const Store *st, int32_t new, int32_t cand, double d, int level, int aggressive,
                     int32_t *current, float *ds) except -1:
    """build._take_link: ``cand`` is full; give ``new`` the slot of one of its links if the rules allow."""
    cdef int n = _get(st, cand, level, current)
    cdef int i, worst = 0, keep
    cdef int32_t dropped
    cdef bint any_well
    if n == 0:
        return False
    for i in range(n):
        ds[i] = _node_dist(st, cand, current[i])
        if ds[i] > ds[worst]:
            worst = i
    if aggressive == 0 and d >= ds[worst]:
        return False
    keep = st.m // 2 if aggressive == 0 else st.m // 4
    if _count(st, current[worst], level) <= keep:
        if aggressive < 2:
            return False
        any_well = False
        for i in range(n):
            if _count(st, current[i], level) > keep:
                if not any_well or ds[i] > ds[worst]:
                    worst = i
                any_well = True
        if not any_well:
            return False
    dropped = current[worst]
    _remove(st, dropped, cand, level)
    _replace(st, cand, dropped, new, level)
    _add(st, new, cand, level)
    return True


cdef struct Scratch:
    int32_t *slots
    double *hd
    int32_t *linked
    int32_t *current
    float *cur_ds


cdef int _scratch_init(Scratch *sc, Py_ssize_t n, int m0) noexcept:
    sc.slots = <int32_t *> malloc((n + 1) * sizeof(int32_t))
    sc.hd = <double *> malloc((n + 1) * sizeof(double))
    sc.linked = <int32_t *> malloc((m0 + n + 1) * sizeof(int32_t))
    sc.current = <int32_t *> malloc((m0 + 1) * sizeof(int32_t))
    sc.cur_ds = <float *> malloc((m0 + 1) * sizeof(float))
    return 0 if (sc.slots and sc.hd and sc.linked and sc.current and sc.cur_ds) else -1


cdef void _scratch_free(Scratch *sc) noexcept:
    free(sc.slots)
    free(sc.hd)
    free(sc.linked)
    free(sc.current)
    free(sc.cur_ds)


cdef int _select(const Store *st, int32_t new, Scratch *sc, int n, int level, int required, int aggressive) except -1:
    """build._select over ``sc.slots``/``sc.hd`` (the candidates, nearest first).

    The reference keeps, per candidate, its distance to the nearest neighbour accepted so far
    and rejects it when that is below its distance to ``new``; here the same test is made when
    the candidate comes up, against each accepted neighbour until one is nearer (the same
    verdict: a minimum is below ``d`` exactly when one of its terms is), which skips the
    distances of candidates never reached."""
    cdef int limit = st.m0 if level == 0 else st.m
    cdef int count, nlinked, i, j
    cdef int32_t cand
    cdef double d
    cdef bint skip
    if n == 0:
        return 0
    nlinked = _get(st, new, level, sc.linked)
    count = _count(st, new, level)
    for i in range(n):
        if count >= limit or count >= required:
            return 0
        cand = sc.slots[i]
        skip = False
        for j in range(nlinked):
            if sc.linked[j] == cand:
                skip = True
                break
        if skip:
            continue
        d = sc.hd[i]
        if aggressive == 0:
            for j in range(nlinked):
                if _node_dist(st, sc.linked[j], cand) < d:
                    skip = True
                    break
            if skip:
                continue
        if _count(st, cand, level) < limit:
            _add(st, cand, new, level)
            _add(st, new, cand, level)
        elif not _take_link(st, new, cand, d, level, aggressive, sc.current, sc.cur_ds):
            continue
        sc.linked[nlinked] = cand
        nlinked += 1
        count += 1
    return 0


def select(g, int new, list hits, int level, int required, int aggressive):
    """build._select: link ``new`` to candidates ``hits`` ((distance, slot), nearest first)."""
    cdef _Arrays a
    cdef Scratch sc
    cdef int i, n = len(hits)
    if n == 0:
        return
    a = _of_graph(g, None)
    try:
        if _scratch_init(&sc, n, a.st.m0) < 0:
            raise MemoryError()
        for i in range(n):
            sc.hd[i] = hits[i][0]
            sc.slots[i] = hits[i][1]
            if sc.slots[i] < 0 or sc.slots[i] >= a.st.cap:
                raise IndexError("candidate slot out of range")
        _select(&a.st, new, &sc, n, level, required, aggressive)
    finally:
        _scratch_free(&sc)


def commit_links(g, int slot, int level, found):
    """The linking loop of build.commit (the entry point is the caller's): per level from the
    top, the candidates still alive there (build._still_there), then the three efforts."""
    cdef _Arrays a = _of_graph(g, None)
    cdef Store *st = &a.st
    cdef Scratch sc
    cdef int lc, i, n, upto, most = 0
    cdef int top = g.max_level
    cdef int32_t s
    cdef Found packed = found if isinstance(found, Found) else None
    cdef Item *items
    cdef Py_ssize_t j
    if packed is not None:
        for lc in range(packed.nlevels):
            most = max(most, packed.counts[lc])
    else:
        for hits in found:
            most = max(most, len(hits))
    upto = level if level < top else top
    try:
        if _scratch_init(&sc, most, st.m0) < 0:
            raise MemoryError()
        for lc in range(upto, -1, -1):
            n = 0
            if packed is not None:
                if lc < packed.nlevels:
                    items = packed.items[lc]
                    for j in range(packed.counts[lc]):
                        s = items[j].s
                        if 0 <= s < st.cap and st.levels[s] >= lc and s != slot:
                            sc.hd[n] = <double> items[j].d
                            sc.slots[n] = s
                            n += 1
            elif lc < len(found):
                for hit in found[lc]:
                    s = hit[1]
                    if 0 <= s < st.cap and st.levels[s] >= lc and s != slot:
                        sc.hd[n] = hit[0]
                        sc.slots[n] = s
                        n += 1
            _select(st, slot, &sc, n, lc, st.m, 0)
            if lc == 0 and st.n0[slot] < st.m // 2:
                _select(st, slot, &sc, n, 0, st.m, 1)
                if st.n0[slot] < st.m // 4:
                    _select(st, slot, &sc, n, 0, st.m, 2)
    finally:
        _scratch_free(&sc)


cdef int _cmp_items(const void *a, const void *b) noexcept nogil:
    cdef const Item *x = <const Item *> a
    cdef const Item *y = <const Item *> b
    if _less(x[0], y[0]):
        return -1
    if _less(y[0], x[0]):
        return 1
    return 0


def exact_candidates(g, probe, int level, int ef):
    """build.candidates' exact scan for small sets: per level 0..min(level, top), the ``ef``
    nearest live nodes on that level by (distance, slot)."""
    cdef _Arrays a = _of_graph(g, probe)
    cdef Store *st = &a.st
    cdef Py_ssize_t hw = g.hw, i, n = 0, k
    cdef int lc, upto, top = g.max_level
    cdef Item *items
    if hw > st.cap:
        hw = st.cap
    items = <Item *> malloc((hw + 1) * sizeof(Item))
    if items == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(hw):
                if st.levels[i] >= 0:
                    items[n].s = <int32_t> i
                    items[n].d = _dist(st, i)
                    n += 1
            qsort(items, n, sizeof(Item), _cmp_items)
        if n == 0:
            return []
        upto = level if level < top else top
        found = []
        for lc in range(upto + 1):
            hits = []
            k = 0
            for i in range(n):
                if k >= ef:
                    break
                if st.levels[items[i].s] >= lc:
                    hits.append((<double> items[i].d, <int> items[i].s))
                    k += 1
            found.append(hits)
        return found
    finally:
        free(items)
