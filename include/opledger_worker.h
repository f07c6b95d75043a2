/*
 * opledger_worker.h — a worker for opledger's worker protocol (version 1) in C or C++.
 *
 * One header, C99 or C++11, no dependency beyond the C library (and the CUDA runtime when
 * compiled by nvcc). It speaks the protocol of docs/workers.md so that a worker is the kernel
 * and a few lines: the request loop on the socket opledger hands over (OPLEDGER_WORKER_FD), the
 * JSON the requests and replies need, .npy input and output, the timing of each run (a monotonic
 * clock on the CPU, CUDA events under nvcc: behind a hold kernel, ended after the whole device is
 * synchronised) and the cache flush before a cold run (a read of `flush_bytes` on the CPU, a read
 * of twice the L2 under nvcc).
 *
 *     #include "opledger_worker.h"
 *
 *     static int fused(olw_call *c) {                 // y = f(x, bias)
 *         const olw_tensor *x = olw_input(c, "x"), *b = olw_input(c, "bias");
 *         if (!x || !b) return olw_fail(c, "needs inputs x and bias");
 *         ...                                         // write c->output->data
 *         return 0;
 *     }
 *
 *     int main(void) {
 *         olw_function fns[] = {{"fused", fused, NULL}};
 *         return olw_serve("my-worker 1", fns, 1);
 *     }
 *
 * A function gets its inputs (float32, C order, by the ledger's tensor names) and an output of
 * the kind's output shape to fill; it returns 0, or non-zero after olw_fail() says why. Under
 * nvcc the tensors' `data` are device pointers: the inputs are copied to the GPU once at setup,
 * the output is copied back only when opledger asks for it, and the function must launch its
 * work on the default stream (it is timed by events on it and synchronised after).
 *
 * Every function here is `static inline`: include the header in the one file that serves.
 */
#ifndef OPLEDGER_WORKER_H
#define OPLEDGER_WORKER_H

/* POSIX's monotonic clock and read/write under -std=c99: include this header before any other. */
#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

#define OLW_PROTOCOL 1
#define OLW_VERSION "2"
#define OLW_MAX_DIMS 8
#define OLW_MAX_INPUTS 16
#define OLW_MAX_CASES 8
/* The most runs one `run` request may ask for. */
#define OLW_MAX_RUN_COUNT 1000000

#ifdef __cplusplus
extern "C" {
#endif

/* A float32 tensor in C order: host memory, or device memory under nvcc. */
typedef struct olw_tensor {
    char name[64];
    int ndim;
    int64_t shape[OLW_MAX_DIMS];
    size_t count; /* elements */
    float *data;
} olw_tensor;

/* What a function is called with. */
typedef struct olw_call {
    const olw_tensor *inputs;
    int n_inputs;
    olw_tensor *output;
    /* The workload as JSON (the spec's validated workload: `kind` and its parameters). */
    const char *workload_json;
    void *user;
    char error[512];
} olw_call;

typedef int (*olw_fn)(olw_call *call);

typedef struct olw_function {
    const char *name;
    olw_fn fn;
    void *user;
} olw_function;

/* ---- JSON: a small parser into a flat tree (the requests are one line each) ---- */

enum { OLW_NULL, OLW_BOOL, OLW_NUM, OLW_STR, OLW_ARR, OLW_OBJ };

typedef struct olw_json {
    int type;
    double num;
    int boolean;
    char *str;              /* OLW_STR: the decoded string; object members: their key */
    char *key;              /* a member's key (NULL in arrays) */
    struct olw_json *child; /* first element or member */
    struct olw_json *next;  /* the next sibling */
} olw_json;

typedef struct olw_parser {
    const char *s;
    const char *err;
    int depth;
} olw_parser;

static inline void olw_json_free(olw_json *j) {
    while (j) {
        olw_json *n = j->next;
        olw_json_free(j->child);
        free(j->str);
        free(j->key);
        free(j);
        j = n;
    }
}

static inline void olw_ws(olw_parser *p) {
    while (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n') p->s++;
}

static inline int olw_hex4(const char *s, unsigned *v) {
    unsigned x = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char c = s[i];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *v = x;
    return 1;
}

static inline size_t olw_utf8(unsigned cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A JSON string at p->s (after its opening quote), decoded into a new buffer. */
static inline char *olw_string(olw_parser *p) {
    size_t cap = 64, n = 0;
    char *out = (char *)malloc(cap);
    if (!out) { p->err = "out of memory"; return NULL; }
    for (;;) {
        char c = *p->s++;
        if (n + 5 > cap) {
            char *bigger = (char *)realloc(out, cap *= 2);
            if (!bigger) { free(out); p->err = "out of memory"; return NULL; }
            out = bigger;
        }
        if (c == '"') break;
        if (c == '\0' || (unsigned char)c < 0x20) { free(out); p->err = "unterminated string"; return NULL; }
        if (c != '\\') { out[n++] = c; continue; }
        c = *p->s++;
        switch (c) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (!olw_hex4(p->s, &cp)) { free(out); p->err = "bad \\u escape"; return NULL; }
            p->s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p->s[0] == '\\' && p->s[1] == 'u' && olw_hex4(p->s + 2, &lo)
                && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p->s += 6;
            }
            n += olw_utf8(cp, out + n);
            break;
        }
        default: free(out); p->err = "bad escape"; return NULL;
        }
    }
    out[n] = '\0';
    return out;
}

