/* The memory planner: a simulation of an allocator over the program's
 * positions. At each position the values defined there get a block (best
 * fit among free blocks, else the arena grows), then the values last used
 * there give theirs back (merged with free neighbours). */
#include "compiler/arena.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    size_t off, size;
} block;

typedef struct {
    block *b; /* free blocks sorted by offset */
    int n, cap;
    size_t top; /* arena size so far */
} freelist;

static int fl_insert(freelist *f, size_t off, size_t size) {
    if (size == 0) return 0;
    int i = 0;
    while (i < f->n && f->b[i].off < off)
        i++;
    /* merge with the previous and the next block where they touch */
    int prev = i > 0 && f->b[i - 1].off + f->b[i - 1].size == off;
    int next = i < f->n && off + size == f->b[i].off;
    if (prev && next) {
        f->b[i - 1].size += size + f->b[i].size;
        for (int k = i; k + 1 < f->n; k++)
            f->b[k] = f->b[k + 1];
        f->n--;
    } else if (prev) {
        f->b[i - 1].size += size;
    } else if (next) {
        f->b[i].off = off;
        f->b[i].size += size;
    } else {
        if (f->n == f->cap) {
            int cap = f->cap ? 2 * f->cap : 64;
            block *nb = realloc(f->b, (size_t)cap * sizeof *nb);
            if (!nb) return -1;
            f->b = nb, f->cap = cap;
        }
        for (int k = f->n; k > i; k--)
            f->b[k] = f->b[k - 1];
        f->b[i] = (block){off, size};
        f->n++;
    }
    /* a free block at the end of the arena shrinks the arena instead */
    if (f->n && f->b[f->n - 1].off + f->b[f->n - 1].size == f->top) {
        f->top = f->b[f->n - 1].off;
        f->n--;
    }
    return 0;
}

static size_t fl_alloc(freelist *f, size_t size) {
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->b[i].size >= size && (best < 0 || f->b[i].size < f->b[best].size)) {
            best = i;
            if (f->b[i].size == size) break; /* nothing fits better */
        }
    if (best >= 0) {
        size_t off = f->b[best].off;
        f->b[best].off += size;
        f->b[best].size -= size;
        if (f->b[best].size == 0) {
            for (int k = best; k + 1 < f->n; k++)
                f->b[k] = f->b[k + 1];
            f->n--;
        }
        return off;
    }
    size_t off = f->top;
    f->top += size;
    return off;
}

static size_t round_up(size_t x) { return (x + MPMD_ARENA_ALIGN - 1) / MPMD_ARENA_ALIGN * MPMD_ARENA_ALIGN; }

size_t mpmd_arena_plan(int n, const mpmd_arena_item *items, int npos, size_t *offsets) {
    /* bucket the items by definition and by last use */
    int *def_head = malloc((size_t)(npos + 1) * sizeof(int)),
        *def_next = malloc((size_t)(n + 1) * sizeof(int));
    int *last_head = malloc((size_t)(npos + 1) * sizeof(int)),
        *last_next = malloc((size_t)(n + 1) * sizeof(int));
    unsigned char *taken = calloc((size_t)n + 1, 1); /* its block was taken over by an alias */
    freelist f = {0};
    size_t peak = 0, result = (size_t)-1;
    if (!def_head || !def_next || !last_head || !last_next || !taken) goto done;
    for (int p = 0; p < npos; p++)
        def_head[p] = last_head[p] = -1;
    for (int i = n - 1; i >= 0; i--) {
        offsets[i] = 0;
        if (items[i].bytes == 0) continue;
        def_next[i] = def_head[items[i].def], def_head[items[i].def] = i;
        last_next[i] = last_head[items[i].last], last_head[items[i].last] = i;
    }
    for (int p = 0; p < npos; p++) {
        for (int i = def_head[p]; i >= 0; i = def_next[i]) {
            int a = items[i].alias;
            if (a >= 0 && !taken[a] && items[a].bytes && items[a].last == p &&
                round_up(items[a].bytes) == round_up(items[i].bytes)) {
                offsets[i] = offsets[a];
                taken[a] = 1;
            } else {
                offsets[i] = fl_alloc(&f, round_up(items[i].bytes));
            }
            if (f.top > peak) peak = f.top;
        }
        for (int i = last_head[p]; i >= 0; i = last_next[i])
            if (!taken[i] && fl_insert(&f, offsets[i], round_up(items[i].bytes))) goto done;
    }
    result = peak;
done:
    free(def_head), free(def_next), free(last_head), free(last_next), free(taken), free(f.b);
    return result;
}
