/* BPE model: vocabulary and merge hash tables, the merge loop, the word cache. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* GPT-2 bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68
 * bytes to U+0100.. in byte order. */
uint32_t vsr_byte_level_char(uint8_t b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t k = 0;
    for (uint32_t x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) k++;
    return 256 + k;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8, n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w ^ n) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return h;
}

static uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 33);
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---------------- string map ---------------- */

vsr_status vsr_strmap_init(vsr_strmap *m, uint32_t expected) {
    memset(m, 0, sizeof *m);
    m->mask = pow2_at_least((size_t)expected * 2 + 1) - 1;
    m->cap = expected ? expected : 1;
    m->slots = calloc((size_t)m->mask + 1, sizeof *m->slots);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->key_len = malloc(m->cap * sizeof *m->key_len);
    m->vals = malloc(m->cap * sizeof *m->vals);
    return (m->slots && m->keys && m->key_len && m->vals) ? VSR_OK : VSR_E_NOMEM;
}

void vsr_strmap_free(vsr_strmap *m) {
    if (!m) return;
    free(m->slots), free(m->keys), free(m->key_len), free(m->vals);
    memset(m, 0, sizeof *m);
}

static vsr_status strmap_grow(vsr_strmap *m) {
    uint32_t ncap = m->cap * 2;
    const char **k = realloc(m->keys, ncap * sizeof *k);
    if (!k) return VSR_E_NOMEM;
    m->keys = k;
    uint32_t *kl = realloc(m->key_len, ncap * sizeof *kl);
    if (!kl) return VSR_E_NOMEM;
    m->key_len = kl;
    int32_t *v = realloc(m->vals, ncap * sizeof *v);
    if (!v) return VSR_E_NOMEM;
    m->vals = v;
    m->cap = ncap;
    uint32_t nmask = pow2_at_least((size_t)ncap * 2 + 1) - 1;
    uint32_t *slots = calloc((size_t)nmask + 1, sizeof *slots);
    if (!slots) return VSR_E_NOMEM;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t h = (uint32_t)hash_bytes(m->keys[e], m->key_len[e]) & nmask;
        while (slots[h]) h = (h + 1) & nmask;
        slots[h] = e + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = nmask;
    return VSR_OK;
}

vsr_status vsr_strmap_put(vsr_strmap *m, const char *key, size_t len, int32_t val) {
    if (vsr_strmap_get(m, key, len) >= 0) return VSR_E_INVALID;
    if (m->n == m->cap && strmap_grow(m) != VSR_OK) return VSR_E_NOMEM;
    uint32_t h = (uint32_t)hash_bytes(key, len) & m->mask;
    while (m->slots[h]) h = (h + 1) & m->mask;
    m->keys[m->n] = key;
    m->key_len[m->n] = (uint32_t)len;
    m->vals[m->n] = val;
    m->slots[h] = ++m->n;
    return VSR_OK;
}

int32_t vsr_strmap_get(const vsr_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    uint32_t h = (uint32_t)hash_bytes(key, len) & m->mask;
    for (uint32_t e; (e = m->slots[h]); h = (h + 1) & m->mask)
        if (m->key_len[e - 1] == len && !memcmp(m->keys[e - 1], key, len)) return m->vals[e - 1];
    return -1;
}

/* ---------------- merge map ---------------- */

vsr_status vsr_merge_map_init(vsr_merge_map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->mask = pow2_at_least(expected * 2 + 1) - 1;
    m->slot = calloc((size_t)m->mask + 1, sizeof *m->slot);
    return m->slot ? VSR_OK : VSR_E_NOMEM;
}

void vsr_merge_map_free(vsr_merge_map *m) {
    if (!m) return;
    free(m->slot);
    memset(m, 0, sizeof *m);
}

void vsr_merge_map_put(vsr_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t h = (uint32_t)hash64(key) & m->mask;
    while (m->slot[h].key && m->slot[h].key != key) h = (h + 1) & m->mask;
    m->slot[h] = (vsr_merge_slot){key, rank, merged};
}

