/* kvseq.h — the leader's bookkeeping of every sequence's KV blocks: which block holds each
 * position block of each layer kind, growth as a step writes new positions, release of sliding
 * blocks that fell out of every window, the prefix cache's hits and registrations. Its
 * decisions go to the ranks as kvpool ops (g4_kvalloc's buffer), sent ahead of the next step,
 * so every rank's tables are the same. Sequences are append-only: a step writes the next
 * positions of each of its sequences, in order.
 *
 * Exactness: a position's keys and values are the same bits whichever sequence computed them
 * (the forward pass's batch invariance), so a cached block stands in for a recomputed one; a
 * hit that ends inside a block copies that block's first positions into a private block
 * (copy-on-write), and a block in the cache is never written again. */
#ifndef G4_ENGINE_KVSEQ_H
#define G4_ENGINE_KVSEQ_H

#include "g4.h"
#include "engine/kvalloc.h"
#include "engine/prefix.h"
#include "gemma4/kvpool.h"

typedef struct g4_kvmgr g4_kvmgr;

int g4_kvmgr_create(const g4_kv_geom *g, int64_t n_pages, int max_seqs, int64_t max_ctx, int max_batch, int prefix_cache,
                    g4_kvops_flush_fn flush, void *flush_ctx, g4_kvmgr **out, g4_err *err);
void g4_kvmgr_free(g4_kvmgr *m);

/* An empty sequence allowed positions 0..cap-1. */
void g4_kvmgr_open(g4_kvmgr *m, int seq, int64_t cap);
/* The same, its first positions taken from the prefix cache: the longest cached prefix of
 * tokens[0..n) that leaves at least one token to compute (and whose sliding-window blocks are
 * all still there). Returns its length: the caller feeds tokens from there on. */
int64_t g4_kvmgr_open_cached(g4_kvmgr *m, int seq, int64_t cap, const int32_t *tok, int64_t n);
/* How many positions open_cached would attach now (changes nothing); *taken: pages of them
 * that are evictable now and would not be after the hit. */
int64_t g4_kvmgr_peek(const g4_kvmgr *m, const int32_t *tok, int64_t n, int64_t *taken);
/* Releases every block (cached ones stay in the cache; the last partial block is registered). */
void g4_kvmgr_close(g4_kvmgr *m, int seq);
int64_t g4_kvmgr_len(const g4_kvmgr *m, int seq);

/* Before a step: checks that each sequence's tokens are its next positions, then takes the
 * blocks they need (evicting cached blocks first). G4_ENOMEM with nothing changed when the
 * pages are not there even after evicting everything evictable; G4_EINVAL for positions out of
 * order. After the step ran: records the tokens, registers completed blocks, releases sliding
 * blocks that no query of the sequence can see any more. */
int g4_kvmgr_prepare(g4_kvmgr *m, const g4_batch *b, g4_err *err);
void g4_kvmgr_commit(g4_kvmgr *m, const g4_batch *b);

/* Speculation. keep: sliding positions kept below every window (so a step can be rolled back
 * by up to keep positions, and the drafter reads the rows it needs); set before any sequence opens.
 * A tentative sequence's steps register no completed block in the prefix cache: a verification
 * step writes drafted positions that may be rejected. truncate rolls the sequence back to len
 * positions (len >= its length - keep, and not into a registered block): the blocks past len are
 * freed, the block len falls in keeps its first positions (the rest are rewritten before anything
 * reads them), and the blocks completed below len are registered; tok: the sequence's tokens,
 * positions 0..len-1. len equal to the length only registers. */
void g4_kvmgr_set_keep(g4_kvmgr *m, int64_t keep);
int64_t g4_kvmgr_keep(const g4_kvmgr *m);
void g4_kvmgr_set_tentative(g4_kvmgr *m, int seq, int on);
int g4_kvmgr_truncate(g4_kvmgr *m, int seq, int64_t len, const int32_t *tok, g4_err *err);

/* The KV cache on disk (kvfile.h). The tokens of the sequence's positions so far that are known
 * (registered blocks, then the block being filled); returns how many (<= its length; out holds
 * max_ctx). */
int64_t g4_kvmgr_seq_tokens(const g4_kvmgr *m, int seq, int32_t *out);
/* The first sliding position an entry of P positions keeps: where the window its next query
 * reads starts, on a block boundary (P when the model has no sliding layers). */
int64_t g4_kvmgr_slide_from(const g4_kvmgr *m, int64_t P);
/* Attaches the cached sliding blocks below the sequence's window, down to the window a prompt of
 * lo tokens reads at its last token (its hit leaves that one to compute), as far as they are cached without a gap (so that a file written from the
 * sequence serves a hit at lo too); returns the sequence's first position with a sliding block. */
int64_t g4_kvmgr_attach_slides(g4_kvmgr *m, int seq, int64_t lo);
/* A sequence being filled from disk: positions below slide_min get no sliding block (the file
 * has none there), and completed blocks there are registered without one. */
void g4_kvmgr_set_restore(g4_kvmgr *m, int seq, int64_t slide_min);
/* After a prepare whose step did not run: gives back the blocks it took past the length. */
void g4_kvmgr_unprepare(g4_kvmgr *m, int seq);

/* Pages a sequence at len positions needs to grow to len + n (with steps of up to max_batch). */
int64_t g4_kvmgr_pages_to_grow(const g4_kvmgr *m, int64_t len, int64_t n);
/* Free pages plus pages only the prefix cache holds. */
int64_t g4_kvmgr_avail_pages(const g4_kvmgr *m);
/* Evicts everything in the prefix cache that no sequence uses. */
void g4_kvmgr_cache_clear(g4_kvmgr *m);

/* The queued ops for the ranks; the caller sends them, then clears. */
const int32_t *g4_kvmgr_ops(const g4_kvmgr *m, int64_t *n);
void g4_kvmgr_ops_clear(g4_kvmgr *m);
int g4_kvmgr_failed(const g4_kvmgr *m);

void g4_kvmgr_stats(const g4_kvmgr *m, g4_kv_stats *st);

#endif
