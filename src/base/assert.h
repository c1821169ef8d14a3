/* assert.h — G4_ASSERT, for programmer errors only (DESIGN.md §8): an invariant the code relies
 * on, which no input, file, network or memory condition can break (those return a g4_status).
 * A failed assertion prints "g4tp: assertion failed at FILE:LINE: COND: MESSAGE" on stderr and
 * aborts: the process is in a state nothing was written for, and going on would give wrong tokens
 * or write through a bad index.
 *
 * Kept in release builds (no NDEBUG switch): every G4_ASSERT sits outside the inner loops (once
 * per call, block or op, never per element), so it costs nothing measurable, and the invariants
 * it guards (reference counts, table entries, dispatch on a dtype) are exactly the ones whose
 * breach would otherwise go on silently. Not for the public API's argument checks. */
#ifndef G4_BASE_ASSERT_H
#define G4_BASE_ASSERT_H

/* G4_ASSERT(cond, "printf format", args...) */
#define G4_ASSERT(cond, ...)                                                                  \
    do {                                                                                      \
        if (__builtin_expect(!(cond), 0)) g4_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

_Noreturn void g4_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), cold));

#endif
