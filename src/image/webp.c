/* webp.c — WebP bytes -> RGB with libwebp, through the same WebPAnimDecoder (default options:
 * RGBA, not premultiplied) that Pillow's WebPImagePlugin uses for every WebP file, so lossy,
 * lossless, alpha and animated files give Pillow's pixels: the first frame composed on the
 * canvas (transparent black outside it), alpha dropped. Metadata: the first EXIF and XMP chunks
 * (what Pillow's get_chunk returns). The canvas size is checked against the limits from the
 * demuxer before the decoder allocates its canvases. */
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image/decode.h"

static int take_chunk(const WebPDemuxer *dm, const char *fourcc, uint8_t **dst, size_t *dst_n) {
    WebPChunkIterator it;
    int rc = G4_OK;
    if (WebPDemuxGetChunk(dm, fourcc, 1, &it)) {
        rc = g4_image_meta_set(dst, dst_n, it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
    }
    return rc;
}

int g4_image_decode_webp(const uint8_t *d, size_t n, const g4_image_limits *lim, g4_image *out,
                         g4_image_meta *meta, g4_err *err) {
    WebPData data = {d, n};
    WebPDemuxState state;
    WebPDemuxer *dm = WebPDemuxPartial(&data, &state);
    if (!dm || state != WEBP_DEMUX_DONE) {
        int truncated = dm && state >= WEBP_DEMUX_PARSED_HEADER;
        WebPDemuxDelete(dm);
        return g4_err_set(err, G4_EFORMAT, truncated ? "truncated WebP: the file ends early" : "corrupt WebP: the RIFF/WebP structure does not parse");
    }
    int64_t w = WebPDemuxGetI(dm, WEBP_FF_CANVAS_WIDTH), h = WebPDemuxGetI(dm, WEBP_FF_CANVAS_HEIGHT);
    int rc = g4_image_check_size("WebP", w, h, lim, err);
    if (!rc && (take_chunk(dm, "EXIF", &meta->exif, &meta->exif_n) || take_chunk(dm, "XMP ", &meta->xmp, &meta->xmp_n)))
        rc = g4_err_set(err, G4_ENOMEM, "out of memory reading WebP metadata");
    WebPDemuxDelete(dm);
    if (rc) return rc;

    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, NULL);
    if (!dec) return g4_err_set(err, G4_EFORMAT, "corrupt WebP: the decoder does not accept it");
    WebPAnimInfo info;
    uint8_t *rgba = NULL;
    int ts = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info) || info.canvas_width != (uint32_t)w || info.canvas_height != (uint32_t)h)
        rc = g4_err_set(err, G4_EFORMAT, "corrupt WebP: inconsistent canvas size");
    else if (!WebPAnimDecoderGetNext(dec, &rgba, &ts) || !rgba)
        rc = g4_err_set(err, G4_EFORMAT, "corrupt WebP: the first frame does not decode");
    else rc = g4_image_alloc(out, (int)w, (int)h, err);
    if (!rc) {
        size_t np = (size_t)w * (size_t)h;
        for (size_t i = 0; i < np; i++) memcpy(out->rgb + 3 * i, rgba + 4 * i, 3);
    }
    WebPAnimDecoderDelete(dec);
    if (rc) g4_image_free(out);
    return rc;
}
