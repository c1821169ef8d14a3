/* jinja_parse.c — the Jinja2 lexer and parser: template source -> AST (jx_node, see
 * jinja_internal.h). Reproduces Jinja2 3.1's lexer as Hugging Face configures it
 * (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newlines normalised to
 * "\n"), whitespace control (`{%-`, `-%}`, `{%+`, `+%}`), comments, raw blocks, Python-style
 * string escapes, and Jinja's expression grammar and precedence. Tags and filters outside the
 * implemented subset fail here with G4_EUNSUPPORTED (or G4_EFORMAT for syntax errors) naming the
 * line. Knows nothing about how the AST is evaluated. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ---------------------------------------------------------------- tokens */

enum {
    T_EOF = 0, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
};

typedef struct tok {
    int type, line;
    const char *p;   /* NAME / OP text (NUL-terminated, arena); DATA text */
    size_t n;
    jv val;          /* STRING / INT / FLOAT */
} tok;

typedef struct lexer {
    jx_trap *trap;
    jx_arena *a;
    const char *s;
    size_t n, pos;
    int line;
    tok *toks;
    size_t ntok, cap;
    size_t cur_pos;  /* line cursor: line number at cur_pos */
    int cur_line;
} lexer;

typedef struct parser {
    jx_trap *trap;
    jx_arena *a;
    tok *t;
    size_t i, n;
    int depth;
    int loop_depth;
} parser;

static void push_tok(lexer *L, int type, int line, const char *p, size_t n, jv val)
{
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tok *nt = jx_alloc(L->a, cap * sizeof(tok));
        if (L->ntok) memcpy(nt, L->toks, L->ntok * sizeof(tok));
        L->toks = nt;
        L->cap = cap;
    }
    tok *t = &L->toks[L->ntok++];
    t->type = type;
    t->line = line;
    t->p = p;
    t->n = n;
    t->val = val;
}

static _Noreturn void lex_fail(lexer *L, int line, int code, const char *msg, const char *arg)
{
    L->trap->line = line;
    jx_fail(L->trap, code, msg, arg);
}

/* Python's \s (Unicode whitespace) at p; returns its byte length or 0. */
static size_t ws_at(const char *p, size_t n)
{
    if (!n) return 0;
    uint32_t cp;
    size_t l = jx_utf8_dec(p, n, &cp);
    return jx_isspace_cp(cp) ? l : 0;
}

/* 1-based line of byte offset pos (amortised O(1): positions mostly move forward) */
static int line_at(lexer *L, size_t pos)
{
    if (pos < L->cur_pos) {
        L->cur_pos = 0;
        L->cur_line = 1;
    }
    for (size_t i = L->cur_pos; i < pos && i < L->n; i++) L->cur_line += L->s[i] == '\n';
    L->cur_pos = pos;
    return L->cur_line;
}

static size_t skip_ws(const char *s, size_t n, size_t pos)
{
    size_t l;
    while (pos < n && (l = ws_at(s + pos, n - pos))) pos += l;
    return pos;
}

/* Python str.rstrip() of s[0:n): new length */
static size_t rstrip_len(const char *s, size_t n)
{
    for (;;) {
        if (!n) return 0;
        size_t k = n - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        if (!ws_at(s + k, n - k) || ws_at(s + k, n - k) != n - k) return n;
        n = k;
    }
}

/* all of s[0:n) is whitespace and n > 0 */
static bool all_ws(const char *s, size_t n)
{
    if (!n) return false;
    size_t p = skip_ws(s, n, 0);
    return p == n;
}

static void emit_data(lexer *L, const char *p, size_t n, int line)
{
    if (n) push_tok(L, T_DATA, line, p, n, jv_none());
}

/* Applies `-` / lstrip_blocks to the data preceding a tag, then emits it. */
static void emit_before_tag(lexer *L, const char *p, size_t n, int line, char sign, bool is_var,
                            bool line_starting)
{
    if (sign == '-') {
        n = rstrip_len(p, n);
    } else if (sign != '+' && !is_var) {
        size_t l_pos = 0;
        for (size_t i = n; i > 0; i--)
            if (p[i - 1] == '\n') { l_pos = i; break; }
        if ((l_pos > 0 || line_starting) && all_ws(p + l_pos, n - l_pos)) n = l_pos;
    }
    emit_data(L, p, n, line);
}

static const char *k_ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                              "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";", NULL};

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name1(char c) { return is_name0(c) || is_digit(c); }

/* digits with optional single underscores: (\d+_)*\d+ ; returns end or start if none */
static size_t scan_digits(const char *s, size_t n, size_t p)
{
    size_t q = p;
    if (q >= n || !is_digit(s[q])) return p;
    while (q < n) {
        while (q < n && is_digit(s[q])) q++;
        if (q + 1 < n && s[q] == '_' && is_digit(s[q + 1])) { q++; continue; }
        break;
    }
    return q;
}

static jv number_value(lexer *L, const char *p, size_t n, bool is_float)
{
    char *buf = jx_alloc(L->a, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] != '_') buf[k++] = p[i];
    buf[k] = 0;
    if (is_float) return jv_float(strtod(buf, NULL));
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno) lex_fail(L, L->line, G4_EUNSUPPORTED, "integer literal %s is too large (Python big ints are not supported)", buf);
    return jv_int(v);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python "unicode-escape" decoding of a string literal body. */
