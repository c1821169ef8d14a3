/* jpeg.c — JPEG bytes -> RGB with libjpeg-turbo, set up as Pillow's JpegDecode.c sets it up
 * (the library's defaults: ISLOW integer DCT, fancy upsampling, block smoothing), so the pixels
 * are Pillow's own:
 *   1 component: grey, replicated; 3: the library's RGB output (YCbCr or Adobe RGB alike);
 *   4 (CMYK, YCCK): Pillow's convention — the samples are taken as Adobe-inverted CMYK
 *   ("CMYK;I"), then Pillow's naive CMYK -> RGB (no colour management);
 *   other component counts and precisions other than 8 bits: refused, as Pillow refuses them.
 * Baseline, progressive and arithmetic-coded files alike. A file that ends before the decoder
 * has produced its last row is refused ("truncated", as Pillow says without
 * LOAD_TRUNCATED_IMAGES) -- in practice that includes a file cut just before its EOI marker, as
 * the last rows need the marker; once every row is out, a missing EOI is no longer an error
 * (Pillow's decoder stops there too). Warnings about corrupt data are ignored
 * (Pillow decodes those images). Metadata for the orientation: every APP1 "Exif\0\0" segment
 * (joined, as Pillow joins them) and the last XMP APP1.
 * libjpeg's default error_exit calls exit(): it is replaced by a longjmp back here. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "image/decode.h"

#define MAX_SCANS 256   /* progressive files with more scans are refused: decoding time bombs */

typedef struct {
    struct jpeg_error_mgr pub;
    struct jpeg_source_mgr src;
    struct jpeg_progress_mgr progress;
    struct jpeg_decompress_struct cinfo;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
    const uint8_t *d;
    size_t n;
    int rows_done;
    int precision;             /* set when libjpeg stops on a sample precision it cannot decode */
    uint8_t *row;
} jctx;

static jctx *ctx_of(j_common_ptr cinfo) { return (jctx *)cinfo->client_data; }

static void fail(jctx *c, const char *msg) {
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    longjmp(c->jb, 1);
}

static void on_error_exit(j_common_ptr cinfo) {
    jctx *c = ctx_of(cinfo);
    char buf[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, buf);
    if (cinfo->err->msg_code == JERR_BAD_PRECISION) c->precision = cinfo->err->msg_parm.i[0];
    fail(c, buf);
}

static void on_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void on_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > MAX_SCANS) fail(ctx_of(cinfo), "more than 256 progressive scans");
}

static const JOCTET fake_eoi[2] = {0xFF, JPEG_EOI};

static void src_init(j_decompress_ptr cinfo) { (void)cinfo; }
static void src_term(j_decompress_ptr cinfo) { (void)cinfo; }

static boolean src_fill(j_decompress_ptr cinfo) {
    jctx *c = ctx_of((j_common_ptr)cinfo);
    if (!c->rows_done) fail(c, "the file ends early (truncated)");
    cinfo->src->next_input_byte = fake_eoi;
    cinfo->src->bytes_in_buffer = 2;
    return TRUE;
}

static void src_skip(j_decompress_ptr cinfo, long k) {
    struct jpeg_source_mgr *s = cinfo->src;
    if (k <= 0) return;
    while ((size_t)k > s->bytes_in_buffer) {
        k -= (long)s->bytes_in_buffer;
        src_fill(cinfo);
    }
    s->next_input_byte += k;
    s->bytes_in_buffer -= (size_t)k;
}

static int take_markers(jctx *c, g4_image_meta *m) {
    static const char xmp_ns[] = "http://ns.adobe.com/xap/1.0/";
    for (jpeg_saved_marker_ptr mk = c->cinfo.marker_list; mk; mk = mk->next) {
        if (mk->marker != JPEG_APP0 + 1) continue;
        const uint8_t *p = mk->data;
        size_t len = mk->data_length;
        int rc = 0;
        if (len >= 6 && !memcmp(p, "Exif\0\0", 6)) {
            /* Pillow: the first segment whole, the next ones without their prefix */
            rc = m->exif ? g4_image_meta_append(&m->exif, &m->exif_n, p + 6, len - 6)
                         : g4_image_meta_set(&m->exif, &m->exif_n, p, len);
        } else if (len >= sizeof xmp_ns && !memcmp(p, xmp_ns, sizeof xmp_ns)) {
            rc = g4_image_meta_set(&m->xmp, &m->xmp_n, p + sizeof xmp_ns, len - sizeof xmp_ns);
        }
        if (rc) return rc;
    }
    return G4_OK;
}

/* Pillow's cmyk2rgb on its "CMYK;I" samples (each byte inverted first). */
static inline uint8_t cmyk_channel(uint8_t raw, int nk) {
    int v = 255 - raw, tmp = v * nk + 128;
    int r = nk - (((tmp >> 8) + tmp) >> 8);
    return (uint8_t)(r <= 0 ? 0 : r > 255 ? 255 : r);
}