static inline olw_json *olw_value(olw_parser *p) {
    olw_json *j;
    olw_ws(p);
    if (++p->depth > 64) { p->err = "nested too deeply"; return NULL; }
    j = (olw_json *)calloc(1, sizeof *j);
    if (!j) { p->err = "out of memory"; return NULL; }
    if (*p->s == '{' || *p->s == '[') {
        int obj = *p->s == '{';
        olw_json **tail = &j->child;
        j->type = obj ? OLW_OBJ : OLW_ARR;
        p->s++;
        olw_ws(p);
        if (*p->s == (obj ? '}' : ']')) { p->s++; p->depth--; return j; }
        for (;;) {
            char *key = NULL;
            olw_json *v;
            if (obj) {
                olw_ws(p);
                if (*p->s != '"') { p->err = "expected a key"; olw_json_free(j); return NULL; }
                p->s++;
                if (!(key = olw_string(p))) { olw_json_free(j); return NULL; }
                olw_ws(p);
                if (*p->s != ':') { free(key); p->err = "expected ':'"; olw_json_free(j); return NULL; }
                p->s++;
            }
            if (!(v = olw_value(p))) { free(key); olw_json_free(j); return NULL; }
            v->key = key;
            *tail = v;
            tail = &v->next;
            olw_ws(p);
            if (*p->s == ',') { p->s++; continue; }
            if (*p->s == (obj ? '}' : ']')) { p->s++; break; }
            p->err = obj ? "expected ',' or '}'" : "expected ',' or ']'";
            olw_json_free(j);
            return NULL;
        }
    } else if (*p->s == '"') {
        p->s++;
        j->type = OLW_STR;
        if (!(j->str = olw_string(p))) { free(j); return NULL; }
    } else if (!strncmp(p->s, "true", 4) || !strncmp(p->s, "false", 5)) {
        j->type = OLW_BOOL;
        j->boolean = *p->s == 't';
        p->s += j->boolean ? 4 : 5;
    } else if (!strncmp(p->s, "null", 4)) {
        j->type = OLW_NULL;
        p->s += 4;
    } else {
        char *end;
        j->type = OLW_NUM;
        j->num = strtod(p->s, &end);
        if (end == p->s) { p->err = "expected a value"; free(j); return NULL; }
        p->s = end;
    }
    p->depth--;
    return j;
}

/* Parses one JSON document; NULL with *err set when it is not one. */
static inline olw_json *olw_parse(const char *text, const char **err) {
    olw_parser p;
    olw_json *j;
    p.s = text;
    p.err = NULL;
    p.depth = 0;
    j = olw_value(&p);
    if (j) {
        olw_ws(&p);
        if (*p.s) { olw_json_free(j); j = NULL; p.err = "text after the value"; }
    }
    if (err) *err = p.err;
    return j;
}

/* The member `key` of an object (NULL when it has none). */
static inline const olw_json *olw_get(const olw_json *obj, const char *key) {
    const olw_json *m;
    if (!obj || obj->type != OLW_OBJ) return NULL;
    for (m = obj->child; m; m = m->next)
        if (m->key && !strcmp(m->key, key)) return m;
    return NULL;
}

static inline const char *olw_get_str(const olw_json *obj, const char *key) {
    const olw_json *v = olw_get(obj, key);
    return v && v->type == OLW_STR ? v->str : NULL;
}

/* ---- JSON out: replies ---- */

typedef struct olw_buf {
    char *s;
    size_t n, cap;
} olw_buf;

static inline void olw_put(olw_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *bigger;
        while (b->n + n + 1 > cap) cap *= 2;
        bigger = (char *)realloc(b->s, cap);
        if (!bigger) return;
        b->s = bigger;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static inline void olw_puts(olw_buf *b, const char *s) { olw_put(b, s, strlen(s)); }

/* A string as JSON: quotes, backslashes and control characters (newlines too) escaped. */
static inline void olw_put_json_str(olw_buf *b, const char *s) {
    olw_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"') olw_puts(b, "\\\"");
        else if (c == '\\') olw_puts(b, "\\\\");
        else if (c == '\n') olw_puts(b, "\\n");
        else if (c == '\t') olw_puts(b, "\\t");
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); olw_puts(b, esc); }
        else olw_put(b, (const char *)&c, 1);
    }
    olw_puts(b, "\"");
}