static jv string_value(lexer *L, const char *p, size_t n)
{
    jx_buf b;
    jx_buf_init(&b, L->a);
    jx_buf_put(&b, "", 0);
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch != '\\' || i + 1 >= n) { jx_buf_putc(&b, ch); continue; }
        char e = p[++i];
        int want = 0;
        switch (e) {
        case '\n': break;
        case '\\': jx_buf_putc(&b, '\\'); break;
        case '\'': jx_buf_putc(&b, '\''); break;
        case '"': jx_buf_putc(&b, '"'); break;
        case 'a': jx_buf_putc(&b, '\a'); break;
        case 'b': jx_buf_putc(&b, '\b'); break;
        case 'f': jx_buf_putc(&b, '\f'); break;
        case 'n': jx_buf_putc(&b, '\n'); break;
        case 'r': jx_buf_putc(&b, '\r'); break;
        case 't': jx_buf_putc(&b, '\t'); break;
        case 'v': jx_buf_putc(&b, '\v'); break;
        case 'x': want = 2; break;
        case 'u': want = 4; break;
        case 'U': want = 8; break;
        case 'N': lex_fail(L, L->line, G4_EUNSUPPORTED, "%s escapes in string literals are not supported", "\\N{...}");
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '7'; k++) v = v * 8 + (uint32_t)(p[++i] - '0');
                jx_buf_put_cp(&b, v);
            } else {
                jx_buf_putc(&b, '\\');
                jx_buf_putc(&b, e);
            }
        }
        if (want) {
            uint32_t v = 0;
            for (int k = 0; k < want; k++) {
                int h = i + 1 < n ? hexval(p[i + 1]) : -1;
                if (h < 0) lex_fail(L, L->line, G4_EFORMAT, "%s", "truncated \\x/\\u escape in a string literal");
                v = v * 16 + (uint32_t)h;
                i++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                lex_fail(L, L->line, G4_EUNSUPPORTED, "%s", "escape outside the Unicode scalar range (surrogates) is not supported");
            jx_buf_put_cp(&b, v);
        }
    }
    return jv_strn(b.p, b.n);
}

/* Lexes the inside of a tag until its end; returns position after the end marker.
 * kind: 'b' block, 'v' variable. */
static size_t lex_tag(lexer *L, size_t pos, char kind)
{
    const char *s = L->s;
    size_t n = L->n;
    int balance = 0;
    for (;;) {
        pos = skip_ws(s, n, pos);
        L->line = line_at(L, pos);
        if (pos >= n) lex_fail(L, L->line, G4_EFORMAT, "unexpected end of template: missing '%s'", kind == 'b' ? "%}" : "}}");
        if (balance == 0) {
            if (kind == 'b') {
                if (s[pos] == '+' && pos + 2 < n && s[pos + 1] == '%' && s[pos + 2] == '}') {
                    push_tok(L, T_BLOCK_END, L->line, NULL, 0, jv_none());
                    return pos + 3;
                }
                if (s[pos] == '-' && pos + 2 < n && s[pos + 1] == '%' && s[pos + 2] == '}') {
                    push_tok(L, T_BLOCK_END, L->line, NULL, 0, jv_none());
                    return skip_ws(s, n, pos + 3);
                }
                if (s[pos] == '%' && pos + 1 < n && s[pos + 1] == '}') {
                    push_tok(L, T_BLOCK_END, L->line, NULL, 0, jv_none());
                    pos += 2;
                    if (pos < n && s[pos] == '\n') pos++; /* trim_blocks */
                    return pos;
                }
            } else {
                if (s[pos] == '-' && pos + 2 < n && s[pos + 1] == '}' && s[pos + 2] == '}') {
                    push_tok(L, T_VAR_END, L->line, NULL, 0, jv_none());
                    return skip_ws(s, n, pos + 3);
                }
                if (s[pos] == '}' && pos + 1 < n && s[pos + 1] == '}') {
                    push_tok(L, T_VAR_END, L->line, NULL, 0, jv_none());
                    return pos + 2;
                }
            }
        }
        char ch = s[pos];
        /* float / integer */
        if (is_digit(ch) && !(pos > 0 && s[pos - 1] == '.')) {
            size_t q = scan_digits(s, n, pos);
            bool isf = false;
            if (q + 1 < n && s[q] == '.' && is_digit(s[q + 1])) {
                q = scan_digits(s, n, q + 1);
                isf = true;
            }
            if (q < n && (s[q] == 'e' || s[q] == 'E')) {
                size_t r = q + 1;
                if (r < n && (s[r] == '+' || s[r] == '-')) r++;
                size_t e = scan_digits(s, n, r);
                if (e > r) { q = e; isf = true; }
            }
            push_tok(L, isf ? T_FLOAT : T_INT, L->line, NULL, 0, number_value(L, s + pos, q - pos, isf));
            pos = q;
            continue;
        }
        if (is_digit(ch)) {
            size_t q = scan_digits(s, n, pos);
            push_tok(L, T_INT, L->line, NULL, 0, number_value(L, s + pos, q - pos, false));
            pos = q;
            continue;
        }
        if (is_name0(ch)) {
            size_t q = pos;
            while (q < n && is_name1(s[q])) q++;
            push_tok(L, T_NAME, L->line, jx_strdup(L->a, s + pos, q - pos), q - pos, jv_none());
            pos = q;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t q = pos + 1;
            while (q < n && s[q] != ch) {
                if (s[q] == '\\' && q + 1 < n) q++;
                q++;
            }
            if (q >= n) lex_fail(L, L->line, G4_EFORMAT, "%s", "unterminated string literal");
            push_tok(L, T_STRING, L->line, NULL, 0, string_value(L, s + pos + 1, q - pos - 1));
            pos = q + 1;
            continue;
        }
        int k;
        for (k = 0; k_ops[k]; k++) {
            size_t ol = strlen(k_ops[k]);
            if (pos + ol <= n && memcmp(s + pos, k_ops[k], ol) == 0) break;
        }
        if (!k_ops[k]) {
            char tmp[8];
            snprintf(tmp, sizeof tmp, "%c", ch);
            lex_fail(L, L->line, G4_EFORMAT, "unexpected char '%s'", tmp);
        }
        const char *op = k_ops[k];
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') balance++;
        if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
            if (balance == 0) lex_fail(L, L->line, G4_EFORMAT, "unexpected '%s'", op);
            balance--;
        }
        push_tok(L, T_OP, L->line, op, strlen(op), jv_none());
        pos += strlen(op);
    }
}