static void to_rgb(const uint8_t *s, uint8_t *d, int w, int comps) {
    for (int x = 0; x < w; x++, d += 3) {
        if (comps == 1) {
            d[0] = d[1] = d[2] = s[x];
        } else if (comps == 3) {
            memcpy(d, s + 3 * x, 3);
        } else {
            const uint8_t *p = s + 4 * x;
            int nk = p[3];   /* 255 - K, with K = 255 - raw */
            d[0] = cmyk_channel(p[0], nk);
            d[1] = cmyk_channel(p[1], nk);
            d[2] = cmyk_channel(p[2], nk);
        }
    }
}

/* Everything that can longjmp. Returns 0, a g4 status, or -1 with c->msg. */
static int run(jctx *c, const g4_image_limits *lim, g4_image *out, g4_image_meta *meta, g4_err *err) {
    if (setjmp(c->jb)) return -1;
    j_decompress_ptr ci = &c->cinfo;
    jpeg_save_markers(ci, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(ci, TRUE);
    int rc = g4_image_check_size("JPEG", ci->image_width, ci->image_height, lim, err);
    if (rc) return rc;
    if (ci->data_precision != 8)
        return g4_err_set(err, G4_EUNSUPPORTED, "JPEG with %d-bit samples: only 8-bit JPEG is supported (as in Pillow)", ci->data_precision);
    int comps = ci->num_components;
    if (comps == 1) ci->out_color_space = JCS_GRAYSCALE;
    else if (comps == 3) ci->out_color_space = JCS_RGB;
    else if (comps == 4) ci->out_color_space = JCS_CMYK;
    else return g4_err_set(err, G4_EUNSUPPORTED, "JPEG with %d colour components: only 1, 3 or 4 are supported (as in Pillow)", comps);
    rc = take_markers(c, meta);
    if (rc) return g4_err_set(err, rc, "out of memory reading JPEG metadata");
    jpeg_start_decompress(ci);
    if ((int)ci->output_components != comps || ci->output_width != ci->image_width || ci->output_height != ci->image_height)
        return g4_err_set(err, G4_EFORMAT, "JPEG: unexpected output layout (%d components, %u x %u)",
                          ci->output_components, ci->output_width, ci->output_height);
    rc = g4_image_alloc(out, (int)ci->output_width, (int)ci->output_height, err);
    if (rc) return rc;
    c->row = malloc((size_t)ci->output_width * (size_t)comps);
    if (!c->row) return g4_err_set(err, G4_ENOMEM, "out of memory decoding a JPEG");
    while (ci->output_scanline < ci->output_height) {
        JSAMPROW r = c->row;
        unsigned y = ci->output_scanline;
        if (jpeg_read_scanlines(ci, &r, 1) != 1) fail(c, "no scanline decoded");
        to_rgb(c->row, out->rgb + (size_t)y * out->w * 3, out->w, comps);
    }
    c->rows_done = 1;
    jpeg_finish_decompress(ci);
    return 0;
}

int g4_image_decode_jpeg(const uint8_t *d, size_t n, const g4_image_limits *lim, g4_image *out,
                         g4_image_meta *meta, g4_err *err) {
    jctx *c = calloc(1, sizeof *c);
    if (!c) return g4_err_set(err, G4_ENOMEM, "out of memory starting the JPEG decoder");
    c->d = d;
    c->n = n;
    c->cinfo.err = jpeg_std_error(&c->pub);
    c->pub.error_exit = on_error_exit;
    c->pub.output_message = on_output_message;
    int rc;
    if (setjmp(c->jb)) {
        rc = g4_err_set(err, G4_EFORMAT, "corrupt JPEG: %s", c->msg);
    } else {
        jpeg_create_decompress(&c->cinfo);
        c->cinfo.client_data = c;
        c->src.init_source = src_init;
        c->src.fill_input_buffer = src_fill;
        c->src.skip_input_data = src_skip;
        c->src.resync_to_restart = jpeg_resync_to_restart;
        c->src.term_source = src_term;
        c->src.next_input_byte = d;
        c->src.bytes_in_buffer = n;
        c->cinfo.src = &c->src;
        c->progress.progress_monitor = on_progress;
        c->cinfo.progress = &c->progress;
        rc = run(c, lim, out, meta, err);
        if (rc < 0 && c->precision)
            rc = g4_err_set(err, G4_EUNSUPPORTED, "JPEG with %d-bit samples: only 8-bit JPEG is supported (as in Pillow)", c->precision);
        else if (rc < 0) rc = g4_err_set(err, G4_EFORMAT, "corrupt JPEG: %s", c->msg);
    }
    jpeg_destroy_decompress(&c->cinfo);
    free(c->row);
    free(c);
    if (rc) g4_image_free(out);
    return rc;
}
