/* exif.c — the EXIF orientation, read the way Pillow's Image.getexif() does for
 * ImageOps.exif_transpose, and the transposition it asks for (Pillow's Image.transpose).
 *
 * One tag of one directory is all that is needed, so this is a small bounds-checked reader of a
 * TIFF structure rather than a general EXIF library (docs/vision.md says why): the EXIF bytes
 * after any "Exif\0\0" prefixes, the header ("II"/"MM"), IFD0's entries, tag 0x0112; the last
 * readable entry of that tag wins, as in Pillow's dictionary. When IFD0 has no Orientation, the
 * XMP text's first `tiff:Orientation="N"` or `tiff:Orientation>N` decides. Anything unreadable
 * is orientation 1 (Pillow would raise on some of those; see docs/vision.md).
 * Knows nothing about image formats: the decoders collect the bytes (decode.h). */
#include <stdlib.h>
#include <string.h>

#include "image/decode.h"

#define TAG_ORIENTATION 0x0112
#define NO_TAG (-1)      /* IFD0 has no (readable) Orientation entry */

typedef struct { const uint8_t *p; size_t n; int be; } tiff;

static uint32_t rd16(const tiff *t, size_t off) {
    const uint8_t *b = t->p + off;
    return t->be ? (uint32_t)b[0] << 8 | b[1] : (uint32_t)b[1] << 8 | b[0];
}

