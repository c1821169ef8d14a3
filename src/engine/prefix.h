/* prefix.h — the automatic prefix cache: completed KV blocks keyed by the hash chain of their
 * token ids, reference-counted, evicted least-recently-used. Knows tokens and block ids (through
 * the leader's g4_kvalloc), never HTTP, never tensors.
 *
 * A node is one block of positions of some token prefix: its BS token ids (fewer for the last
 * block of a finished sequence, a leaf), its parent (the previous block), its full-layer block
 * and, while kept, its sliding-layer block. key = XXH64(tokens, seed = parent's key); a lookup
 * checks parent and tokens too, so a hash collision can never hand out another prefix's KV. A
 * node holds one reference to each of its blocks; a sequence using them holds its own.
 *
 * Units (a node's full block, or its sliding block) held by no sequence are evictable and sit
 * in one of two LRU lists: tier 0 — sliding blocks that fell out of a running sequence's window
 * and were never part of a hit ("spares": they only help a later request that diverges right
 * there) — is evicted first; tier 1 — everything else: the blocks of finished sequences (a
 * chain from its root, then the window at its end) and windows that served a hit. Evicting a
 * full block evicts the subtree below it (nothing there is in use: a sequence that uses a node
 * uses all its ancestors). */
#ifndef G4_ENGINE_PREFIX_H
#define G4_ENGINE_PREFIX_H

#include <stdint.h>

#include "engine/kvalloc.h"

typedef struct g4_prefix g4_prefix;

typedef struct g4_prefix_stats {
    int64_t nodes, evictable_pages;
    uint64_t evicted_units;
} g4_prefix_stats;

/* Node capacity: one per full block (a node always holds its full block). */
int g4_prefix_create(g4_kvalloc *a, g4_prefix **out, g4_err *err);
void g4_prefix_free(g4_prefix *p);

/* The longest cached chain of tokens[0..n): chain[i] for the whole blocks matched (returned
 * count), then the child of the last one sharing the longest run of the next tokens
 * (*part, *part_len; -1/0 when none). Pure: changes nothing (not even LRU order). */
int64_t g4_prefix_match(const g4_prefix *p, const int32_t *tok, int64_t n, int32_t *chain, int32_t *part, int *part_len);
int32_t g4_prefix_block(const g4_prefix *p, int32_t node, int kind); /* -1 when dropped */
int g4_prefix_ntok(const g4_prefix *p, int32_t node);
/* The node's tokens into out (g4_prefix_ntok of them). */
void g4_prefix_tokens(const g4_prefix *p, int32_t node, int32_t *out);

/* Registers the block of ntok tokens (ntok < BS: a finished sequence's last block) under parent
 * (-1: the root) with the sequence's blocks blk[kind] (-1 where none). The node takes a
 * reference on them. When the same tokens are already cached under parent, nothing is taken:
 * returns that node with *dup = 1, and the caller switches its table to the node's blocks
 * (the bits are equal: the engine computes a position the same whatever else runs). */
int32_t g4_prefix_insert(g4_prefix *p, int32_t parent, const int32_t *tok, int ntok, const int32_t blk[2], int *dup);
/* A node without a sliding block adopts blk (takes a reference). */
void g4_prefix_adopt(g4_prefix *p, int32_t node, int32_t blk);

/* A sequence takes a reference on the node's block (it leaves the LRU lists). */
void g4_prefix_acquire(g4_prefix *p, int32_t node, int kind);
/* A sequence drops its reference; when only the cache holds the block it joins the LRU tail of
 * `tier` (sliding blocks of nodes marked hot go to tier 1 anyway). */
void g4_prefix_release(g4_prefix *p, int32_t node, int kind, int tier);
/* The node's sliding block served a hit: tier 1 from now on. */
void g4_prefix_mark_hot(g4_prefix *p, int32_t node);

/* Evicts until the allocator has `pages` free pages or nothing is evictable; 0 when it has. */
int g4_prefix_evict(g4_prefix *p, int64_t pages);
/* Evicts everything no sequence uses. */
void g4_prefix_clear(g4_prefix *p);
int64_t g4_prefix_evictable_pages(const g4_prefix *p);
void g4_prefix_get_stats(const g4_prefix *p, g4_prefix_stats *st);

#endif