/* ---- .npy ---- */

/* *count *= d, refused (-1) where d is not a whole number of elements or the element count,
 * or its bytes, would not fit a size_t (a shape such as (2^32, 2^32) would wrap to 0 and the
 * buffer allocated for it would be overrun). */
static inline int olw_count_mul(size_t *count, double d) {
    size_t n;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d) return -1;
    n = (size_t)d;
    if (n != 0 && *count > (SIZE_MAX / sizeof(float) - 1) / n) return -1;
    *count *= n;
    return 0;
}

/* Reads a float32 C-order .npy file into t (its data newly allocated on the host). */
static inline int olw_npy_read(const char *path, olw_tensor *t, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    unsigned char head[12];
    size_t hlen;
    char *h, *p;
    if (!f) { snprintf(err, err_size, "cannot open %.512s: %s", path, strerror(errno)); return -1; }
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6)) {
        fclose(f); snprintf(err, err_size, "%.512s is not a .npy file", path); return -1;
    }
    if (head[6] == 1) hlen = (size_t)head[8] | ((size_t)head[9] << 8);
    else {
        if (fread(head + 10, 1, 2, f) != 2) { fclose(f); snprintf(err, err_size, "%.512s: short header", path); return -1; }
        hlen = (size_t)head[8] | ((size_t)head[9] << 8) | ((size_t)head[10] << 16) | ((size_t)head[11] << 24);
    }
    h = (char *)malloc(hlen + 1);
    if (!h || fread(h, 1, hlen, f) != hlen) {
        free(h); fclose(f); snprintf(err, err_size, "%.512s: short header", path); return -1;
    }
    h[hlen] = '\0';
    /* The header is a Python dict literal: its three keys in any order, any spacing. */
    if (!strstr(h, "'<f4'") || (strstr(h, "'fortran_order'") && strstr(strstr(h, "'fortran_order'"), "True"))) {
        free(h); fclose(f); snprintf(err, err_size, "%.512s: expected float32 ('<f4') in C order", path); return -1;
    }
    p = strstr(h, "'shape'");
    p = p ? strchr(p, '(') : NULL;
    if (!p) { free(h); fclose(f); snprintf(err, err_size, "%.512s: no shape in its header", path); return -1; }
    t->ndim = 0;
    t->count = 1;
    for (p++; *p && *p != ')';) {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p) { p++; continue; }
        if (t->ndim == OLW_MAX_DIMS || d < 0 || olw_count_mul(&t->count, (double)d)) {
            free(h); fclose(f); snprintf(err, err_size, "%.512s: bad shape (a dimension that is negative, or more elements than memory can hold)", path); return -1;
        }
        t->shape[t->ndim++] = d;
        p = end;
    }
    free(h);
    t->data = (float *)malloc(t->count * sizeof(float) + 1);
    if (!t->data) { fclose(f); snprintf(err, err_size, "%.512s: out of memory", path); return -1; }
    if (fread(t->data, sizeof(float), t->count, f) != t->count) {
        free(t->data); t->data = NULL; fclose(f); snprintf(err, err_size, "%.512s: short data", path); return -1;
    }
    fclose(f);
    return 0;
}

/* Writes host floats as a float32 C-order .npy file (version 1.0, header padded to 64 bytes). */
static inline int olw_npy_write(const char *path, const olw_tensor *t, const float *host, char *err, size_t err_size) {
    char dict[256], shape[160] = "";
    size_t len, total;
    int i;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    FILE *f;
    for (i = 0; i < t->ndim; i++) {
        char d[32];
        snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        strncat(shape, d, sizeof shape - strlen(shape) - 1);
    }
    if (t->ndim == 1) strncat(shape, ",", sizeof shape - strlen(shape) - 1);
    len = (size_t)snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
    total = 10 + len + 1;
    while (total % 64) { dict[len++] = ' '; total++; }
    dict[len++] = '\n';
    pre[8] = (unsigned char)(len & 0xFF);
    pre[9] = (unsigned char)(len >> 8);
    f = fopen(path, "wb");
    if (!f) { snprintf(err, err_size, "cannot write %.512s: %s", path, strerror(errno)); return -1; }
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, len, f) != len
        || fwrite(host, sizeof(float), t->count, f) != t->count) {
        fclose(f); snprintf(err, err_size, "writing %.512s: %s", path, strerror(errno)); return -1;
    }
    if (fclose(f)) { snprintf(err, err_size, "writing %.512s: %s", path, strerror(errno)); return -1; }
    return 0;
}