/* matches `{%[-+]?\s*NAME\s*` at pos; returns position after or 0 */
static size_t match_tag_name(const char *s, size_t n, size_t pos, const char *name, char *sign)
{
    if (pos + 2 > n || s[pos] != '{' || s[pos + 1] != '%') return 0;
    size_t q = pos + 2;
    *sign = 0;
    if (q < n && (s[q] == '-' || s[q] == '+')) *sign = s[q++];
    q = skip_ws(s, n, q);
    size_t l = strlen(name);
    if (q + l > n || memcmp(s + q, name, l) != 0) return 0;
    q += l;
    if (q < n && is_name1(s[q])) return 0;
    return skip_ws(s, n, q);
}

static void lex(lexer *L)
{
    const char *s = L->s;
    size_t n = L->n, pos = 0;
    bool line_starting = true;
    while (pos < n) {
        /* find the next tag opener */
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '%' || s[q + 1] == '{' || s[q + 1] == '#'))) q++;
        int line = line_at(L, pos);
        if (q + 1 >= n) {
            emit_data(L, s + pos, n - pos, line);
            break;
        }
        char open = s[q + 1];
        char sign = (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        if (open == '{' && sign == '+') sign = 0; /* `{{+` is not a marker */
        char rs;
        size_t after_raw = open == '%' ? match_tag_name(s, n, q, "raw", &rs) : 0;
        if (after_raw) {
            size_t e = after_raw;
            bool end_ok = false;
            if (e + 2 < n + 0 && s[e] == '-' && s[e + 1] == '%' && s[e + 2] == '}') { e = skip_ws(s, n, e + 3); end_ok = true; }
            else if (e + 1 < n && s[e] == '%' && s[e + 1] == '}') { e += 2; end_ok = true; }
            if (!end_ok) lex_fail(L, line_at(L, q), G4_EFORMAT, "%s", "malformed raw tag");
            emit_before_tag(L, s + pos, q - pos, line, rs, false, line_starting);
            /* find endraw */
            size_t r = e, body_end = 0, next = 0;
            char es = 0;
            for (; r + 1 < n; r++) {
                size_t m = match_tag_name(s, n, r, "endraw", &es);
                if (!m) continue;
                if (m + 1 < n && s[m] == '+' && s[m + 1] == '%' && m + 2 < n && s[m + 2] == '}') { next = m + 3; }
                else if (m + 2 < n && s[m] == '-' && s[m + 1] == '%' && s[m + 2] == '}') { next = skip_ws(s, n, m + 3); }
                else if (m + 1 < n && s[m] == '%' && s[m + 1] == '}') { next = m + 2; if (next < n && s[next] == '\n') next++; }
                else continue;
                body_end = r;
                break;
            }
            if (!next) lex_fail(L, line_at(L, q), G4_EFORMAT, "%s", "missing end of raw directive");
            emit_before_tag(L, s + e, body_end - e, line_at(L, e), es, false, false);
            line_starting = s[next - 1] == '\n';
            pos = next;
            continue;
        }
        emit_before_tag(L, s + pos, q - pos, line, sign, open == '{', line_starting);
        size_t p2 = q + 2 + (sign ? 1 : 0);
        int tline = line_at(L, q);
        if (open == '#') {
            /* comment: find `#}` */
            size_t r = p2;
            while (r + 1 < n && !(s[r] == '#' && s[r + 1] == '}')) r++;
            if (r + 1 >= n) lex_fail(L, tline, G4_EFORMAT, "%s", "missing end of comment tag");
            char cs = r > p2 ? s[r - 1] : 0;
            size_t next = r + 2;
            if (cs == '-') next = skip_ws(s, n, next);
            else if (cs != '+' && next < n && s[next] == '\n') next++;
            line_starting = s[next - 1] == '\n';
            pos = next;
            continue;
        }
        push_tok(L, open == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, tline, NULL, 0, jv_none());
        size_t next = lex_tag(L, p2, open == '%' ? 'b' : 'v');
        line_starting = s[next - 1] == '\n';
        pos = next;
    }
    push_tok(L, T_EOF, line_at(L, n), NULL, 0, jv_none());
}

/* ---------------------------------------------------------------- parser helpers */

static tok *cur(parser *P) { return &P->t[P->i]; }
static tok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static const char *tok_desc(tok *t)
{
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "end of statement block";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default: return t->p;
    }
}

static _Noreturn void pfail(parser *P, int code, const char *fmt, const char *a1)
{
    P->trap->line = cur(P)->line;
    jx_fail(P->trap, code, fmt, a1);
}

static bool is_op(parser *P, const char *op) { return cur(P)->type == T_OP && strcmp(cur(P)->p, op) == 0; }
static bool is_name(parser *P, const char *nm) { return cur(P)->type == T_NAME && strcmp(cur(P)->p, nm) == 0; }

static void expect_op(parser *P, const char *op)
{
    if (!is_op(P, op)) {
        char m[128];
        snprintf(m, sizeof m, "expected '%s', got %s", op, tok_desc(cur(P)));
        pfail(P, G4_EFORMAT, "%s", m);
    }
    adv(P);
}

static const char *expect_name(parser *P)
{
    if (cur(P)->type != T_NAME) pfail(P, G4_EFORMAT, "expected a name, got %s", tok_desc(cur(P)));
    const char *s = cur(P)->p;
    adv(P);
    return s;
}

static void expect_block_end(parser *P)
{
    if (cur(P)->type != T_BLOCK_END) pfail(P, G4_EFORMAT, "expected end of statement block, got %s", tok_desc(cur(P)));
    adv(P);
}

