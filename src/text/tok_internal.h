/* tok_internal.h — the loaded tokenizer's tables, shared by tokenizer.c (load, lookups),
 * tok_merges.c (merges at load), tok_encode.c (encode) and tok_decode.c (decode, streaming);
 * the buffers, hash tables and tries themselves are tok_tables.c's. Not a public header. */
#ifndef G4_TEXT_TOK_INTERNAL_H
#define G4_TEXT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "text/tokenizer.h"

/* A growable byte buffer. */
typedef struct { char *b; size_t n, cap; } tk_buf;
int tk_buf_reserve(tk_buf *s, size_t extra);
int tk_buf_put(tk_buf *s, const void *p, size_t n);
/* Doubles an array's capacity (to `first` elements when empty). From 4 MB on the new block comes
 * from tj_big_alloc (huge pages): a 1 MB input needs ~30 MB of BPE work arrays, and faulting
 * those in 4 KB at a time cost more than the merging. Free with free(). */
int tk_grow(void **p, size_t *cap, size_t elem, size_t first);

/* String -> id, open addressing; the strings live in the tokenizer's pool. */
typedef struct { uint32_t off, len; int32_t idp1; uint32_t hash; } tk_sslot; /* idp1: id + 1, 0 = empty */
typedef struct { tk_sslot *slots; size_t cap, n; } tk_strmap;

/* (left id, right id) -> (rank, merged id). */
typedef struct { uint64_t keyp1; uint32_t rank; int32_t new_id; } tk_mslot; /* keyp1: key + 1, 0 = empty */
typedef struct { tk_mslot *slots; size_t cap, n; } tk_mergemap;

/* A byte trie of added-token strings for leftmost-longest matching. */
typedef struct {
    int32_t *term;        /* per node: added-token index ending here, or -1 */
    size_t n_nodes;
    tk_mergemap edges;    /* key (node << 8 | byte) -> child node in new_id */
} tk_trie;

typedef struct {
    uint32_t off, len;    /* content in the pool */
    int32_t id;
    uint8_t special, normalized, lstrip, rstrip, single_word;
} tk_added;

enum { TN_REPLACE, TN_PREPEND, TN_STRIP };
typedef struct { int type; uint32_t a_off, a_len, b_off, b_len; int left, right; } tk_norm;

enum { TS_REMOVED, TS_ISOLATED, TS_MERGED_PREV, TS_MERGED_NEXT, TS_CONTIGUOUS };
typedef struct { uint32_t pat_off, pat_len; int behavior, invert; } tk_split;

enum { TD_REPLACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP };
typedef struct { int type; uint32_t a_off, a_len, b_off, b_len; uint32_t content; size_t start, stop; } tk_dec;

struct g4_tokenizer {
    tk_buf pool;                  /* every string the tables point at */
    /* model */
    tk_strmap vocab;              /* model vocab */
    size_t model_vocab_size;      /* entries in the model vocab (HF get_vocab_size) */
    tk_mergemap merges;
    int32_t byte_id[256];         /* vocab id of "<0xNN>", -1 if absent */
    int byte_fallback, fuse_unk, ignore_merges, has_unk;
    uint32_t unk_off, unk_len;
    int32_t unk_id;               /* -1 when unk_token is not in the vocab */
    uint32_t prefix_off, prefix_len, suffix_off, suffix_len;
    int has_prefix, has_suffix;
    /* ids */
    int32_t n_ids;                /* 1 + largest id */
    uint32_t *id_off, *id_len;    /* piece of each id; id_len == UINT32_MAX when none */
    uint8_t *id_special;
    /* added tokens */
    tk_added *added;
    size_t n_added;
    tk_strmap added_map;          /* content -> id (HF added_tokens_map) */
    int32_t *id_added;            /* id -> index in added (HF added_tokens_map_r), -1 */
    tk_strmap special_set;        /* contents of special tokens */
    tk_trie trie_raw, trie_norm;
    /* pipeline */
    int has_normalizer;
    tk_norm *norm; size_t n_norm;
    tk_split *split; size_t n_split;
    int has_decoder;
    tk_dec *dec; size_t n_dec;
    int32_t *tmpl; size_t n_tmpl; /* single template: ids, -1 = the sequence */
};

static inline const char *tk_str(const g4_tokenizer *t, uint32_t off) { return t->pool.b + off; }

uint32_t tk_shash(const char *s, size_t len);
/* Sized for `expect` entries without rehashing (tables hold at most 7 entries per 10 slots). */
int tk_strmap_init(tk_strmap *m, size_t expect);
/* Inserts or overwrites (HashMap semantics: the last insert of a key wins); off/len in the pool. */
int tk_strmap_put(const g4_tokenizer *t, tk_strmap *m, uint32_t off, uint32_t len, int32_t id);
int32_t tk_strmap_get(const g4_tokenizer *t, const tk_strmap *m, const char *s, size_t len);
/* The same with the hash tk_shash(s, len) already computed. */
int32_t tk_strmap_get_h(const g4_tokenizer *t, const tk_strmap *m, const char *s, size_t len, uint32_t h);

static inline uint64_t tk_pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static inline size_t tk_mhash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k;
}
/* Sized for `expect` entries without rehashing. */
int tk_mergemap_init(tk_mergemap *m, size_t expect);
/* Inserts or overwrites. */
int tk_mergemap_put(tk_mergemap *m, uint64_t key, uint32_t rank, int32_t new_id);
int tk_mergemap_get(const tk_mergemap *m, uint64_t key, uint32_t *rank, int32_t *new_id);

/* Fills t->merges from model.merges (an array, or NULL for none); t->vocab must be complete.
 * Errors name the first bad merge (tok_merges.c). */
struct tj_val;
int tk_load_merges(g4_tokenizer *t, const struct tj_val *merges, g4_err *err);

/* The added-token tries: tk_trie_add makes s pattern idx (an equal earlier pattern keeps the
 * match); tk_trie_longest gives the longest pattern at the start of s and its length. */
int tk_trie_init(tk_trie *tr);
void tk_trie_free(tk_trie *tr);
int tk_trie_add(tk_trie *tr, const char *s, size_t len, int32_t idx);

/* Encode stages used by tok_encode.c. */
int tk_normalize(const g4_tokenizer *t, const char *s, size_t len, tk_buf *out, tk_buf *tmp);
int tk_trie_longest(const g4_tokenizer *t, const tk_trie *tr, const char *s, size_t len, size_t *mlen);

#endif
