/* png.c — PNG bytes -> RGB with libpng, pixel for pixel what Pillow's PngImagePlugin followed by
 * convert("RGB") gives:
 *   greyscale 1/2/4-bit scaled to 8 bits; 8-bit grey replicated; grey+alpha: grey replicated;
 *   palette looked up (indexes past the palette are black, tRNS ignored); RGBA: alpha dropped;
 *   16-bit RGB(A) and grey+alpha: the high byte of each sample (Pillow's "RGB;16B" unpackers);
 *   16-bit grey: min(value, 255) (Pillow's I;16 -> RGB clips, it does not scale);
 *   no gamma, sBIT or ICC handling (Pillow applies none); interlaced images too;
 *   APNG: the default image (IDAT), i.e. Pillow's frame 0.
 * Metadata for the orientation: eXIf (any position), text chunks "Raw profile type exif",
 * "exif" and "XML:com.adobe.xmp" (last one wins, as in Pillow's info dict).
 * Read with libpng's progressive reader so that a file that ends early is judged as Pillow judges
 * it: an image when every row was decoded (the zlib checksum, later chunks or IEND may be
 * missing), else "truncated". A bad CRC in any chunk is refused (Pillow checks the chunks before
 * the image data; it skips the image data's own CRCs, libpng does not).
 * libpng's errors longjmp back here; every allocation is owned by the context and freed on
 * every path. Warnings are ignored (Pillow ignores what libpng warns about). */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/decode.h"

typedef struct {
    char msg[200];
    g4_image_meta *meta;
    const g4_image_limits *lim;
    g4_err *err;
    g4_image *out;
    int rc;                    /* a g4 status raised from a callback (limits, memory) */
    int nomem;                 /* a metadata copy failed */
    int interlaced, ch, depth;
    uint32_t rows;             /* rows delivered (not interlaced) */
    size_t rowbytes;
    png_structp png;
    png_infop info;
    uint8_t *raw;              /* interlaced: the whole image, combined pass by pass */
} pctx;