static uint32_t rd32(const tiff *t, size_t off) {
    const uint8_t *b = t->p + off;
    return t->be ? (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]
                 : (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
}

/* Bytes per value of a TIFF field type Pillow loads (0: a type it skips). */
static size_t unit_size(uint32_t type) {
    switch (type) {
    case 1: case 2: case 6: case 7: return 1;        /* BYTE ASCII SBYTE UNDEFINED */
    case 3: case 8: return 2;                        /* SHORT SSHORT */
    case 4: case 9: case 11: case 13: return 4;      /* LONG SLONG FLOAT IFD */
    case 5: case 10: case 12: case 16: return 8;     /* RATIONAL SRATIONAL DOUBLE LONG8 */
    default: return 0;
    }
}

/* The first value of an entry as Pillow's dict lookup sees it: an integer 2..8 when the value
 * equals one (ints, rationals n/d, floats alike), else 0 (text, bytes, other numbers). */
static int first_value(const tiff *t, uint32_t type, size_t off) {
    double v;
    switch (type) {
    case 1: v = t->p[off]; break;
    case 6: v = (int8_t)t->p[off]; break;
    case 3: v = rd16(t, off); break;
    case 8: v = (int16_t)rd16(t, off); break;
    case 4: case 13: v = rd32(t, off); break;
    case 9: v = (int32_t)rd32(t, off); break;
    case 16: {
        uint64_t hi = rd32(t, off + (t->be ? 0 : 4)), lo = rd32(t, off + (t->be ? 4 : 0));
        if (hi) return 0;
        v = (double)lo;
        break;
    }
    case 5: case 10: {
        int64_t num = type == 5 ? (int64_t)rd32(t, off) : (int64_t)(int32_t)rd32(t, off);
        int64_t den = type == 5 ? (int64_t)rd32(t, off + 4) : (int64_t)(int32_t)rd32(t, off + 4);
        if (den == 0 || num % den) return 0;
        v = (double)(num / den);
        break;
    }
    case 11: { uint32_t u = rd32(t, off); float f; memcpy(&f, &u, 4); v = f; break; }
    case 12: {
        uint64_t u = (uint64_t)rd32(t, off + (t->be ? 0 : 4)) << 32 | rd32(t, off + (t->be ? 4 : 0));
        memcpy(&v, &u, 8);
        break;
    }
    default: return 0;   /* ASCII, UNDEFINED: a string or bytes never equals an orientation */
    }
    return v >= 2 && v <= 8 && v == (double)(int)v ? (int)v : 0;
}

/* IFD0's Orientation from EXIF bytes: 1..8-ish value (0 for present but not 2..8), or NO_TAG. */
static int exif_orientation(const uint8_t *p, size_t n) {
    while (n >= 6 && !memcmp(p, "Exif\0\0", 6)) { p += 6; n -= 6; }
    if (n < 8) return NO_TAG;
    tiff t = {p, n, 0};
    if (!memcmp(p, "MM", 2)) t.be = 1;
    else if (memcmp(p, "II", 2)) return NO_TAG;
    /* Pillow's accepted headers; BigTIFF (byte 2 == 0x2b) is not read here */
    if (!((p[2] == 0 && p[3] == 0x2a) || (p[2] == 0x2a && p[3] == 0) || (p[2] == 0 && p[3] == 0x2b)))
        return NO_TAG;
    size_t ifd = rd32(&t, 4);
    if (ifd > n || n - ifd < 2) return NO_TAG;
    uint32_t count = rd16(&t, ifd);
    int found = NO_TAG;
    size_t e = ifd + 2;
    for (uint32_t i = 0; i < count && n - e >= 12; i++, e += 12) {
        uint32_t tag = rd16(&t, e), type = rd16(&t, e + 2), cnt = rd32(&t, e + 4);
        size_t unit = unit_size(type);
        if (tag != TAG_ORIENTATION || !unit || cnt == 0) continue;
        uint64_t size = (uint64_t)cnt * unit;
        size_t at = e + 8;
        if (size > 4) {
            at = rd32(&t, e + 8);
            if (at > n || size > n - at) continue;   /* Pillow: "Possibly corrupt", tag skipped */
        }
        found = first_value(&t, type, at);
    }
    return found;
}

/* The digit after the first `tiff:Orientation="` or `tiff:Orientation>` (Pillow's regex), or NO_TAG. */
static int xmp_orientation(const uint8_t *p, size_t n) {
    static const char key[] = "tiff:Orientation";
    const size_t kl = sizeof key - 1;
    for (size_t i = 0; i + kl < n; i++) {
        if (memcmp(p + i, key, kl)) continue;
        size_t j = i + kl;
        if (p[j] == '=' && j + 2 < n && p[j + 1] == '"' && p[j + 2] >= '0' && p[j + 2] <= '9') return p[j + 2] - '0';
        if (p[j] == '>' && j + 1 < n && p[j + 1] >= '0' && p[j + 1] <= '9') return p[j + 1] - '0';
    }
    return NO_TAG;
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* ImageMagick's "Raw profile type exif": lines 4.. are hex (bytes.fromhex of their join). */
static int raw_profile_orientation(const uint8_t *p, size_t n) {
    size_t i = 0;
    for (int nl = 0; nl < 3; i++) {
        if (i >= n) return NO_TAG;
        if (p[i] == '\n') nl++;
    }
    uint8_t *bin = malloc((n - i) / 2 + 1);
    if (!bin) return NO_TAG;
    size_t m = 0;
    int ok = 1;
    while (i < n && ok) {
        if (p[i] == '\n' || is_space(p[i])) { i++; continue; }
        /* the join removed the newlines: a pair may straddle one */
        size_t k = i + 1;
        while (k < n && p[k] == '\n') k++;
        int a = hexval(p[i]), b = k < n ? hexval(p[k]) : -1;
        if (a < 0 || b < 0) ok = 0;
        else bin[m++] = (uint8_t)(a << 4 | b);
        i = k + 1;
    }
    int o = ok ? exif_orientation(bin, m) : NO_TAG;
    free(bin);
    return o;
}

int g4_image_orientation(const g4_image_meta *m) {
    int o = NO_TAG;
    if (m->exif) o = exif_orientation(m->exif, m->exif_n);
    else if (m->raw_profile) o = raw_profile_orientation(m->raw_profile, m->raw_profile_n);
    if (o == NO_TAG && m->xmp) o = xmp_orientation(m->xmp, m->xmp_n);
    return o >= 2 && o <= 8 ? o : 1;
}

int g4_image_orient(g4_image *im, int o, g4_err *err) {
    if (o < 2 || o > 8) return G4_OK;
    const int w = im->w, h = im->h, swap = o >= 5;
    const int ow = swap ? h : w, oh = swap ? w : h;
    uint8_t *dst = malloc((size_t)w * (size_t)h * 3);
    if (!dst) return g4_err_set(err, G4_ENOMEM, "out of memory turning a %d x %d image", w, h);
    for (int r = 0; r < oh; r++) {
        for (int c = 0; c < ow; c++) {
            int sy, sx;   /* Pillow: 2 FLIP_LEFT_RIGHT 3 ROTATE_180 4 FLIP_TOP_BOTTOM 5 TRANSPOSE
                           * 6 ROTATE_270 7 TRANSVERSE 8 ROTATE_90 */
            switch (o) {
            case 2: sy = r; sx = w - 1 - c; break;
            case 3: sy = h - 1 - r; sx = w - 1 - c; break;
            case 4: sy = h - 1 - r; sx = c; break;
            case 5: sy = c; sx = r; break;
            case 6: sy = h - 1 - c; sx = r; break;
            case 7: sy = h - 1 - c; sx = w - 1 - r; break;
            default: sy = c; sx = w - 1 - r; break;
            }
            memcpy(dst + ((size_t)r * ow + c) * 3, im->rgb + ((size_t)sy * w + sx) * 3, 3);
        }
    }
    free(im->rgb);
    im->rgb = dst;
    im->w = ow;
    im->h = oh;
    return G4_OK;
}
