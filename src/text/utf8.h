/* utf8.h — UTF-8 helpers and the two Unicode properties the tokenizer needs.
 * Validation is strict (no overlongs, surrogates or code points above U+10FFFF). */
#ifndef G4_TEXT_UTF8_H
#define G4_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Byte offset of the first invalid UTF-8 sequence in s[0..len), or len when all valid. */
size_t g4_utf8_invalid_at(const char *s, size_t len);
/* Length in bytes of the (valid) character starting with lead byte c: 1..4. */
static inline size_t g4_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Decodes the valid character at s (n bytes left); returns its length, sets *cp. */
size_t g4_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Start offset of the character that ends at s[len) (s valid UTF-8, len > 0). */
size_t g4_utf8_prev(const char *s, size_t len);
/* Unicode White_Space (Rust char::is_whitespace, regex \s). */
int g4_uni_is_space(uint32_t cp);
/* Unicode word character (regex \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation,
 * Join_Control), from Unicode 14 tables. */
int g4_uni_is_word(uint32_t cp);

#endif
