/* src/base/mapfile.c refolio_small_cache: a weight file cached in small page-cache folios is
 * dropped from the cache at map time and faulted in again through the 2 MiB map. Whatever it
 * decides, the map must read the file's bytes: forced (G4_MAP_REFOLIO=force) on a file just
 * written, by default (its smaps check) on the same file, off, and on a file under 64 MiB; forced,
 * the file's pages are out of the cache right after the open; off (or after
 * g4_mapfile_set_refolio(0)), and for small files by default, they stay. How much ends up
 * PMD-mapped depends on the kernel and the file system; bench/README.md has the decode speeds. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

static uint8_t pattern(size_t i) { return (uint8_t)((i * 2654435761u) >> 13) | 1; }

static void write_pattern(const char *path, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t buf[65536];
    for (size_t o = 0; o < n; o += sizeof buf) {
        const size_t k = n - o < sizeof buf ? n - o : sizeof buf;
        for (size_t i = 0; i < k; i++) buf[i] = pattern(o + i);
        assert_int_equal(fwrite(buf, 1, k, f), k);
    }
    fclose(f); /* not synced: some of it may still be dirty, which the drop must write back first */
}

/* Cached pages among the first 8 MiB of the map (mincore), before anything reads them. */
static int cached_pages(const uint8_t *p, size_t n) {
    unsigned char vec[2048];
    const size_t len = n < 8 * MIB ? n : 8 * MIB;
    assert_int_equal(mincore((void *)p, len, vec), 0);
    int c = 0;
    for (size_t i = 0; i < (len + 4095) / 4096; i++) c += vec[i] & 1;
    return c;
}

/* mode: G4_MAP_REFOLIO's value or NULL; dropped: 1 when the cache must be gone after the open
 * (forced, on a file system whose cache fadvise can drop), 0 when it must still be there, -1 either */
static void map_reads_file(const char *path, size_t n, const char *mode, int dropped) {
    if (mode) setenv("G4_MAP_REFOLIO", mode, 1);
    else unsetenv("G4_MAP_REFOLIO");
    g4_mapfile m;
    g4_err err = {0};
    assert_int_equal(g4_mapfile_open(&m, path, &err), G4_OK);
    assert_int_equal(m.size, n);
    const int cached = cached_pages(m.data, n);
    if (dropped == 1 && cached > 0) fail_msg("G4_MAP_REFOLIO=%s: %d pages still cached after the open", mode, cached);
    if (dropped == 0 && cached == 0) fail_msg("G4_MAP_REFOLIO=%s: the cache was dropped", mode ? mode : "(unset)");
    for (size_t i = 0; i < n; i += 4093)
        if (m.data[i] != pattern(i)) fail_msg("G4_MAP_REFOLIO=%s: byte %zu is %u, want %u", mode ? mode : "(unset)", i, m.data[i], pattern(i));
    assert_int_equal(m.data[n - 1], pattern(n - 1));
    assert_null(g4_mapfile_check());
    g4_mapfile_close(&m);
    unsetenv("G4_MAP_REFOLIO");
}

static void test_refolio_keeps_bytes(void **state) {
    (void)state;
    char dir[] = "/tmp/g4refolio.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *big = g4_path_join(dir, "big.bin"), *small = g4_path_join(dir, "small.bin");
    const size_t nb = 66 * MIB + 12345, ns = 3 * MIB + 7;
    struct statfs fs;
    assert_int_equal(statfs(dir, &fs), 0);
    const int droppable = fs.f_type != 0x01021994; /* tmpfs: its pages are the file, never dropped */
    write_pattern(big, nb);
    map_reads_file(big, nb, "force", droppable ? 1 : -1);
    write_pattern(big, nb); /* small folios again */
    map_reads_file(big, nb, NULL, -1);
    write_pattern(big, nb);
    map_reads_file(big, nb, "0", 0);
    g4_mapfile_set_refolio(0); /* --load copy: the default never drops */
    write_pattern(big, nb);
    map_reads_file(big, nb, NULL, 0);
    g4_mapfile_set_refolio(1);
    write_pattern(small, ns);
    map_reads_file(small, ns, NULL, 0);
    map_reads_file(small, ns, "force", droppable ? 1 : -1);
    unlink(big);
    unlink(small);
    rmdir(dir);
    free(big);
    free(small);
}

/* kB of "Rss:" in /proc/self/smaps for the mapping that starts at addr */
static long rss_kb(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = lo == (uintptr_t)addr;
        else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

/* g4_mapfile_release (--load copy's bound on the resident set): the whole pages of a range inside
 * a map leave the resident set and still read the file's bytes; a range partly outside releases
 * only what is inside; memory that is not a map is never touched (MADV_DONTNEED would zero it). */
static void test_release_drops_pages_keeps_bytes(void **state) {
    (void)state;
    char dir[] = "/tmp/g4release.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *path = g4_path_join(dir, "w.bin");
    const size_t n = 8 * MIB + 4097;
    write_pattern(path, n);
    g4_mapfile m;
    g4_err err = {0};
    g4_mapfile_set_refolio(0);
    assert_int_equal(g4_mapfile_open(&m, path, &err), G4_OK);
    volatile unsigned sum = 0;
    for (size_t i = 0; i < n; i += 4096) sum += m.data[i];
    const long before = rss_kb(m.data);
    if (before < (long)(n / 1024) - 8) fail_msg("the touched map is only %ld kB resident", before);
    /* a range from mid-page: the partial first page stays, every whole page after it goes */
    assert_int_equal(g4_mapfile_release(m.data + 100, n - 100), (n / 4096 - 1) * 4096);
    const long after = rss_kb(m.data);
    if (after > 16) fail_msg("after the release %ld kB of the map are still resident (before: %ld)", after, before);
    for (size_t i = 0; i < n; i += 4093)
        if (m.data[i] != pattern(i)) fail_msg("after the release byte %zu is %u, want %u", i, m.data[i], pattern(i));
    assert_int_equal(m.data[n - 1], pattern(n - 1));
    /* past the map's end: only the part inside counts */
    const size_t tail = g4_mapfile_release(m.data + n - 2 * 4096, 64 * MIB);
    if (tail == 0 || tail > 2 * 4096) fail_msg("a range past the map released %zu bytes", tail);
    assert_null(g4_mapfile_check());
    g4_mapfile_close(&m);
    g4_mapfile_set_refolio(1);
    /* not a map: left alone */
    uint8_t *heap = aligned_alloc(4096, 4 * MIB);
    assert_non_null(heap);
    for (size_t i = 0; i < 4 * MIB; i++) heap[i] = pattern(i);
    assert_int_equal(g4_mapfile_release(heap, 4 * MIB), 0);
    for (size_t i = 0; i < 4 * MIB; i += 4093)
        if (heap[i] != pattern(i)) fail_msg("release zeroed heap memory at %zu", i);
    free(heap);
    unlink(path);
    rmdir(dir);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refolio_keeps_bytes),
        cmocka_unit_test(test_release_drops_pages_keeps_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