/* ---- the cases, timing and the cache flush ---- */

typedef struct olw_case {
    char id[64];
    const olw_function *fn;
    olw_tensor inputs[OLW_MAX_INPUTS];
    int n_inputs;
    olw_tensor output;
    char output_path[4096];
    char *workload_json;
    int ran;
} olw_case;

static olw_case olw_cases[OLW_MAX_CASES];
static int olw_n_cases;
static float *olw_flush_buf;
static size_t olw_flush_count;
static volatile float olw_flush_sink;

/* The input named `name` of the call (NULL when the workload has none of that name). */
static inline const olw_tensor *olw_input(const olw_call *c, const char *name) {
    int i;
    for (i = 0; i < c->n_inputs; i++)
        if (!strcmp(c->inputs[i].name, name)) return &c->inputs[i];
    return NULL;
}

/* Says why a function failed; returns -1 so that `return olw_fail(c, "...")` reads well. */
static inline int olw_fail(olw_call *c, const char *why) {
    snprintf(c->error, sizeof c->error, "%s", why);
    return -1;
}

/* A whole-number parameter of the workload (`rows`, `cols`, …): 0 when found, -1 when not. */
static inline int olw_workload_i64(const olw_call *c, const char *key, long long *v) {
    const char *err;
    olw_json *w = olw_parse(c->workload_json ? c->workload_json : "{}", &err);
    const olw_json *m = olw_get(w, key);
    int found = m && m->type == OLW_NUM;
    if (found) *v = (long long)m->num;
    olw_json_free(w);
    return found ? 0 : -1;
}

static inline double olw_now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#ifdef __CUDACC__
static void *olw_l2_buf;
static size_t olw_l2_bytes;
static int olw_warmed;

/* The flush of a cold run: reads the buffer (zeros, so nothing is written); a memset would leave
 * up to an L2 of dirty lines, written back inside the next timed run. */
