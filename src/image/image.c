/* image.c — the public entry of src/image: sniffing the format from the bytes, the limits,
 * dispatch to the PNG / JPEG / WebP decoders (png.c, jpeg.c, webp.c), the EXIF orientation
 * (exif.c) afterwards, and files. Owns the names of the formats it refuses; knows nothing of
 * how any format is decoded. */
#include "image/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mapfile.h"
#include "image/decode.h"

static int starts(const uint8_t *p, size_t n, const char *s, size_t sl) { return n >= sl && !memcmp(p, s, sl); }
#define STARTS(p, n, lit) starts(p, n, lit, sizeof lit - 1)

/* A strict prefix of a signature: a truncated file of that format rather than something else. */
static int cut_short(const uint8_t *p, size_t n, const char *sig, size_t sl) { return n < sl && !memcmp(p, sig, n); }

static const char PNG_SIG[8] = "\x89PNG\r\n\x1a\n";

/* An ISO base media file ("....ftyp" + brand): the HEIF family or a video. */
static const char *ftyp_kind(const uint8_t *p, size_t n) {
    if (n < 12 || memcmp(p + 4, "ftyp", 4)) return NULL;
    const uint8_t *b = p + 8;
    if (!memcmp(b, "avif", 4) || !memcmp(b, "avis", 4)) return "AVIF";
    if (!memcmp(b, "heic", 4) || !memcmp(b, "heix", 4) || !memcmp(b, "hevc", 4) || !memcmp(b, "hevx", 4) ||
        !memcmp(b, "heim", 4) || !memcmp(b, "heis", 4))
        return "HEIC";
    if (!memcmp(b, "mif1", 4) || !memcmp(b, "msf1", 4)) return "HEIF";
    if (!memcmp(b, "jxl ", 4)) return "JPEG XL";
    if (!memcmp(b, "crx ", 4)) return "Canon CR3 raw";
    return "an MP4/QuickTime video";
}

const char *g4_image_sniff(const void *data, size_t n) {
    const uint8_t *p = data;
    if (!p || !n) return NULL;
    if (STARTS(p, n, "\x89PNG\r\n\x1a\n")) return "PNG";
    if (STARTS(p, n, "\xff\xd8\xff")) return "JPEG";
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return "WebP";
    if (STARTS(p, n, "GIF87a") || STARTS(p, n, "GIF89a")) return "GIF";
    if (STARTS(p, n, "BM") && n >= 14) return "BMP";
    if (STARTS(p, n, "II*\0") || STARTS(p, n, "MM\0*") || STARTS(p, n, "II+\0") || STARTS(p, n, "MM\0+")) return "TIFF";
    const char *iso = ftyp_kind(p, n);
    if (iso) return iso;
    if (STARTS(p, n, "\xff\x0a") || STARTS(p, n, "\0\0\0\x0cJXL \r\n\x87\n")) return "JPEG XL";
    if (STARTS(p, n, "\0\0\0\x0cjP  \r\n\x87\n") || STARTS(p, n, "\xff\x4f\xff\x51")) return "JPEG 2000";
    if (STARTS(p, n, "\0\0\1\0")) return "ICO";
    if (STARTS(p, n, "\0\0\2\0")) return "CUR";
    if (STARTS(p, n, "8BPS")) return "PSD (Photoshop)";
    if (STARTS(p, n, "qoif")) return "QOI";
    if (STARTS(p, n, "%PDF")) return "PDF";
    if (STARTS(p, n, "DDS ")) return "DDS";
    if (n >= 12 && STARTS(p, n, "RIFF")) return "RIFF (not WebP: AVI or WAV?)";
    if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7' && (p[2] == '\n' || p[2] == ' ' || p[2] == '\r' || p[2] == '\t'))
        return "PNM (PBM/PGM/PPM)";
    /* text: what a wrong field or a wrong URL hands over */
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')) i++;
    const uint8_t *t = p + i;
    size_t tn = n - i;
    if (STARTS(t, tn, "data:")) return "a data: URL (text), not image bytes";
    if (STARTS(t, tn, "iVBORw0KGgo")) return "base64 text of a PNG (decode the base64 first)";
    if (STARTS(t, tn, "/9j/")) return "base64 text of a JPEG (decode the base64 first)";
    if (STARTS(t, tn, "UklGR")) return "base64 text of a WebP (decode the base64 first)";
    if (STARTS(t, tn, "R0lGOD")) return "base64 text of a GIF (decode the base64 first)";
    if (STARTS(t, tn, "<svg") || (STARTS(t, tn, "<?xml") && memmem(t, tn < 4096 ? tn : 4096, "<svg", 4)))
        return "SVG (vector graphics)";
    if (STARTS(t, tn, "<?xml")) return "XML text";
    if (STARTS(t, tn, "<!DOCTYPE") || STARTS(t, tn, "<!doctype") || STARTS(t, tn, "<html") || STARTS(t, tn, "<HTML"))
        return "an HTML page";
    if (STARTS(t, tn, "{") || STARTS(t, tn, "[")) return "JSON text";
    return NULL;
}