/* Rank of merging (left, right), INT32_MAX if they do not merge; *merged gets the id. */
static inline int32_t merge_get(const vsr_merge_map *m, int32_t left, int32_t right, int32_t *merged) {
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t h = (uint32_t)hash64(key) & m->mask;
    for (const vsr_merge_slot *s; (s = &m->slot[h])->key; h = (h + 1) & m->mask)
        if (s->key == key) return *merged = s->merged, s->rank;
    return INT32_MAX;
}

/* ---------------- ids ---------------- */

vsr_status vsr_ids_push(vsr_ids *ids, const int32_t *v, size_t n) {
    if (ids->n + n > ids->cap) {
        size_t c = ids->cap ? ids->cap * 2 : 64;
        while (c < ids->n + n) c *= 2;
        int32_t *p = realloc(ids->v, c * sizeof *p);
        if (!p) return VSR_E_NOMEM;
        ids->v = p, ids->cap = c;
    }
    memcpy(ids->v + ids->n, v, n * sizeof *v);
    ids->n += n;
    return VSR_OK;
}

/* ---------------- cache ---------------- */

vsr_bpe_cache *vsr_bpe_cache_new(void) {
    vsr_bpe_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < VSR_BPE_CACHE_LOCKS; i++) pthread_mutex_init(&c->lock[i], NULL);
    return c;
}

void vsr_bpe_cache_free(vsr_bpe_cache *c) {
    if (!c) return;
    for (int i = 0; i < VSR_BPE_CACHE_SLOTS; i++) free(c->slot[i]);
    for (int i = 0; i < VSR_BPE_CACHE_LOCKS; i++) pthread_mutex_destroy(&c->lock[i]);
    free(c);
}

static size_t entry_ids_off(uint32_t len) { return sizeof(vsr_bpe_cache_entry) + ((len + 3u) & ~3u); }

/* ---------------- merging ---------------- */

/* Tokenizers merges the pair with the lowest (rank, position) first, one pair at a
 * time; a heap entry is stale when its pair no longer yields the same merged id. For
 * short words a linear scan for the same minimum is faster and gives the same order. */
static size_t merge_scan(const vsr_merge_map *mm, int32_t *sym, size_t m) {
    int32_t rank[256], merged[256];
    for (size_t k = 0; k + 1 < m; k++) rank[k] = merge_get(mm, sym[k], sym[k + 1], &merged[k]);
    while (m > 1) {
        size_t best = 0;
        for (size_t k = 1; k + 1 < m; k++)
            if (rank[k] < rank[best]) best = k;
        if (rank[best] == INT32_MAX) break;
        sym[best] = merged[best];
        size_t tail = m - best - 2; /* pairs after the removed symbol */
        memmove(sym + best + 1, sym + best + 2, tail * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof *merged);
        m--;
        if (best > 0) rank[best - 1] = merge_get(mm, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < m) rank[best] = merge_get(mm, sym[best], sym[best + 1], &merged[best]);
    }
    return m;
}

typedef struct heap_item {
    int32_t rank, pos, merged;
} heap_item;