static jx_node *mk(parser *P, int kind)
{
    jx_node *n = jx_alloc(P->a, sizeof *n);
    n->kind = kind;
    n->line = cur(P)->line;
    return n;
}

typedef struct nvec {
    jx_node **v;
    int n, cap;
} nvec;

static void nv_push(parser *P, nvec *v, jx_node *x)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jx_node **nv = jx_alloc(P->a, (size_t)cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static void enter(parser *P)
{
    if (++P->depth > JX_MAX_PARSE_DEPTH) pfail(P, G4_EFORMAT, "%s", "template nesting too deep");
}

/* ---------------------------------------------------------------- expressions */

static jx_node *parse_expression(parser *P, bool with_condexpr);
static jx_node *parse_tuple(parser *P, bool with_condexpr, const char *extra_end, bool explicit_parens);
static jx_node *parse_unary(parser *P, bool with_filter);
static jx_node *parse_primary(parser *P);
static jx_node *parse_postfix(parser *P, jx_node *node);
static jx_node *parse_filter(parser *P, jx_node *node, bool start_inline);

static void parse_call_args(parser *P, jx_node *n)
{
    expect_op(P, "(");
    nvec pos = {0}, kwv = {0};
    const char **kwn = NULL;
    int nkw = 0, kwcap = 0;
    bool first = true;
    while (!is_op(P, ")")) {
        if (!first) {
            expect_op(P, ",");
            if (is_op(P, ")")) break;
        }
        first = false;
        if (is_op(P, "*") || is_op(P, "**"))
            pfail(P, G4_EUNSUPPORTED, "%s", "*args / **kwargs in calls are not supported");
        if (cur(P)->type == T_NAME && peek(P, 1)->type == T_OP && strcmp(peek(P, 1)->p, "=") == 0) {
            const char *k = cur(P)->p;
            adv(P);
            adv(P);
            if (nkw == kwcap) {
                kwcap = kwcap ? kwcap * 2 : 4;
                const char **nk = jx_alloc(P->a, (size_t)kwcap * sizeof *nk);
                if (nkw) memcpy(nk, kwn, (size_t)nkw * sizeof *nk);
                kwn = nk;
            }
            kwn[nkw++] = k;
            nv_push(P, &kwv, parse_expression(P, true));
        } else {
            if (nkw) pfail(P, G4_EFORMAT, "%s", "positional argument follows keyword argument");
            nv_push(P, &pos, parse_expression(P, true));
        }
    }
    adv(P);
    n->args = pos.v;
    n->nargs = pos.n;
    n->kwv = kwv.v;
    n->kwn = kwn;
    n->nkw = nkw;
}

static jx_node *parse_subscribed(parser *P)
{
    jx_node *args[3] = {NULL, NULL, NULL};
    if (is_op(P, ":")) {
        adv(P);
    } else {
        jx_node *e = parse_expression(P, true);
        if (!is_op(P, ":")) return e;
        adv(P);
        args[0] = e;
    }
    if (!is_op(P, ":") && !is_op(P, "]") && !is_op(P, ",")) args[1] = parse_expression(P, true);
    if (is_op(P, ":")) {
        adv(P);
        if (!is_op(P, "]") && !is_op(P, ",")) args[2] = parse_expression(P, true);
    }
    jx_node *s = mk(P, E_SLICE);
    s->args = jx_alloc(P->a, 3 * sizeof(jx_node *));
    memcpy(s->args, args, sizeof args);
    s->nargs = 3;
    return s;
}

static jx_node *parse_postfix(parser *P, jx_node *node)
{
    for (;;) {
        if (is_op(P, ".")) {
            adv(P);
            jx_node *n;
            if (cur(P)->type == T_NAME) {
                n = mk(P, E_ATTR);
                n->name = cur(P)->p;
            } else if (cur(P)->type == T_INT) {
                n = mk(P, E_ITEM);
                n->b = mk(P, E_CONST);
                n->b->val = cur(P)->val;
            } else {
                pfail(P, G4_EFORMAT, "expected name or number after '.', got %s", tok_desc(cur(P)));
            }
            adv(P);
            n->a = node;
            node = n;
        } else if (is_op(P, "[")) {
            jx_node *n = mk(P, E_ITEM);
            adv(P);
            nvec args = {0};
            while (!is_op(P, "]")) {
                if (args.n) expect_op(P, ",");
                if (is_op(P, "]")) break;
                nv_push(P, &args, parse_subscribed(P));
            }
            expect_op(P, "]");
            if (args.n == 0) pfail(P, G4_EFORMAT, "%s", "expected a subscript");
            if (args.n == 1) n->b = args.v[0];
            else {
                jx_node *t = mk(P, E_TUPLE);
                t->args = args.v;
                t->nargs = args.n;
                n->b = t;
            }
            n->a = node;
            node = n;
        } else if (is_op(P, "(")) {
            jx_node *n = mk(P, E_CALL);
            n->a = node;
            parse_call_args(P, n);
            node = n;
        } else {
            return node;
        }
    }
}

static jx_node *parse_test(parser *P, jx_node *node)
{
    jx_node *n = mk(P, E_TEST);
    adv(P); /* 'is' */
    bool negated = false;
    if (is_name(P, "not")) {
        adv(P);
        negated = true;
    }
    const char *name = expect_name(P);
    while (is_op(P, ".")) {
        adv(P);
        const char *more = expect_name(P);
        char *j = jx_alloc(P->a, strlen(name) + strlen(more) + 2);
        sprintf(j, "%s.%s", name, more);
        name = j;
    }
    n->name = name;
    n->a = node;
    if (!jx_test_known(name)) {
        P->trap->line = n->line;
        jx_fail(P->trap, G4_EUNSUPPORTED, "test '%s' is not supported", name);
    }
    tok *t = cur(P);
    if (is_op(P, "(")) {
        parse_call_args(P, n);
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
                is_op(P, "(") || is_op(P, "[") || is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) pfail(P, G4_EFORMAT, "%s", "You cannot chain multiple tests with is");
        jx_node *arg = parse_postfix(P, parse_primary(P));
        n->args = jx_alloc(P->a, sizeof(jx_node *));
        n->args[0] = arg;
        n->nargs = 1;
    }
    if (negated) {
        jx_node *x = mk(P, E_NOT);
        x->a = n;
        return x;
    }
    return n;
}