static __global__ void olw_flush_read(const float4 *buf, long long n4) {
    float acc = 0.0f;
    long long i;
    for (i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        float4 v = buf[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc != 0.0f) ((float4 *)buf)[0] = make_float4(acc, acc, acc, acc);
}

/* Keeps the stream busy for `cycles` clock cycles, before each timed run: the host's launches
 * never leave the GPU idle inside a sample (opledger's one rule for GPU samples). */
static __global__ void olw_hold(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
/* The hold: about 0.5 ms at 2 GHz, longer than a call's launches take to enqueue. */
#define OLW_HOLD_CYCLES 1000000LL

/* 0 when `e` is cudaSuccess; else -1, with what failed and CUDA's own words in err. */
static inline int olw_cuda(cudaError_t e, const char *what, char *err, size_t err_size) {
    if (e == cudaSuccess) return 0;
    snprintf(err, err_size, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}
#endif

static inline void olw_flush(void) {
#ifdef __CUDACC__
    if (!olw_l2_buf) {
        int l2 = 0;
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
        olw_l2_bytes = 2 * (size_t)(l2 > 0 ? l2 : (64 << 20));
        if (cudaMalloc(&olw_l2_buf, olw_l2_bytes) != cudaSuccess ||
            cudaMemset(olw_l2_buf, 0, olw_l2_bytes) != cudaSuccess) {
            /* No room for the flush: the run that follows reports the device's state. */
            olw_l2_buf = NULL;
            return;
        }
    }
    /* Enqueued, not waited for: the timed run's start event goes behind it. */
    olw_flush_read<<<1024, 256>>>((const float4 *)olw_l2_buf, (long long)(olw_l2_bytes / 16));
#else
    /* Read, not written: evicts the case's data without dirty lines of its own. */
    size_t i;
    float s = 0.0f;
    for (i = 0; i < olw_flush_count; i += 16) s += olw_flush_buf[i];
    olw_flush_sink = s;
#endif
}

/* ---- counts: Valgrind's client requests ----
 *
 * In counts mode opledger starts the worker under Valgrind's Callgrind with counting off and asks
 * for a counted run: the kit turns counting on around the function call (which also empties the
 * simulated caches), dumps the call's counts, reads the flush buffer so that the lines the call
 * left dirty are written back, dumps that, and turns counting off. A client request is an
 * instruction sequence that does nothing on a real CPU and that Valgrind recognises (the one of
 * valgrind/valgrind.h for amd64, written out so that the kit needs no Valgrind headers); where
 * it cannot be written (another architecture or compiler, or nvcc: a GPU's work is not a CPU
 * process's counts) every request answers its default and a counted run says why it cannot be. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
static inline size_t olw_valgrind_request(size_t fallback, size_t code) {
    volatile size_t args[6];
    size_t result;
    args[0] = code;
    args[1] = args[2] = args[3] = args[4] = args[5] = 0;
    __asm__ volatile("rolq $3, %%rdi ; rolq $13, %%rdi\n\t"
                     "rolq $61, %%rdi ; rolq $51, %%rdi\n\t"
                     "xchgq %%rbx, %%rbx"
                     : "=d"(result)
                     : "a"(&args[0]), "0"(fallback)
                     : "cc", "memory");
    return result;
}
#else
static inline size_t olw_valgrind_request(size_t fallback, size_t code) {
    (void)code;
    return fallback;
}
#endif

#define OLW_RUNNING_ON_VALGRIND 0x1001
#define OLW_CALLGRIND_BASE (((size_t)'C' << 24) | ((size_t)'T' << 16))
#define OLW_CALLGRIND_DUMP (OLW_CALLGRIND_BASE + 0)
#define OLW_CALLGRIND_START (OLW_CALLGRIND_BASE + 4)
#define OLW_CALLGRIND_STOP (OLW_CALLGRIND_BASE + 5)

/* Whether this process runs under Valgrind. */
static inline int olw_on_valgrind(void) { return olw_valgrind_request(0, OLW_RUNNING_ON_VALGRIND) != 0; }

/* Runs a case's function once, timed; its seconds in *secs. */
static inline int olw_timed(olw_case *k, double *secs, char *err, size_t err_size) {
    olw_call c;
    int rc;
    memset(&c, 0, sizeof c);
    c.inputs = k->inputs;
    c.n_inputs = k->n_inputs;
    c.output = &k->output;
    c.workload_json = k->workload_json;
    c.user = k->fn->user;
#ifdef __CUDACC__
    {
        cudaEvent_t a, b;
        cudaError_t e;
        float ms = 0.0f;
        if (olw_cuda(cudaEventCreate(&a), "creating a CUDA event", err, err_size)) return -1;
        if (olw_cuda(cudaEventCreate(&b), "creating a CUDA event", err, err_size)) {
            cudaEventDestroy(a);
            return -1;
        }
        if (!olw_warmed) {
            /* The warm-up: the GPU busy for a while before its first timed run, so that its
             * clocks have ramped from idle. */
            int i;
            for (i = 0; i < 100; i++) olw_hold<<<1, 1>>>(OLW_HOLD_CYCLES);
            cudaDeviceSynchronize();
            olw_warmed = 1;
        }
        /* Behind the flush (a cold run's) and the hold, with no host synchronisation between. */
        olw_hold<<<1, 1>>>(OLW_HOLD_CYCLES);
        cudaEventRecord(a, 0);
        rc = k->fn->fn(&c);
        /* Every stream's work the call started, before the end mark: a kernel launched on a
         * side stream (which no event of stream 0 waits for) is timed, and its output is
         * complete when it is copied back. A fault inside a kernel shows here. */
        e = cudaDeviceSynchronize();
        cudaEventRecord(b, 0);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        *secs = ms * 1e-3;
        if (!rc && e != cudaSuccess) {
            olw_cuda(e, "a CUDA error after the function ran", c.error, sizeof c.error);
            rc = -1;
        }
    }
#else
    {
        double t0 = olw_now_secs();
        rc = k->fn->fn(&c);
        *secs = olw_now_secs() - t0;
    }
#endif
    if (rc) snprintf(err, err_size, "%.64s: %.512s", k->fn->name, c.error[0] ? c.error : "the function failed");
    return rc;
}

/* Runs a case's function once, counted (see "counts" above); its seconds in *secs. */
static inline int olw_counted(olw_case *k, double *secs, char *err, size_t err_size) {
    int rc;
    if (!olw_on_valgrind()) {
        snprintf(err, err_size, "a counted run needs Valgrind, and this worker does not run under it%s",
#if defined(__CUDACC__)
                 " (a CUDA worker is not counted: its work is the GPU's)"
#else
                 ""
#endif
        );
        return -1;
    }
    olw_valgrind_request(0, OLW_CALLGRIND_START);
    rc = olw_timed(k, secs, err, err_size);
    olw_valgrind_request(0, OLW_CALLGRIND_DUMP);
    olw_flush();
    olw_valgrind_request(0, OLW_CALLGRIND_DUMP);
    olw_valgrind_request(0, OLW_CALLGRIND_STOP);
    return rc;
}

static inline void olw_free_case(olw_case *k) {
    int i;
    for (i = 0; i < k->n_inputs; i++) {
#ifdef __CUDACC__
        cudaFree(k->inputs[i].data);
#else
        free(k->inputs[i].data);
#endif
    }
#ifdef __CUDACC__
    cudaFree(k->output.data);
#else
    free(k->output.data);
#endif
    free(k->workload_json);
    memset(k, 0, sizeof *k);
}

/* The workload object, written back as compact JSON for the function to read. */
static inline void olw_put_json(olw_buf *b, const olw_json *j) {
    const olw_json *m;
    char num[40];
    switch (j->type) {
    case OLW_NULL: olw_puts(b, "null"); break;
    case OLW_BOOL: olw_puts(b, j->boolean ? "true" : "false"); break;
    case OLW_NUM: snprintf(num, sizeof num, "%.17g", j->num); olw_puts(b, num); break;
    case OLW_STR: olw_put_json_str(b, j->str); break;
    default:
        olw_puts(b, j->type == OLW_OBJ ? "{" : "[");
        for (m = j->child; m; m = m->next) {
            if (m != j->child) olw_puts(b, ",");
            if (j->type == OLW_OBJ) { olw_put_json_str(b, m->key); olw_puts(b, ":"); }
            olw_put_json(b, m);
        }
        olw_puts(b, j->type == OLW_OBJ ? "}" : "]");
    }
}

static inline int olw_tensor_of(const olw_json *spec, const char *name, olw_tensor *t) {
    const olw_json *shape = olw_get(spec, "shape"), *d;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!shape || shape->type != OLW_ARR) return -1;
    t->count = 1;
    for (d = shape->child; d; d = d->next) {
        if (d->type != OLW_NUM || t->ndim == OLW_MAX_DIMS || olw_count_mul(&t->count, d->num)) return -1;
        t->shape[t->ndim++] = (int64_t)d->num;
    }
    return 0;
}

static inline int olw_setup_case(const olw_json *r, const olw_function *fns, int n_fns, char *err, size_t err_size) {
    const char *id = olw_get_str(r, "id"), *name = olw_get_str(r, "function");
    const olw_json *inputs = olw_get(r, "inputs"), *output = olw_get(r, "output"), *m;
    const olw_json *flush = olw_get(r, "flush_bytes");
    olw_case *k = NULL;
    const char *path;
    double secs;
    int i;
    if (!id || !name || !inputs || inputs->type != OLW_OBJ || !output) {
        snprintf(err, err_size, "setup needs id, function, inputs and output");
        return -1;
    }
    for (i = 0; i < n_fns && strcmp(fns[i].name, name); i++) {}
    if (i == n_fns) {
        olw_buf have = {0, 0, 0};
        int j;
        for (j = 0; j < n_fns; j++) { if (j) olw_puts(&have, ", "); olw_puts(&have, fns[j].name); }
        snprintf(err, err_size, "no function '%s' registered; this worker has: %s", name, have.s ? have.s : "none");
        free(have.s);
        return -1;
    }
    for (int j = 0; j < olw_n_cases; j++)
        if (!strcmp(olw_cases[j].id, id)) { k = &olw_cases[j]; olw_free_case(k); break; }
    if (!k) {
        if (olw_n_cases == OLW_MAX_CASES) { snprintf(err, err_size, "more than %d cases", OLW_MAX_CASES); return -1; }
        k = &olw_cases[olw_n_cases++];
    }
    snprintf(k->id, sizeof k->id, "%s", id);
    k->fn = &fns[i];
    for (m = inputs->child; m; m = m->next) {
        olw_tensor *t = &k->inputs[k->n_inputs];
        if (k->n_inputs == OLW_MAX_INPUTS) { snprintf(err, err_size, "more than %d inputs", OLW_MAX_INPUTS); return -1; }
        path = olw_get_str(m, "path");
        if (!path) { snprintf(err, err_size, "input %s has no path", m->key); return -1; }
        if (olw_npy_read(path, t, err, err_size)) return -1;
        snprintf(t->name, sizeof t->name, "%s", m->key);
        k->n_inputs++;
#ifdef __CUDACC__
        {
            float *dev = NULL;
            cudaError_t e = cudaMalloc((void **)&dev, t->count * sizeof(float) + 1);
            if (e == cudaSuccess) e = cudaMemcpy(dev, t->data, t->count * sizeof(float), cudaMemcpyHostToDevice);
            free(t->data);
            t->data = dev;
            if (olw_cuda(e, "copying an input to the GPU", err, err_size)) return -1;
        }
#endif
    }
    path = olw_get_str(output, "path");
    if (!path || olw_tensor_of(output, "output", &k->output)) {
        snprintf(err, err_size, "setup's output needs a path and a shape");
        return -1;
    }
    snprintf(k->output_path, sizeof k->output_path, "%s", path);
#ifdef __CUDACC__
    if (olw_cuda(cudaMalloc((void **)&k->output.data, k->output.count * sizeof(float) + 1),
                 "allocating the output on the GPU", err, err_size))
        return -1;
#else
    k->output.data = (float *)calloc(k->output.count + 1, sizeof(float));
    if (!k->output.data) { snprintf(err, err_size, "out of memory for the output"); return -1; }
#endif
    {
        olw_buf w = {0, 0, 0};
        const olw_json *wl = olw_get(r, "workload");
        if (wl) olw_put_json(&w, wl); else olw_puts(&w, "{}");
        k->workload_json = w.s;
    }
    if (!olw_flush_buf) {
        size_t bytes = flush && flush->type == OLW_NUM && flush->num > 0 ? (size_t)flush->num : (size_t)64 << 20;
        olw_flush_count = bytes / sizeof(float);
        olw_flush_buf = (float *)malloc(olw_flush_count * sizeof(float) + 1);
        if (!olw_flush_buf) { snprintf(err, err_size, "out of memory for the cache flush"); return -1; }
        for (size_t j = 0; j < olw_flush_count; j++) olw_flush_buf[j] = 1.0f;
    }
    /* One untimed call readies the function within setup's longer time limit — except when the
     * case is set up again on new inputs before the checked run (`"ready": false`), which must
     * be the first call on them. */
    {
        const olw_json *ready = olw_get(r, "ready");
        if (ready && ready->type == OLW_BOOL && !ready->boolean) return 0;
    }
    if (olw_timed(k, &secs, err, err_size)) return -1;
    k->ran = 1;
    return 0;
}

/* Sets up a case. A failed setup leaves nothing behind: no case of its id stays registered
 * (a later `run` of it is "no case set up", never a call on half-made buffers). */
static inline int olw_setup(const olw_json *r, const olw_function *fns, int n_fns, char *err, size_t err_size) {
    const char *id = olw_get_str(r, "id");
    int j;
    if (!olw_setup_case(r, fns, n_fns, err, err_size)) return 0;
    for (j = 0; id && j < olw_n_cases; j++) {
        if (!strcmp(olw_cases[j].id, id)) {
            olw_free_case(&olw_cases[j]);
            olw_n_cases--;
            if (j != olw_n_cases) {
                olw_cases[j] = olw_cases[olw_n_cases];
                memset(&olw_cases[olw_n_cases], 0, sizeof olw_cases[olw_n_cases]);
            }
            break;
        }
    }
    return -1;
}

static inline olw_case *olw_case_of(const olw_json *r, char *err, size_t err_size) {
    const char *id = olw_get_str(r, "id");
    int i;
    for (i = 0; id && i < olw_n_cases; i++)
        if (!strcmp(olw_cases[i].id, id)) return &olw_cases[i];
    snprintf(err, err_size, "no case '%s' set up", id ? id : "(no id)");
    return NULL;
}

static inline int olw_write_line(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Serves the functions until opledger says shutdown (0) or the channel closes (1). `name` is
 * the worker's name and version, as opledger's report shows it. */
static inline int olw_serve(const char *name, const olw_function *fns, int n_fns) {
    const char *fd_text = getenv("OPLEDGER_WORKER_FD");
    int fd = fd_text ? atoi(fd_text) : -1;
    olw_buf line = {0, 0, 0};
    char chunk[65536];
    size_t start = 0;
    if (fd < 0) {
        fprintf(stderr, "opledger_worker.h: OPLEDGER_WORKER_FD is not set: this program is a worker that opledger starts\n");
        return 2;
    }
    for (;;) {
        char *nl;
        while (!(nl = line.s ? (char *)memchr(line.s + start, '\n', line.n - start) : NULL)) {
            ssize_t got = read(fd, chunk, sizeof chunk);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) { free(line.s); return 1; }
            olw_put(&line, chunk, (size_t)got);
        }
        *nl = '\0';
        {
            const char *perr = NULL, *op;
            char err[1024] = "";
            olw_json *r = olw_parse(line.s + start, &perr);
            olw_buf out = {0, 0, 0};
            int ok = 1, quit = 0;
            start = (size_t)(nl - line.s) + 1;
            op = r ? olw_get_str(r, "op") : NULL;
            if (!r) { ok = 0; snprintf(err, sizeof err, "the request is not JSON: %s", perr ? perr : "?"); }
            else if (!op) { ok = 0; snprintf(err, sizeof err, "the request has no op"); }
            else if (!strcmp(op, "hello")) {
                int i;
                olw_puts(&out, "{\"ok\":true,\"protocol\":1,\"worker\":");
                {
                    char about[256];
                    snprintf(about, sizeof about, "%s (opledger_worker.h %s)", name, OLW_VERSION);
                    olw_put_json_str(&out, about);
                }
#ifdef __CUDACC__
                olw_puts(&out, ",\"device\":\"cuda\",\"functions\":[");
#else
                olw_puts(&out, ",\"device\":\"cpu\",\"functions\":[");
#endif
                for (i = 0; i < n_fns; i++) { if (i) olw_puts(&out, ","); olw_put_json_str(&out, fns[i].name); }
                olw_puts(&out, "]}");
            } else if (!strcmp(op, "setup")) {
                ok = !olw_setup(r, fns, n_fns, err, sizeof err);
            } else if (!strcmp(op, "run")) {
                olw_case *k = olw_case_of(r, err, sizeof err);
                const olw_json *cnt = olw_get(r, "count"), *cold = olw_get(r, "cold");
                const olw_json *counted = olw_get(r, "counted");
                int count_it = counted && counted->type == OLW_BOOL && counted->boolean;
                long n = 1, i;
                ok = k != NULL;
                /* A count is a whole number from 1 to OLW_MAX_RUN_COUNT: 1e300 would never
                 * answer, and -5 would answer with no run at all. */
                if (ok && cnt) {
                    if (cnt->type != OLW_NUM || !(cnt->num >= 1 && cnt->num <= OLW_MAX_RUN_COUNT)
                        || cnt->num != (double)(long)cnt->num) {
                        snprintf(err, sizeof err, "run's count must be a whole number from 1 to %d", OLW_MAX_RUN_COUNT);
                        ok = 0;
                    } else {
                        n = (long)cnt->num;
                    }
                }
                if (ok && count_it && n != 1) {
                    snprintf(err, sizeof err, "a counted run is one run: count must be 1");
                    ok = 0;
                }
                if (ok) {
                    olw_puts(&out, "{\"ok\":true,\"secs\":[");
                    /* Cold: the caches are flushed before every run of the batch. */
                    for (i = 0; ok && i < n; i++) {
                        double secs;
                        char num[40];
                        if (cold && cold->type == OLW_BOOL && cold->boolean) olw_flush();
                        if (count_it ? olw_counted(k, &secs, err, sizeof err) : olw_timed(k, &secs, err, sizeof err)) {
                            ok = 0;
                            break;
                        }
                        snprintf(num, sizeof num, "%s%.9g", i ? "," : "", secs);
                        olw_puts(&out, num);
                    }
                    olw_puts(&out, "]}");
                    k->ran = 1;
                }
            } else if (!strcmp(op, "output")) {
                olw_case *k = olw_case_of(r, err, sizeof err);
                ok = k != NULL;
                if (ok) {
                    float *host = k->output.data;
#ifdef __CUDACC__
                    host = (float *)malloc(k->output.count * sizeof(float) + 1);
                    if (!host) {
                        ok = 0;
                        snprintf(err, sizeof err, "out of memory for the output");
                    } else if (olw_cuda(cudaMemcpy(host, k->output.data, k->output.count * sizeof(float),
                                                   cudaMemcpyDeviceToHost),
                                        "copying the output from the GPU", err, sizeof err)) {
                        ok = 0;
                    }
#endif
                    if (ok) ok = !olw_npy_write(k->output_path, &k->output, host, err, sizeof err);
#ifdef __CUDACC__
                    free(host);
#endif
                }
            } else if (!strcmp(op, "shutdown")) {
                quit = 1;
            } else {
                ok = 0;
                snprintf(err, sizeof err, "unknown op '%s'", op);
            }
            if (!ok) {
                free(out.s);
                out.s = NULL; out.n = out.cap = 0;
                olw_puts(&out, "{\"ok\":false,\"error\":");
                olw_put_json_str(&out, err);
                olw_puts(&out, ",\"traceback\":\"\"}");
            } else if (!out.s) {
                olw_puts(&out, "{\"ok\":true}");
            }
            olw_puts(&out, "\n");
            olw_json_free(r);
            if (olw_write_line(fd, out.s, out.n)) { free(out.s); free(line.s); return 1; }
            free(out.s);
            if (quit) { free(line.s); return 0; }
        }
        /* Keep the buffer small: drop the lines handled. */
        if (start == line.n) { line.n = 0; start = 0; }
        else if (start > 0) { memmove(line.s, line.s + start, line.n - start); line.n -= start; start = 0; }
    }
}

#ifdef __cplusplus
}
#endif

#endif /* OPLEDGER_WORKER_H */