static inline bool item_less(heap_item a, heap_item b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && item_less(h[c + 1], h[c])) c++;
        if (!item_less(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

/* The heap form of tokenizers' Word::merge_all, for long words. sym[m] in/out. */
static vsr_status merge_heap(const vsr_merge_map *mm, int32_t *sym, size_t *pm) {
    size_t m = *pm;
    int32_t *prev = malloc(m * sizeof *prev), *next = malloc(m * sizeof *next);
    heap_item *h = malloc((3 * m + 1) * sizeof *h); /* m-1 at start, then at most 2 a merge */
    if (!prev || !next || !h) {
        free(prev), free(next), free(h);
        return VSR_E_NOMEM;
    }
    bool *dead = calloc(m, 1);
    if (!dead) {
        free(prev), free(next), free(h);
        return VSR_E_NOMEM;
    }
    size_t hn = 0;
    for (size_t k = 0; k < m; k++) {
        prev[k] = (int32_t)k - 1;
        next[k] = k + 1 < m ? (int32_t)k + 1 : -1;
        int32_t mg;
        int32_t r = k + 1 < m ? merge_get(mm, sym[k], sym[k + 1], &mg) : INT32_MAX;
        if (r != INT32_MAX) heap_push(h, &hn, (heap_item){r, (int32_t)k, mg});
    }
    while (hn) {
        heap_item top = heap_pop(h, &hn);
        int32_t p = top.pos;
        if (dead[p] || next[p] < 0) continue;
        int32_t q = next[p], mg;
        if (merge_get(mm, sym[p], sym[q], &mg) == INT32_MAX || mg != top.merged) continue;
        sym[p] = top.merged;
        dead[q] = true;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        int32_t r;
        if (prev[p] >= 0 && (r = merge_get(mm, sym[prev[p]], sym[p], &mg)) != INT32_MAX)
            heap_push(h, &hn, (heap_item){r, prev[p], mg});
        if (next[p] >= 0 && (r = merge_get(mm, sym[p], sym[next[p]], &mg)) != INT32_MAX)
            heap_push(h, &hn, (heap_item){r, p, mg});
    }
    size_t o = 0;
    for (int32_t k = 0; k >= 0; k = next[k]) sym[o++] = sym[k];
    *pm = o;
    free(prev), free(next), free(h), free(dead);
    return VSR_OK;
}

vsr_status vsr_bpe_word(const vsr_tokenizer *t, const uint8_t *w, size_t n, vsr_ids *out) {
    if (n == 0) return VSR_OK;
    vsr_bpe_cache *c = t->cache;
    uint64_t hsh = 0;
    size_t slot = 0;
    pthread_mutex_t *lk = NULL;
    if (c && n <= VSR_BPE_CACHE_MAX_WORD) {
        hsh = hash_bytes(w, n);
        slot = hsh & (VSR_BPE_CACHE_SLOTS - 1);
        lk = &c->lock[slot % VSR_BPE_CACHE_LOCKS];
        pthread_mutex_lock(lk);
        vsr_bpe_cache_entry *e = c->slot[slot];
        if (e && e->hash == hsh && e->len == n && !memcmp(e + 1, w, n)) {
            vsr_status st = vsr_ids_push(out, (const int32_t *)((const char *)e + entry_ids_off(e->len)), e->n_ids);
            pthread_mutex_unlock(lk);
            return st;
        }
        pthread_mutex_unlock(lk);
    }
    int32_t stack[256], *sym = n <= 256 ? stack : malloc(n * sizeof *sym);
    if (!sym) return VSR_E_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) /* ByteLevel: one initial symbol per byte */
        if (t->byte_id[w[i]] >= 0) sym[m++] = t->byte_id[w[i]];
    vsr_status st = VSR_OK;
    if (m <= 64) m = merge_scan(&t->merges, sym, m);
    else st = merge_heap(&t->merges, sym, &m);
    if (st == VSR_OK) st = vsr_ids_push(out, sym, m);
    if (st == VSR_OK && lk) {
        vsr_bpe_cache_entry *e = malloc(entry_ids_off((uint32_t)n) + m * sizeof(int32_t));
        if (e) { /* a failed cache insert only costs speed */
            e->hash = hsh, e->len = (uint32_t)n, e->n_ids = (uint32_t)m;
            memcpy(e + 1, w, n);
            memcpy((char *)e + entry_ids_off((uint32_t)n), sym, m * sizeof(int32_t));
            pthread_mutex_lock(lk);
            vsr_bpe_cache_entry *old = c->slot[slot];
            c->slot[slot] = e;
            pthread_mutex_unlock(lk);
            free(old);
        }
    }
    if (sym != stack) free(sym);
    return st;
}
