/* fuzz_regex.c — the pattern compiler (regex.h) and the automata under it (fsa.h). Input: a
 * flags byte (bit 0: the JSON-string encoding, else raw bytes), a pattern and, after a line
 * "--", a candidate string. Invariants: a refusal is G4_EINVAL / G4_EUNSUPPORTED with a
 * message; a compiled pattern determinizes within the limit given (G4_EINVAL naming it
 * otherwise) into a DFA whose moves stay in range; running the candidate never leaves it; and
 * the candidate's letters and digits as an anchored literal pattern give a DFA that takes
 * exactly them. Time and memory: every automaton is charged to a budget of BUDGET_WORK steps and
 * BUDGET_BYTES bytes (fsa.h), whose peak stays within it and which is back at zero once they are
 * freed; fuzz.mk runs this harness with -timeout and -rss_limit_mb small enough that a pattern
 * whose counts multiply, or whose subset construction grows without bound, fails it (the seeds
 * regress-dos-* did before the budget). */
#include "grammar/fsa.h"
#include "grammar/regex.h"
#include "fuzz_util.h"

#define NFA_MAX 200000
#define DFA_MAX 20000
#define BUDGET_WORK 20000000ull
#define BUDGET_BYTES (64u << 20)

/* Runs s through d: 1 accepted, 0 not; checks every move is in range. */
static int run(const g4_dfa *d, const char *s, size_t n) {
    if (d->n == 0) return 0;
    int st = 0;
    for (size_t i = 0; i < n; i++) {
        int c = d->cls[(unsigned char)s[i]];
        FUZZ_CHECK(c >= 0 && c < d->ncls, "class %d of %d", c, d->ncls);
        st = d->next[(size_t)st * (size_t)d->ncls + (size_t)c];
        FUZZ_CHECK(st >= -1 && st < d->n, "move to %d of %d states", st, d->n);
        if (st < 0) return 0;
    }
    return d->acc[st] != 0;
}

static g4_fsa_budget budget;

/* Compiles pat; 0 with *d set, or the error code (checked). */
static int compile(const char *pat, size_t len, g4_str_enc enc, g4_dfa *d) {
    g4_nfa a = {.max_states = NFA_MAX, .budget = &budget};
    g4_err err = {0};
    int s0 = g4_nfa_state(&a), acc = g4_nfa_state(&a);
    int rc = g4_regex_compile(pat, len, enc, &a, s0, acc, &err);
    if (rc) FUZZ_CHECK((rc == G4_EINVAL || rc == G4_EUNSUPPORTED || rc == G4_ENOMEM) && err.msg[0], "rc %d \"%s\"", rc, err.msg);
    FUZZ_CHECK(budget.peak <= BUDGET_BYTES, "the budget's peak %zu is over its limit", budget.peak);
    if (!rc && (a.over || a.oom)) rc = G4_EINVAL; /* the NFA limit: the schema compiler refuses these */
    if (!rc) {
        rc = g4_nfa_to_dfa(&a, s0, acc, DFA_MAX, d, &err);
        if (rc) FUZZ_CHECK((rc == G4_EINVAL || rc == G4_ENOMEM) && err.msg[0], "to_dfa rc %d \"%s\"", rc, err.msg);
        else FUZZ_CHECK(d->n >= 0 && d->n <= DFA_MAX && d->ncls >= 1 && d->ncls <= G4_NSYM, "DFA of %d states, %d classes", d->n, d->ncls);
    }
    g4_nfa_free(&a);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    budget = (g4_fsa_budget){.max_bytes = BUDGET_BYTES, .max_work = BUDGET_WORK};
    const g4_str_enc enc = fuzz_byte(&in) & 1 ? G4_ENC_JSON : G4_ENC_RAW;
    fuzz_in pat = fuzz_split(&in, "\n--\n"), cand = in;
    if (pat.n > 4096) return 0;
    g4_dfa d;
    if (!compile((const char *)pat.p, pat.n, enc, &d)) {
        run(&d, (const char *)cand.p, cand.n);
        g4_dfa_free(&d);
    }
    FUZZ_CHECK(budget.bytes == 0, "%zu bytes still charged after everything was freed", budget.bytes);
    budget = (g4_fsa_budget){.max_bytes = BUDGET_BYTES, .max_work = BUDGET_WORK};
    char lit[66];
    size_t n = 1;
    lit[0] = '^';
    for (size_t i = 0; i < cand.n && n < 64; i++) {
        unsigned char ch = cand.p[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) lit[n++] = (char)ch;
    }
    lit[n++] = '$';
    FUZZ_CHECK(compile(lit, n, enc, &d) == 0, "the literal %.*s did not compile", (int)n, lit);
    FUZZ_CHECK(run(&d, lit + 1, n - 2), "the literal %.*s does not take itself", (int)n, lit);
    char longer[66];
    memcpy(longer, lit + 1, n - 2);
    longer[n - 2] = 'x';
    FUZZ_CHECK(!run(&d, longer, n - 1), "the literal %.*s takes more than itself", (int)n, lit);
    g4_dfa_free(&d);
    FUZZ_CHECK(budget.bytes == 0, "%zu bytes still charged after everything was freed", budget.bytes);
    return 0;
}