static void on_error(png_structp png, png_const_charp msg) {
    pctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

/* libpng hands eXIf here (it is registered as unknown: libpng's own reader refuses an eXIf
 * that starts "Exif\0\0", which Pillow accepts). Every other unknown chunk: not ours (0). */
static int on_chunk(png_structp png, png_unknown_chunkp ch) {
    pctx *c = png_get_user_chunk_ptr(png);
    if (memcmp(ch->name, "eXIf", 4)) return 0;
    if (g4_image_meta_set(&c->meta->exif, &c->meta->exif_n, ch->data, ch->size)) c->nomem = 1;
    return 1;
}

static void take_text(pctx *c) {
    png_textp t = NULL;
    int nt = 0;
    if (!png_get_text(c->png, c->info, &t, &nt)) return;
    g4_image_meta *m = c->meta;
    int have_exif_chunk = m->exif != NULL;
    for (int i = 0; i < nt; i++) {
        const char *k = t[i].key;
        size_t len = t[i].compression >= PNG_ITXT_COMPRESSION_NONE ? t[i].itxt_length : t[i].text_length;
        int rc = 0;
        if (!strcmp(k, "XML:com.adobe.xmp")) rc = g4_image_meta_set(&m->xmp, &m->xmp_n, t[i].text, len);
        else if (!strcmp(k, "Raw profile type exif")) rc = g4_image_meta_set(&m->raw_profile, &m->raw_profile_n, t[i].text, len);
        else if (!strcmp(k, "exif") && t[i].compression == PNG_TEXT_COMPRESSION_NONE && !have_exif_chunk)
            rc = g4_image_meta_set(&m->exif, &m->exif_n, t[i].text, len);   /* Pillow: a tEXt "exif" is raw EXIF */
        if (rc) c->nomem = 1;
    }
}

/* One decoded row (after libpng's palette / low-bit-depth expansion) -> RGB. */
static void to_rgb(const uint8_t *s, uint8_t *d, uint32_t w, int ch, int depth) {
    if (depth == 8) {
        for (uint32_t x = 0; x < w; x++, s += ch, d += 3) {
            if (ch <= 2) d[0] = d[1] = d[2] = s[0];
            else { d[0] = s[0]; d[1] = s[1]; d[2] = s[2]; }
        }
        return;
    }
    for (uint32_t x = 0; x < w; x++, s += 2 * ch, d += 3) {   /* 16-bit, big-endian samples */
        if (ch == 1) {
            unsigned v = (unsigned)s[0] << 8 | s[1];
            d[0] = d[1] = d[2] = (uint8_t)(v > 255 ? 255 : v);
        } else if (ch == 2) {
            d[0] = d[1] = d[2] = s[0];
        } else {
            d[0] = s[0]; d[1] = s[2]; d[2] = s[4];
        }
    }
}

/* A g4 status out of a callback: kept in c->rc, libpng unwound with png_error. */
static void fail_with(pctx *c, int rc) {
    c->rc = rc;
    png_error(c->png, c->err->msg);
}

/* At the first IDAT: the header is known; check it, choose the expansions, allocate. */
static void on_info(png_structp png, png_infop info) {
    pctx *c = png_get_progressive_ptr(png);
    png_uint_32 w, h;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    int rc = g4_image_check_size("PNG", w, h, c->lim, c->err);
    if (rc) fail_with(c, rc);
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    c->interlaced = png_set_interlace_handling(png) > 1;
    png_read_update_info(png, info);
    c->ch = png_get_channels(png, info);
    c->depth = png_get_bit_depth(png, info);
    c->rowbytes = png_get_rowbytes(png, info);
    if ((c->depth != 8 && c->depth != 16) || c->ch < 1 || c->ch > 4 ||
        c->rowbytes < (size_t)w * (size_t)c->ch * (size_t)(c->depth / 8)) {
        g4_err_set(c->err, G4_EFORMAT, "PNG: unexpected layout after expansion (%d channels of %d bits)", c->ch, c->depth);
        fail_with(c, G4_EFORMAT);
    }
    rc = g4_image_alloc(c->out, (int)w, (int)h, c->err);
    if (rc) fail_with(c, rc);
    if (c->interlaced && !(c->raw = calloc(h, c->rowbytes))) {
        g4_err_set(c->err, G4_ENOMEM, "out of memory decoding a %u x %u interlaced PNG", w, h);
        fail_with(c, G4_ENOMEM);
    }
}

static void on_row(png_structp png, png_bytep row, png_uint_32 y, int pass) {
    pctx *c = png_get_progressive_ptr(png);
    (void)pass;
    if (!row || y >= (png_uint_32)c->out->h) return;
    if (c->interlaced) {
        png_progressive_combine_row(png, c->raw + (size_t)y * c->rowbytes, row);
    } else {
        to_rgb(row, c->out->rgb + (size_t)y * c->out->w * 3, (uint32_t)c->out->w, c->ch, c->depth);
        c->rows++;
    }
}

/* Every row out: the last row of a plain image, or libpng past its last pass (7) when interlaced. */
static int all_rows(pctx *c) {
    if (!c->out->rgb) return 0;
    return c->interlaced ? png_get_current_pass_number(c->png) >= 7 : c->rows == (uint32_t)c->out->h;
}

static int is_chunk_letter(uint8_t b) { return (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || b == '_'; }

/* After the image data Pillow reads on chunk by chunk until IEND, the end of the file or a
 * header it cannot read, and refuses the file when a chunk's data is cut short (an IDAT that
 * ends early is the one the image data ended in, so it is let through; an APNG's next frame
 * (fcTL) ends the reading). The name of such a
 * chunk, or 0. */
static int trailing_chunk_cut(const uint8_t *d, size_t n, char name[5]) {
    uint64_t pos = 8;
    int seen_idat = 0;
    while (pos + 8 <= n) {
        const uint8_t *h = d + pos;
        uint64_t len = (uint64_t)h[0] << 24 | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 8 | h[3];
        if (!is_chunk_letter(h[4]) || !is_chunk_letter(h[5]) || !is_chunk_letter(h[6]) || !is_chunk_letter(h[7])) return 0;
        if (!memcmp(h + 4, "IEND", 4)) return 0;
        if (seen_idat && !memcmp(h + 4, "fcTL", 4)) return 0;   /* APNG: the next frame; Pillow stops there */
        int idat = !memcmp(h + 4, "IDAT", 4);
        if (pos + 8 + len > n) {
            if (idat || !seen_idat) return 0;
            memcpy(name, h + 4, 4);
            name[4] = 0;
            return 1;
        }
        seen_idat |= idat;
        pos += 12 + len;
    }
    return 0;
}

/* Feeds the whole file to libpng's progressive reader. Pillow's rule for a file that ends early
 * is followed: it is an image when every row could be decoded from the bytes there are (the
 * zlib checksum, later chunks and IEND may be missing); errors after that point lose only
 * trailing metadata. Returns 0, a g4 status, or -1 with c->msg. */
static int run(pctx *c, const uint8_t *d, size_t n) {
    if (setjmp(png_jmpbuf(c->png))) return c->rc ? c->rc : all_rows(c) ? 0 : -1;
    png_structp png = c->png;
    png_set_progressive_read_fn(png, c, on_info, on_row, NULL);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);   /* the sides are checked in on_info, with a message */
    png_set_chunk_malloc_max(png, 16u << 20);
    png_set_benign_errors(png, 1);
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);   /* Pillow refuses a bad chunk CRC */
    png_set_read_user_chunk_fn(png, c, on_chunk);
    static const png_byte as_unknown[] = "eXIf\0iCCP\0sPLT\0";   /* iCCP, sPLT: never needed, never inflated */
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, as_unknown, 3);
    png_process_data(png, c->info, (png_bytep)(uintptr_t)d, n);
    if (all_rows(c)) return 0;
    snprintf(c->msg, sizeof c->msg, "the file ends early (truncated) %s", c->out->rgb ? "inside the image data" : "before the image data");
    return -1;
}

int g4_image_decode_png(const uint8_t *d, size_t n, const g4_image_limits *lim, g4_image *out,
                        g4_image_meta *meta, g4_err *err) {
    pctx c = {.meta = meta, .lim = lim, .err = err, .out = out};
    c.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, on_error, on_warning);
    if (c.png) c.info = png_create_info_struct(c.png);
    int rc;
    if (!c.info) rc = g4_err_set(err, G4_ENOMEM, "out of memory starting the PNG decoder");
    else {
        rc = run(&c, d, n);
        if (rc < 0) rc = g4_err_set(err, G4_EFORMAT, "corrupt PNG: %s", c.msg);
        char cut[5];
        if (!rc && trailing_chunk_cut(d, n, cut))
            rc = g4_err_set(err, G4_EFORMAT, "truncated PNG: the file ends inside the %s chunk after the image data", cut);
        if (!rc && c.interlaced)
            for (int y = 0; y < out->h; y++) to_rgb(c.raw + (size_t)y * c.rowbytes, out->rgb + (size_t)y * out->w * 3, (uint32_t)out->w, c.ch, c.depth);
        if (!rc) take_text(&c);
        if (!rc && c.nomem) rc = g4_err_set(err, G4_ENOMEM, "out of memory reading PNG metadata");
    }
    png_destroy_read_struct(&c.png, &c.info, NULL);
    free(c.raw);
    if (rc) g4_image_free(out);
    return rc;
}