/* "89 50 4e 47 ..." of the first bytes, for a message about something unrecognised. */
static void hex_head(const uint8_t *p, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && i < 8 && k + 4 < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%02x", i ? " " : "", p[i]);
}

int g4_image_decode(const void *data, size_t n, const g4_image_limits *lim_in, g4_image *out, g4_err *err) {
    memset(out, 0, sizeof *out);
    g4_image_limits lim;
    if (lim_in) lim = *lim_in;
    else g4_image_limits_default(&lim);
    if (lim.max_pixels <= 0 || lim.max_side <= 0 || lim.max_bytes == 0)
        return g4_err_set(err, G4_EINVAL, "image limits must be positive (max_bytes %zu, max_pixels %lld, max_side %d)",
                          lim.max_bytes, (long long)lim.max_pixels, lim.max_side);
    const uint8_t *p = data;
    if (!p || n == 0) return g4_err_set(err, G4_EFORMAT, "the image is empty (0 bytes)");
    if (n > lim.max_bytes)
        return g4_err_set(err, G4_EINVAL, "the image is %zu bytes, more than the limit of %zu bytes", n, lim.max_bytes);
    const char *kind = g4_image_sniff(p, n);
    int (*dec)(const uint8_t *, size_t, const g4_image_limits *, g4_image *, g4_image_meta *, g4_err *) = NULL;
    if (kind && !strcmp(kind, "PNG")) dec = g4_image_decode_png;
    else if (kind && !strcmp(kind, "JPEG")) dec = g4_image_decode_jpeg;
    else if (kind && !strcmp(kind, "WebP")) dec = g4_image_decode_webp;
    else if (kind)
        return g4_err_set(err, G4_EUNSUPPORTED, "the image looks like %s: only PNG, JPEG and WebP are supported", kind);
    else if (cut_short(p, n, PNG_SIG, sizeof PNG_SIG))
        return g4_err_set(err, G4_EFORMAT, "truncated PNG: %zu bytes, not even the signature", n);
    else if (cut_short(p, n, "\xff\xd8\xff", 3))
        return g4_err_set(err, G4_EFORMAT, "truncated JPEG: %zu bytes, not even the start marker", n);
    else if (cut_short(p, n, "RIFF", 4) || (n >= 4 && n < 12 && !memcmp(p, "RIFF", 4)))
        return g4_err_set(err, G4_EFORMAT, "truncated WebP/RIFF: %zu bytes, not even the header", n);
    else {
        char hx[40];
        hex_head(p, n, hx, sizeof hx);
        return g4_err_set(err, G4_EUNSUPPORTED, "not a PNG, JPEG or WebP image (unrecognised format; first bytes %s)", hx);
    }
    g4_image_meta meta = {0};
    int rc = dec(p, n, &lim, out, &meta, err);
    if (!rc) {
        /* Pillow's exif_transpose: orientation 2..8 turns the decoded pixels */
        rc = g4_image_orient(out, g4_image_orientation(&meta), err);
    }
    g4_image_meta_free(&meta);
    if (rc) g4_image_free(out);
    return rc;
}

int g4_image_load_file(const char *path, const g4_image_limits *lim_in, g4_image *out, g4_err *err) {
    memset(out, 0, sizeof *out);
    g4_image_limits lim;
    if (lim_in) lim = *lim_in;
    else g4_image_limits_default(&lim);
    /* the size before reading anything (a FIFO or a device would never end) */
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return g4_err_set(err, G4_EIO, "image %s: not a regular file", path);
        if ((uint64_t)st.st_size > lim.max_bytes)
            return g4_err_set(err, G4_EINVAL, "image %s is %lld bytes, more than the limit of %zu bytes", path,
                              (long long)st.st_size, lim.max_bytes);
    }
    char *buf = NULL;
    size_t n = 0;
    int rc = g4_read_file(path, &buf, &n, err);
    if (!rc) rc = g4_image_decode(buf, n, &lim, out, err);   /* a file that grew meanwhile meets max_bytes here */
    free(buf);
    if (rc) g4_err_prefix(err, "image %s: ", path);
    return rc;
}
