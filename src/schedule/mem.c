/* Memory for the schedule module's big flat arrays (task lists, per
 * (stage, microbatch) flags and times).
 *
 * These arrays are written end to end right after they are allocated. A
 * fresh malloc block of many MB is faulted in one 4 KiB page at a time; on
 * the build VM a page fault costs ~10 us (2.7 ms per MB, so 0.36 s for the
 * 134 MB of a 1024-stage, 4096-microbatch schedule), while mapping the
 * block populated in one call costs 0.2 ms per MB. So on systems with
 * MAP_POPULATE, blocks of 64 KiB and more are mapped populated; everything
 * else, and every system without it, uses malloc. A 16-byte header before
 * each block records which, so one free function handles both. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE */
#endif
#include "schedule_internal.h"

#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define MAP_AT_LEAST ((size_t)1 << 16)

typedef struct mem_head {
    size_t size;     /* bytes of the whole block, header included */
    uint64_t mapped; /* 1: munmap, 0: free */
} mem_head;

static void *alloc(size_t bytes, int zero) {
    if (bytes > SIZE_MAX - sizeof(mem_head)) return NULL;
    size_t total = bytes + sizeof(mem_head);
    mem_head *h = NULL;
    int mapped = 0;
#if defined(MAP_POPULATE) && defined(MAP_ANONYMOUS)
    if (total >= MAP_AT_LEAST) {
        void *p =
            mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p != MAP_FAILED) {
            h = p; /* anonymous pages are zero already */
            mapped = 1;
        }
    }
#endif
    if (!h) {
        h = zero ? calloc(1, total) : malloc(total);
        if (!h) return NULL;
    }
    h->size = total;
    h->mapped = (uint64_t)mapped;
    return h + 1;
}

void *sched_mem_alloc(size_t bytes) { return alloc(bytes, 0); }

void *sched_mem_calloc(size_t bytes) { return alloc(bytes, 1); }

void sched_mem_free(void *p) {
    if (!p) return;
    mem_head *h = (mem_head *)p - 1;
#if defined(MAP_POPULATE) && defined(MAP_ANONYMOUS)
    if (h->mapped) {
        munmap(h, h->size);
        return;
    }
#endif
    free(h);
}

void *sched_mem_realloc(void *p, size_t bytes) {
    if (!p) return alloc(bytes, 0);
    mem_head *h = (mem_head *)p - 1;
    size_t old = h->size - sizeof(mem_head);
    if (!h->mapped && bytes + sizeof(mem_head) < MAP_AT_LEAST) {
        mem_head *q = realloc(h, bytes + sizeof(mem_head));
        if (!q) return NULL;
        q->size = bytes + sizeof(mem_head);
        return q + 1;
    }
    void *q = alloc(bytes, 0);
    if (!q) return NULL;
    memcpy(q, p, old < bytes ? old : bytes);
    sched_mem_free(p);
    return q;
}