static jx_node *parse_filter(parser *P, jx_node *node, bool start_inline)
{
    while (is_op(P, "|") || start_inline) {
        if (!start_inline) adv(P);
        start_inline = false;
        jx_node *n = mk(P, E_FILTER);
        const char *name = expect_name(P);
        while (is_op(P, ".")) {
            adv(P);
            const char *more = expect_name(P);
            char *j = jx_alloc(P->a, strlen(name) + strlen(more) + 2);
            sprintf(j, "%s.%s", name, more);
            name = j;
        }
        if (!jx_filter_known(name)) {
            P->trap->line = n->line;
            jx_fail(P->trap, G4_EUNSUPPORTED, "filter '%s' is not supported", name);
        }
        n->name = name;
        n->a = node;
        if (is_op(P, "(")) parse_call_args(P, n);
        node = n;
    }
    return node;
}

static jx_node *parse_filter_expr(parser *P, jx_node *node)
{
    for (;;) {
        if (is_op(P, "|")) node = parse_filter(P, node, false);
        else if (is_name(P, "is")) node = parse_test(P, node);
        else if (is_op(P, "(")) {
            jx_node *n = mk(P, E_CALL);
            n->a = node;
            parse_call_args(P, n);
            node = n;
        } else return node;
    }
}

static jx_node *parse_primary(parser *P)
{
    tok *t = cur(P);
    jx_node *n;
    if (t->type == T_NAME) {
        const char *s = t->p;
        n = mk(P, E_CONST);
        if (!strcmp(s, "true") || !strcmp(s, "True")) n->val = jv_bool(true);
        else if (!strcmp(s, "false") || !strcmp(s, "False")) n->val = jv_bool(false);
        else if (!strcmp(s, "none") || !strcmp(s, "None")) n->val = jv_none();
        else {
            n->kind = E_NAME;
            n->name = s;
        }
        adv(P);
        return n;
    }
    if (t->type == T_STRING) {
        n = mk(P, E_CONST);
        n->val = t->val;
        adv(P);
        if (cur(P)->type == T_STRING) { /* implicit concatenation of adjacent literals */
            jx_buf b;
            jx_buf_init(&b, P->a);
            jx_buf_put(&b, n->val.s.p, n->val.s.n);
            while (cur(P)->type == T_STRING) {
                jx_buf_put(&b, cur(P)->val.s.p, cur(P)->val.s.n);
                adv(P);
            }
            n->val = jv_strn(b.p ? b.p : "", b.n);
        }
        return n;
    }
    if (t->type == T_INT || t->type == T_FLOAT) {
        n = mk(P, E_CONST);
        n->val = t->val;
        adv(P);
        return n;
    }
    if (is_op(P, "(")) {
        adv(P);
        n = parse_tuple(P, true, NULL, true);
        expect_op(P, ")");
        return n;
    }
    if (is_op(P, "[")) {
        n = mk(P, E_LIST);
        adv(P);
        nvec items = {0};
        while (!is_op(P, "]")) {
            if (items.n) expect_op(P, ",");
            if (is_op(P, "]")) break;
            nv_push(P, &items, parse_expression(P, true));
        }
        expect_op(P, "]");
        n->args = items.v;
        n->nargs = items.n;
        return n;
    }
    if (is_op(P, "{")) {
        n = mk(P, E_DICT);
        adv(P);
        nvec keys = {0}, vals = {0};
        while (!is_op(P, "}")) {
            if (keys.n) expect_op(P, ",");
            if (is_op(P, "}")) break;
            nv_push(P, &keys, parse_expression(P, true));
            expect_op(P, ":");
            nv_push(P, &vals, parse_expression(P, true));
        }
        expect_op(P, "}");
        n->args = keys.v;
        n->kwv = vals.v;
        n->nargs = keys.n;
        return n;
    }
    pfail(P, G4_EFORMAT, "unexpected %s", tok_desc(t));
}

static jx_node *parse_unary(parser *P, bool with_filter)
{
    enter(P);
    jx_node *node;
    if (is_op(P, "-") || is_op(P, "+")) {
        node = mk(P, is_op(P, "-") ? E_NEG : E_POS);
        adv(P);
        node->a = parse_unary(P, false);
    } else {
        node = parse_primary(P);
    }
    node = parse_postfix(P, node);
    if (with_filter) node = parse_filter_expr(P, node);
    P->depth--;
    return node;
}

static jx_node *binop(parser *P, int op, jx_node *l, jx_node *r, int line)
{
    jx_node *n = mk(P, E_BIN);
    n->op = op;
    n->a = l;
    n->b = r;
    n->line = line;
    return n;
}

static jx_node *parse_pow(parser *P)
{
    jx_node *l = parse_unary(P, true);
    while (is_op(P, "**")) {
        int line = cur(P)->line;
        adv(P);
        l = binop(P, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static jx_node *parse_math2(parser *P)
{
    jx_node *l = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV : is_op(P, "%") ? OP_MOD : 0;
        if (!op) return l;
        int line = cur(P)->line;
        adv(P);
        l = binop(P, op, l, parse_pow(P), line);
    }
}

static jx_node *parse_concat(parser *P)
{
    jx_node *l = parse_math2(P);
    while (is_op(P, "~")) {
        int line = cur(P)->line;
        adv(P);
        l = binop(P, OP_CONCAT, l, parse_math2(P), line);
    }
    return l;
}

static jx_node *parse_math1(parser *P)
{
    jx_node *l = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : 0;
        if (!op) return l;
        int line = cur(P)->line;
        adv(P);
        l = binop(P, op, l, parse_concat(P), line);
    }
}

static jx_node *parse_compare(parser *P)
{
    jx_node *first = parse_math1(P);
    nvec operands = {0};
    int *ops = NULL, nops = 0, cap = 0;
    int line = cur(P)->line;
    for (;;) {
        int op = 0;
        if (is_op(P, "==")) op = OP_EQ;
        else if (is_op(P, "!=")) op = OP_NE;
        else if (is_op(P, "<")) op = OP_LT;
        else if (is_op(P, "<=")) op = OP_LE;
        else if (is_op(P, ">")) op = OP_GT;
        else if (is_op(P, ">=")) op = OP_GE;
        else if (is_name(P, "in")) op = OP_IN;
        else if (is_name(P, "not") && peek(P, 1)->type == T_NAME && strcmp(peek(P, 1)->p, "in") == 0) {
            op = OP_NOTIN;
            adv(P);
        }
        if (!op) break;
        adv(P);
        if (nops == cap) {
            cap = cap ? cap * 2 : 4;
            int *no = jx_alloc(P->a, (size_t)cap * sizeof *no);
            if (nops) memcpy(no, ops, (size_t)nops * sizeof *no);
            ops = no;
        }
        ops[nops++] = op;
        nv_push(P, &operands, parse_math1(P));
    }
    if (!nops) return first;
    jx_node *n = mk(P, E_CMP);
    n->line = line;
    n->a = first;
    n->args = operands.v;
    n->nargs = operands.n;
    n->ops = ops;
    return n;
}

static jx_node *parse_not(parser *P)
{
    if (is_name(P, "not")) {
        jx_node *n = mk(P, E_NOT);
        adv(P);
        enter(P);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jx_node *parse_and(parser *P)
{
    jx_node *l = parse_not(P);
    while (is_name(P, "and")) {
        jx_node *n = mk(P, E_AND);
        adv(P);
        n->a = l;
        n->b = parse_not(P);
        l = n;
    }
    return l;
}

static jx_node *parse_or(parser *P)
{
    jx_node *l = parse_and(P);
    while (is_name(P, "or")) {
        jx_node *n = mk(P, E_OR);
        adv(P);
        n->a = l;
        n->b = parse_and(P);
        l = n;
    }
    return l;
}

static jx_node *parse_condexpr(parser *P)
{
    jx_node *e1 = parse_or(P);
    while (is_name(P, "if")) {
        jx_node *n = mk(P, E_COND);
        adv(P);
        n->a = parse_or(P);
        n->b = e1;
        if (is_name(P, "else")) {
            adv(P);
            enter(P);
            n->c = parse_condexpr(P);
            P->depth--;
        }
        e1 = n;
    }
    return e1;
}

static jx_node *parse_expression(parser *P, bool with_condexpr)
{
    enter(P);
    jx_node *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static bool tuple_end(parser *P, const char *extra_end)
{
    int t = cur(P)->type;
    if (t == T_VAR_END || t == T_BLOCK_END || t == T_EOF || is_op(P, ")")) return true;
    return extra_end && is_name(P, extra_end);
}

static jx_node *parse_tuple(parser *P, bool with_condexpr, const char *extra_end, bool explicit_parens)
{
    int line = cur(P)->line;
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(P, ",");
        if (tuple_end(P, extra_end)) break;
        nv_push(P, &args, parse_expression(P, with_condexpr));
        if (is_op(P, ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) pfail(P, G4_EFORMAT, "expected an expression, got %s", tok_desc(cur(P)));
    }
    jx_node *n = mk(P, E_TUPLE);
    n->line = line;
    n->args = args.v;
    n->nargs = args.n;
    return n;
}

/* ---------------------------------------------------------------- statements */

static int parse_body(parser *P, jx_body *body, const char *const *ends);

static const char *check_target_name(parser *P, const char *nm)
{
    if (!strcmp(nm, "true") || !strcmp(nm, "false") || !strcmp(nm, "none") || !strcmp(nm, "True") ||
        !strcmp(nm, "False") || !strcmp(nm, "None"))
        pfail(P, G4_EFORMAT, "cannot assign to '%s'", nm);
    return nm;
}

/* name | name, name, ... ; returns names */
static void parse_assign_names(parser *P, jx_node *n, const char *extra_end)
{
    const char **names = NULL;
    int cnt = 0, cap = 0;
    bool paren = false;
    if (is_op(P, "(")) {
        paren = true;
        adv(P);
    }
    for (;;) {
        if (cnt) {
            if (!is_op(P, ",")) break;
            adv(P);
            if ((extra_end && is_name(P, extra_end)) || is_op(P, ")") || is_op(P, "=")) break;
        }
        const char *nm = check_target_name(P, expect_name(P));
        if (cnt == cap) {
            cap = cap ? cap * 2 : 2;
            const char **nn = jx_alloc(P->a, (size_t)cap * sizeof *nn);
            if (cnt) memcpy(nn, names, (size_t)cnt * sizeof *nn);
            names = nn;
        }
        names[cnt++] = nm;
    }
    if (paren) expect_op(P, ")");
    n->names = names;
    n->nnames = cnt;
    n->flags |= (cnt > 1 || paren) ? 0x100 : 0; /* tuple target */
}

static void walk_names(const jx_node *n, int *flags);

static void walk_body_names(const jx_body *b, int *flags)
{
    for (int i = 0; i < b->n; i++) walk_names(b->v[i], flags);
}

static void walk_names(const jx_node *n, int *flags)
{
    if (!n) return;
    if (n->kind == E_NAME) {
        if (!strcmp(n->name, "varargs")) *flags |= JM_VARARGS;
        if (!strcmp(n->name, "kwargs")) *flags |= JM_KWARGS;
        if (!strcmp(n->name, "caller")) *flags |= JM_CALLER;
    }
    walk_names(n->a, flags);
    walk_names(n->b, flags);
    walk_names(n->c, flags);
    for (int i = 0; i < n->nargs; i++) walk_names(n->args[i], flags);
    for (int i = 0; i < n->nkw; i++) walk_names(n->kwv[i], flags);
    if (n->kind == E_DICT)
        for (int i = 0; i < n->nargs; i++) walk_names(n->kwv[i], flags);
    walk_body_names(&n->body, flags);
    walk_body_names(&n->else_body, flags);
}

static void parse_signature(parser *P, jx_node *n)
{
    expect_op(P, "(");
    const char **names = NULL;
    nvec defs = {0};
    int cnt = 0, cap = 0;
    while (!is_op(P, ")")) {
        if (cnt) expect_op(P, ",");
        if (is_op(P, ")")) break;
        const char *nm = check_target_name(P, expect_name(P));
        jx_node *d = NULL;
        if (is_op(P, "=")) {
            adv(P);
            d = parse_expression(P, true);
        } else if (defs.n && defs.v[defs.n - 1]) {
            pfail(P, G4_EFORMAT, "%s", "non-default argument follows default argument");
        }
        if (cnt == cap) {
            cap = cap ? cap * 2 : 4;
            const char **nn = jx_alloc(P->a, (size_t)cap * sizeof *nn);
            if (cnt) memcpy(nn, names, (size_t)cnt * sizeof *nn);
            names = nn;
        }
        names[cnt++] = nm;
        nv_push(P, &defs, d);
    }
    adv(P);
    n->names = names;
    n->nnames = cnt;
    n->args = defs.v;
    n->nargs = defs.n;
}

static jx_node *parse_statement(parser *P)
{
    tok *t = cur(P);
    if (t->type != T_NAME) pfail(P, G4_EFORMAT, "tag name expected, got %s", tok_desc(t));
    const char *kw = t->p;
    jx_node *n;
    enter(P);
    if (!strcmp(kw, "if")) {
        n = mk(P, S_IF);
        adv(P);
        n->a = parse_tuple(P, false, NULL, false);
        expect_block_end(P);
        jx_node *curif = n;
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        for (;;) {
            int which = parse_body(P, &curif->body, ends);
            if (which == 0) {
                jx_node *e = mk(P, S_IF);
                adv(P);
                e->a = parse_tuple(P, false, NULL, false);
                expect_block_end(P);
                curif->else_body.v = jx_alloc(P->a, sizeof(jx_node *));
                curif->else_body.v[0] = e;
                curif->else_body.n = 1;
                curif = e;
                continue;
            }
            if (which == 1) {
                adv(P);
                expect_block_end(P);
                static const char *const ends2[] = {"endif", NULL};
                parse_body(P, &curif->else_body, ends2);
            }
            adv(P); /* endif */
            break;
        }
    } else if (!strcmp(kw, "for")) {
        n = mk(P, S_FOR);
        adv(P);
        parse_assign_names(P, n, "in");
        if (!is_name(P, "in")) pfail(P, G4_EFORMAT, "expected 'in', got %s", tok_desc(cur(P)));
        adv(P);
        n->a = parse_tuple(P, false, "recursive", false);
        if (is_name(P, "if")) {
            adv(P);
            n->b = parse_expression(P, true);
        }
        if (is_name(P, "recursive")) pfail(P, G4_EUNSUPPORTED, "%s", "recursive for loops are not supported");
        expect_block_end(P);
        static const char *const ends[] = {"endfor", "else", NULL};
        P->loop_depth++;
        int which = parse_body(P, &n->body, ends);
        P->loop_depth--;
        if (which == 1) {
            adv(P);
            expect_block_end(P);
            static const char *const ends2[] = {"endfor", NULL};
            parse_body(P, &n->else_body, ends2);
        }
        adv(P);
    } else if (!strcmp(kw, "set")) {
        n = mk(P, S_SET);
        adv(P);
        if (cur(P)->type == T_NAME && peek(P, 1)->type == T_OP && strcmp(peek(P, 1)->p, ".") == 0) {
            n->kind = S_SETATTR;
            n->name = expect_name(P);
            adv(P);
            n->attr = expect_name(P);
        } else {
            parse_assign_names(P, n, NULL);
        }
        if (is_op(P, "=")) {
            adv(P);
            n->a = parse_tuple(P, true, NULL, false);
        } else {
            if (n->nnames > 1) pfail(P, G4_EFORMAT, "%s", "a block set takes a single target");
            n->flags |= 0x200; /* block set */
            n->a = parse_filter(P, NULL, false);
            expect_block_end(P);
            static const char *const ends[] = {"endset", NULL};
            parse_body(P, &n->body, ends);
            adv(P);
            n->kind = n->kind == S_SETATTR ? S_SETATTR : S_SETBLOCK;
        }
    } else if (!strcmp(kw, "macro")) {
        n = mk(P, S_MACRO);
        adv(P);
        n->name = check_target_name(P, expect_name(P));
        parse_signature(P, n);
        expect_block_end(P);
        static const char *const ends[] = {"endmacro", NULL};
        int saved = P->loop_depth;
        P->loop_depth = 0;
        parse_body(P, &n->body, ends);
        P->loop_depth = saved;
        adv(P);
        walk_body_names(&n->body, &n->flags);
    } else if (!strcmp(kw, "call")) {
        n = mk(P, S_CALLBLOCK);
        adv(P);
        if (is_op(P, "(")) parse_signature(P, n);
        n->a = parse_expression(P, true);
        if (n->a->kind != E_CALL) pfail(P, G4_EFORMAT, "%s", "expected a call expression in {% call %}");
        expect_block_end(P);
        static const char *const ends[] = {"endcall", NULL};
        int saved = P->loop_depth;
        P->loop_depth = 0;
        parse_body(P, &n->body, ends);
        P->loop_depth = saved;
        adv(P);
        walk_body_names(&n->body, &n->flags);
    } else if (!strcmp(kw, "filter")) {
        n = mk(P, S_FILTERBLOCK);
        adv(P);
        n->a = parse_filter(P, NULL, true);
        expect_block_end(P);
        static const char *const ends[] = {"endfilter", NULL};
        parse_body(P, &n->body, ends);
        adv(P);
    } else if (!strcmp(kw, "with")) {
        n = mk(P, S_WITH);
        adv(P);
        const char **names = NULL;
        nvec vals = {0};
        int cnt = 0, cap = 0;
        while (cur(P)->type != T_BLOCK_END) {
            if (cnt) expect_op(P, ",");
            const char *nm = check_target_name(P, expect_name(P));
            expect_op(P, "=");
            if (cnt == cap) {
                cap = cap ? cap * 2 : 4;
                const char **nn = jx_alloc(P->a, (size_t)cap * sizeof *nn);
                if (cnt) memcpy(nn, names, (size_t)cnt * sizeof *nn);
                names = nn;
            }
            names[cnt++] = nm;
            nv_push(P, &vals, parse_expression(P, true));
        }
        n->names = names;
        n->nnames = cnt;
        n->args = vals.v;
        n->nargs = vals.n;
        expect_block_end(P);
        static const char *const ends[] = {"endwith", NULL};
        parse_body(P, &n->body, ends);
        adv(P);
    } else if (!strcmp(kw, "generation")) { /* HF's AssistantTracker: renders its body */
        n = mk(P, S_SCOPE);
        adv(P);
        expect_block_end(P);
        static const char *const ends[] = {"endgeneration", NULL};
        parse_body(P, &n->body, ends);
        adv(P);
    } else if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        n = mk(P, kw[0] == 'b' ? S_BREAK : S_CONTINUE);
        if (P->loop_depth == 0) pfail(P, G4_EFORMAT, "'%s' outside of a for loop", kw);
        adv(P);
    } else if (!strcmp(kw, "block") || !strcmp(kw, "extends") || !strcmp(kw, "include") ||
               !strcmp(kw, "import") || !strcmp(kw, "from") || !strcmp(kw, "autoescape") ||
               !strcmp(kw, "print")) {
        pfail(P, G4_EUNSUPPORTED, "the '%s' tag is not supported", kw);
    } else {
        pfail(P, G4_EFORMAT, "Encountered unknown tag '%s'", kw);
    }
    expect_block_end(P);
    P->depth--;
    return n;
}

/* Parses nodes until a block tag whose name is in ends (returns its index, stream at the name)
 * or, with ends == NULL, until EOF (returns -1). */
static int parse_body(parser *P, jx_body *body, const char *const *ends)
{
    nvec v = {0};
    int start_line = cur(P)->line;
    for (;;) {
        tok *t = cur(P);
        if (t->type == T_EOF) {
            if (ends) {
                const char *want = ends[0];
                for (int k = 0; ends[k]; k++)
                    if (!strncmp(ends[k], "end", 3)) want = ends[k];
                P->trap->line = start_line;
                jx_fail(P->trap, G4_EFORMAT, "unexpected end of template: missing '{%% %s %%}'", want);
            }
            break;
        }
        if (t->type == T_DATA) {
            jx_node *n = mk(P, S_TEXT);
            n->val = jv_strn(t->p, t->n);
            nv_push(P, &v, n);
            adv(P);
        } else if (t->type == T_VAR_BEGIN) {
            adv(P);
            jx_node *n = mk(P, S_OUTPUT);
            n->a = parse_tuple(P, true, NULL, false);
            if (cur(P)->type != T_VAR_END) pfail(P, G4_EFORMAT, "expected end of print statement, got %s", tok_desc(cur(P)));
            adv(P);
            nv_push(P, &v, n);
        } else if (t->type == T_BLOCK_BEGIN) {
            adv(P);
            if (ends && cur(P)->type == T_NAME)
                for (int k = 0; ends[k]; k++)
                    if (!strcmp(cur(P)->p, ends[k])) {
                        body->v = v.v;
                        body->n = v.n;
                        return k;
                    }
            if (cur(P)->type == T_NAME) {
                const char *nm = cur(P)->p;
                if (!strncmp(nm, "end", 3) || !strcmp(nm, "elif") || !strcmp(nm, "else"))
                    pfail(P, G4_EFORMAT, "unexpected '%s' tag", nm);
            }
            nv_push(P, &v, parse_statement(P));
        } else {
            pfail(P, G4_EFORMAT, "unexpected %s", tok_desc(t));
        }
    }
    body->v = v.v;
    body->n = v.n;
    return -1;
}

void jx_parse(jx_trap *trap, jx_template *t, const char *src, size_t len)
{
    /* newline normalisation: \r\n, \r, \n -> \n; one trailing newline dropped */
    char *s = jx_alloc(t->a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            if (i + 1 < len && src[i + 1] == '\n') i++;
            s[n++] = '\n';
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    lexer L = {.trap = trap, .a = t->a, .s = s, .n = n, .line = 1, .cur_line = 1};
    lex(&L);
    parser P = {.trap = trap, .a = t->a, .t = L.toks, .n = L.ntok};
    parse_body(&P, &t->root, NULL);
}
