#!/usr/bin/python3
"""Regenerates the image-preprocessing test data of tests/unit/test_image.c (run offline; the
tests never run Python):

  cases/           small image files of every kind the decoders take (PNG colour types and bit
                   depths, interlaced, palette+tRNS, APNG; JPEG baseline / progressive /
                   subsampled / grey / CMYK; WebP lossy / lossless / alpha / animated; EXIF and
                   XMP orientations) plus a few of formats that are refused (GIF, BMP, TIFF)
  cases/expected.txt   per file: "name W H sha256" of what Hugging Face's loader gives:
                   PIL.Image.open -> ImageOps.exif_transpose -> convert("RGB"), pixels HWC uint8;
                   "name error" where Pillow refuses the file, "name unsupported" for other formats
  resize/          two small noisy PNGs; resize/expected.txt: "name OH OW sha256" of Pillow's
                   Image.resize((OW, OH), BICUBIC) for many size pairs (up, down, mixed, 1 pixel)
  size_rule.txt    "MAX_SOFT H W OH OW" from the numpy oracle's aspect_ratio_preserving_size
                   (= transformers' get_aspect_ratio_preserving_size), "... error" when it raises

Needs Debian's python3-pil and python3-numpy, and the oracle folder for size_rule.txt:
  /usr/bin/python3 tests/data/vision/make_cases.py --oracle ../shared/oracle
PNG variants Pillow cannot write (16-bit, 1/2/4-bit, interlaced, chunks after IDAT) come from a
small encoder below; their expected pixels still come from Pillow reading them.
"""

import argparse
import hashlib
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image, ImageOps

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.RandomState(20261205)


# ---- a small PNG encoder ---------------------------------------------------------------------

def chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def pack_rows(a, depth):
    """a: [h][w*c] integer samples -> list of packed rows (big-endian 16-bit, MSB-first sub-byte)."""
    rows = []
    for r in a:
        if depth == 16:
            rows.append(b"".join(struct.pack(">H", int(v)) for v in r))
        elif depth == 8:
            rows.append(bytes(int(v) for v in r))
        else:
            per = 8 // depth
            out = bytearray()
            for i in range(0, len(r), per):
                b = 0
                for j in range(per):
                    v = int(r[i + j]) if i + j < len(r) else 0
                    b |= v << (8 - depth * (j + 1))
                out.append(b)
            rows.append(bytes(out))
    return rows


ADAM7 = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]


def write_png(path, img, ctype, depth, interlace=False, palette=None, trns=None, before=(), after=()):
    """img: HxWxC integer array of samples for colour type ctype at bit depth depth."""
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    h, w, c = img.shape
    raw = bytearray()
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for (y0, x0, dy, dx) in passes:
        sub = img[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in pack_rows(sub.reshape(sub.shape[0], -1), depth):
            raw += b"\0" + row
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0))
    for b in before:
        out += b
    if palette is not None:
        out += chunk(b"PLTE", bytes(np.asarray(palette, dtype=np.uint8).reshape(-1)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    out += chunk(b"IDAT", zlib.compress(bytes(raw), 9))
    for a in after:
        out += a
    out += chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(out)


# ---- EXIF / XMP ---------------------------------------------------------------------------------

def tiff_orientation(o, be=False, typ=3, count=1, extra_tags=True):
    """A TIFF structure whose IFD0 holds Orientation (0x0112) = o, type typ, count count."""
    e = ">" if be else "<"
    head = (b"MM\x00\x2a" if be else b"II\x2a\x00") + struct.pack(e + "I", 8)
    entries = []
    if extra_tags:
        entries.append(struct.pack(e + "HHI", 0x010F, 2, 4) + b"g4t\0")   # Make
    if typ == 3:
        val = struct.pack(e + "H", o) * min(count, 2)
        val = val.ljust(4, b"\0")
        entries.append(struct.pack(e + "HHI", 0x0112, 3, count) + val[:4])
        payload = b""
    elif typ == 4:
        entries.append(struct.pack(e + "HHII", 0x0112, 4, 1, o))
        payload = b""
    elif typ == 5:   # RATIONAL: stored past the IFD
        off = 8 + 2 + 12 * (len(entries) + 1) + 4
        entries.append(struct.pack(e + "HHII", 0x0112, 5, 1, off))
        payload = struct.pack(e + "II", o * 3, 3)
    ifd = struct.pack(e + "H", len(entries)) + b"".join(entries) + struct.pack(e + "I", 0)
    return head + ifd + payload


def xmp_packet(o, attr=True):
    tag = f'tiff:Orientation="{o}"' if attr else f"<tiff:Orientation>{o}</tiff:Orientation>"
    if attr:
        body = f'<rdf:Description rdf:about="" xmlns:tiff="http://ns.adobe.com/tiff/1.0/" {tag}/>'
    else:
        body = f'<rdf:Description rdf:about="" xmlns:tiff="http://ns.adobe.com/tiff/1.0/">{tag}</rdf:Description>'
    return ('<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
            '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">' + body +
            '</rdf:RDF></x:xmpmeta><?xpacket end="w"?>').encode()


def itxt(key, text):
    return chunk(b"iTXt", key.encode() + b"\0\0\0\0\0" + text)


def ztxt(key, text):
    return chunk(b"zTXt", key.encode() + b"\0\0" + zlib.compress(text))


def raw_profile(exif):
    hx = exif.hex()
    lines = "\n".join(hx[i:i + 72] for i in range(0, len(hx), 72))
    return f"\nexif\n{len(exif):8d}\n{lines}\n".encode()


def jpeg_with_app1(jpeg, payload):
    """Inserts an APP1 segment right after SOI."""
    seg = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return jpeg[:2] + seg + jpeg[2:]


# ---- pictures -----------------------------------------------------------------------------------

def picture(h, w):
    """A smooth picture with some noise and an asymmetric mark (so every orientation differs)."""
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1))
    g = (y * 255 // max(h - 1, 1))
    b = ((x + 2 * y) * 7) % 256
    img = np.stack([r, g, b], -1).astype(np.int32) + RNG.randint(-12, 13, (h, w, 3))
    img[1:4, 1:6] = [255, 0, 0]
    return np.clip(img, 0, 255).astype(np.uint8)


def noise(h, w):
    return RNG.randint(0, 256, (h, w, 3)).astype(np.uint8)


# Files where Debian's Pillow 9.4 and current Pillow (12.x, what transformers users run) differ:
# the orientation current Pillow reads. 9.4's Exif.load strips one "Exif\0\0" prefix and then
# raises on the second; current Pillow strips them all (Image.py, Exif.load: `while ...`). 9.4's
# getexif reads XMP only from PNG's "XML:com.adobe.xmp"; current Pillow also from info["xmp"],
# which JpegImagePlugin fills from the XMP APP1 segment.
CURRENT_PILLOW_ORIENTATION = {"exif5_prefixed.png": 5, "xmp6.jpg": 6}
TRANSPOSE = {2: Image.FLIP_LEFT_RIGHT, 3: Image.ROTATE_180, 4: Image.FLIP_TOP_BOTTOM, 5: Image.TRANSPOSE,
             6: Image.ROTATE_270, 7: Image.TRANSVERSE, 8: Image.ROTATE_90}


def hf_pixels(path):
    """What transformers' load_image gives: open, exif_transpose, convert('RGB')."""
    im = Image.open(path)
    o = CURRENT_PILLOW_ORIENTATION.get(os.path.basename(path))
    im = im.transpose(TRANSPOSE[o]) if o else ImageOps.exif_transpose(im)
    im = im.convert("RGB")
    a = np.asarray(im, dtype=np.uint8)
    return a.shape[1], a.shape[0], hashlib.sha256(a.tobytes()).hexdigest()


def make_cases(out):
    os.makedirs(out, exist_ok=True)
    H, W = 23, 37
    base = picture(H, W)
    names = []

    def png(name, *a, **k):
        write_png(os.path.join(out, name), *a, **k)
        names.append(name)

    def pil(name, im, **k):
        im.save(os.path.join(out, name), **k)
        names.append(name)

    def raw(name, data):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        names.append(name)

    grey = (base.astype(np.int32).sum(-1) // 3).astype(np.uint8)
    alpha = RNG.randint(0, 256, (H, W)).astype(np.uint8)
    # PNG: every colour type / depth Pillow reads
    png("rgb8.png", base, 2, 8)
    png("rgba8.png", np.dstack([base, alpha]), 6, 8)
    png("grey8.png", grey, 0, 8)
    png("greya8.png", np.dstack([grey, alpha]), 4, 8)
    for d in (1, 2, 4):
        png(f"grey{d}.png", grey >> (8 - d), 0, d)
    g16 = (grey.astype(np.int64) * 257 + RNG.randint(0, 256, (H, W))) % 65536
    g16[0, :8] = [0, 1, 200, 254, 255, 256, 300, 65535]   # Pillow clips 16-bit grey at 255
    png("grey16.png", g16, 0, 16)
    a16 = alpha.astype(np.int64) * 257
    png("greya16.png", np.dstack([g16, a16]), 4, 16)
    rgb16 = np.minimum(base.astype(np.int64) * 257 + RNG.randint(0, 256, (H, W, 3)), 65535)
    png("rgb16.png", rgb16, 2, 16)
    png("rgba16.png", np.dstack([rgb16, a16]), 6, 16)
    pal = RNG.randint(0, 256, (200, 3))
    idx = RNG.randint(0, 200, (H, W))
    png("pal8.png", idx, 3, 8, palette=pal)
    png("pal8_trns.png", idx, 3, 8, palette=pal, trns=bytes(RNG.randint(0, 256, 150).astype(np.uint8)))
    for d in (1, 2, 4):
        png(f"pal{d}.png", idx % (1 << d), 3, d, palette=pal[: 1 << d])
    png("grey8_trns.png", grey, 0, 8, trns=struct.pack(">H", int(grey[5, 5])))
    png("rgb8_interlaced.png", base, 2, 8, interlace=True)
    png("grey16_interlaced.png", g16, 0, 16, interlace=True)
    png("pal4_interlaced.png", idx % 16, 3, 4, palette=pal[:16], interlace=True)
    png("rgba16_interlaced.png", np.dstack([rgb16, a16]), 6, 16, interlace=True)
    png("tiny_1x1.png", base[:1, :1], 2, 8)
    png("tall_1x40.png", picture(40, 1), 2, 8)
    # PNG orientation: eXIf before / after IDAT, "Exif\0\0"-prefixed eXIf, raw profile, XMP
    for o in range(1, 9):
        png(f"exif{o}.png", base, 2, 8, before=[chunk(b"eXIf", tiff_orientation(o))])
    png("exif6_be.png", base, 2, 8, before=[chunk(b"eXIf", tiff_orientation(6, be=True))])
    png("exif6_long.png", base, 2, 8, before=[chunk(b"eXIf", tiff_orientation(6, typ=4))])
    png("exif6_rational.png", base, 2, 8, before=[chunk(b"eXIf", tiff_orientation(6, typ=5))])
    png("exif8_after_idat.png", base, 2, 8, after=[chunk(b"eXIf", tiff_orientation(8))])
    png("exif5_prefixed.png", base, 2, 8, before=[chunk(b"eXIf", b"Exif\0\0" + tiff_orientation(5))])
    png("exif3_rawprofile.png", base, 2, 8, before=[ztxt("Raw profile type exif", raw_profile(b"Exif\0\0" + tiff_orientation(3)))])
    png("xmp6_attr.png", base, 2, 8, before=[itxt("XML:com.adobe.xmp", xmp_packet(6))])
    png("xmp7_elem.png", base, 2, 8, after=[itxt("XML:com.adobe.xmp", xmp_packet(7, attr=False))])
    png("exif1_xmp6.png", base, 2, 8, before=[chunk(b"eXIf", tiff_orientation(1)), itxt("XML:com.adobe.xmp", xmp_packet(6))])
    png("exif_garbage.png", base, 2, 8, before=[chunk(b"eXIf", b"II*\0\xff\xff\xff\x7f")])
    # APNG: the default image is frame 0
    fr0 = Image.fromarray(base)
    fr1 = Image.fromarray(255 - base)
    pil("anim.png", fr0, save_all=True, append_images=[fr1], duration=100, loop=0)

    # JPEG
    im = Image.fromarray(base)
    pil("q90_420.jpg", im, quality=90, subsampling=2)
    pil("q90_422.jpg", im, quality=90, subsampling=1)
    pil("q95_444.jpg", im, quality=95, subsampling=0)
    pil("progressive.jpg", im, quality=85, progressive=True)
    pil("optimized.jpg", im, quality=75, optimize=True)
    pil("grey.jpg", Image.fromarray(grey), quality=90)
    cmyk = Image.fromarray(np.dstack([base, grey]), mode="CMYK")
    pil("cmyk.jpg", cmyk, quality=90)
    big = Image.fromarray(picture(67, 93))
    pil("q80_67x93_progressive.jpg", big, quality=80, progressive=True)
    for o in (3, 6, 8):
        pil(f"exif{o}.jpg", im, quality=90, exif=b"Exif\0\0" + tiff_orientation(o))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    j = buf.getvalue()
    raw("xmp6.jpg", jpeg_with_app1(j, b"http://ns.adobe.com/xap/1.0/\0" + xmp_packet(6)))
    raw("no_eoi.jpg", j[:-2])

    # WebP
    pil("lossy.webp", im, quality=80)
    pil("lossless.webp", im, lossless=True)
    pil("lossy_alpha.webp", Image.fromarray(np.dstack([base, alpha])), quality=80)
    pil("lossless_alpha.webp", Image.fromarray(np.dstack([base, alpha])), lossless=True)
    pil("exif6.webp", im, quality=80, exif=b"Exif\0\0" + tiff_orientation(6))
    pil("anim.webp", fr0, save_all=True, append_images=[fr1], duration=100, loop=0, lossless=True)

    # refused formats (expected: "unsupported NAME")
    pil("refused.gif", im)
    pil("refused.bmp", im)
    pil("refused.tiff", im)

    lines = []
    for n in names:
        p = os.path.join(out, n)
        if n.startswith("refused."):
            lines.append(f"{n} unsupported")
            continue
        try:
            w, h, sha = hf_pixels(p)
        except (OSError, SyntaxError, ValueError) as e:   # Pillow refuses it: so must we
            lines.append(f"{n} error  # Pillow: {str(e)[:60]}")
            continue
        lines.append(f"{n} {w} {h} {sha}")
    with open(os.path.join(out, "expected.txt"), "w") as f:
        f.write("# made by tests/data/vision/make_cases.py with Pillow %s: open, exif_transpose, convert('RGB')\n"
                % Image.__version__)
        f.write("\n".join(lines) + "\n")
    return names


# Files cut at every length: which prefixes Pillow still opens (a PNG whose rows are all there
# before the cut, for instance). tests: cases/cuts.txt "name LEN..." (accepted lengths < full).
CUT_FILES = ["rgb8.png", "rgba16_interlaced.png", "exif8_after_idat.png", "anim.png", "q90_420.jpg",
             "progressive.jpg", "lossy.webp", "lossless_alpha.webp", "anim.webp"]


def make_cuts(out):
    lines = []
    for name in CUT_FILES:
        d = open(os.path.join(out, name), "rb").read()
        ok = []
        for k in range(len(d)):
            try:
                im = Image.open(io.BytesIO(d[:k]))
                ImageOps.exif_transpose(im).convert("RGB")
                ok.append(k)
            except Exception:
                pass
        lines.append(" ".join([name] + [str(k) for k in ok]))
    with open(os.path.join(out, "cuts.txt"), "w") as f:
        f.write("# made by tests/data/vision/make_cases.py: NAME then every length < the file's that Pillow %s "
                "still opens\n" % Image.__version__)
        f.write("\n".join(lines) + "\n")


RESIZE_PAIRS = [
    (1, 1), (1, 61), (47, 1), (2, 3), (23, 30), (46, 60), (47, 61), (48, 48), (94, 122), (100, 100),
    (141, 183), (200, 13), (13, 200), (47, 122), (94, 61), (480, 500), (35, 64), (17, 96), (333, 7),
]


def make_resize(out):
    os.makedirs(out, exist_ok=True)
    inputs = {"noise_47x61.png": noise(47, 61), "picture_150x113.png": picture(150, 113)}
    lines = []
    for name, arr in inputs.items():
        Image.fromarray(arr).save(os.path.join(out, name))
        im = Image.open(os.path.join(out, name)).convert("RGB")
        pairs = list(RESIZE_PAIRS) + [(150, 77), (31, 113), (767, 500), (112, 84)]
        for (oh, ow) in pairs:
            r = np.asarray(im.resize((ow, oh), Image.BICUBIC), dtype=np.uint8)
            lines.append(f"{name} {oh} {ow} {hashlib.sha256(r.tobytes()).hexdigest()}")
    with open(os.path.join(out, "expected.txt"), "w") as f:
        f.write("# made by tests/data/vision/make_cases.py: Pillow %s Image.resize((OW, OH), BICUBIC)\n" % Image.__version__)
        f.write("\n".join(lines) + "\n")


SIZES = [
    (768, 768), (1000, 1000), (224, 224), (672, 960), (960, 672), (1080, 1920), (1920, 1080), (480, 640),
    (768, 1024), (333, 517), (100, 2000), (2000, 100), (1, 1), (1, 2), (2, 1), (1, 100000), (100000, 1),
    (3, 65535), (65535, 3), (7, 9000), (9000, 7), (47, 47), (48, 48), (49, 49), (803, 803), (804, 804),
    (805, 805), (10000, 10000), (65535, 65535), (4032, 3024), (3024, 4032), (12, 4000), (4000, 12),
    (30, 13441), (1, 13440), (1, 13441), (50, 14000), (20, 20), (16, 16), (17, 4999), (5, 13),
    (6000, 4000), (59, 2048), (2048, 59), (300, 301), (1366, 768), (720, 1280), (63, 64000), (2, 50000),
]


def make_size_rule(path, oracle):
    sys.path.insert(0, oracle)
    from gemma4_vision_ref import aspect_ratio_preserving_size
    rs = np.random.RandomState(7)
    extra = [(int(a), int(b)) for a, b in zip(rs.randint(1, 9000, 120), rs.randint(1, 9000, 120))]
    extra += [(int(a), int(b)) for a, b in zip(rs.randint(1, 60, 30), rs.randint(1, 60000, 30))]
    lines = []
    for ms in (70, 140, 280, 560, 1120):
        for (h, w) in SIZES + extra:
            try:
                oh, ow = aspect_ratio_preserving_size(h, w, 16, ms * 9, 3)
                lines.append(f"{ms} {h} {w} {oh} {ow}")
            except ValueError:
                lines.append(f"{ms} {h} {w} error")
    with open(path, "w") as f:
        f.write("# MAX_SOFT H W -> OH OW, from oracle/gemma4_vision_ref.py aspect_ratio_preserving_size "
                "(patch 16, pooling 3); made by tests/data/vision/make_cases.py\n")
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", help="the numpy oracle folder (gemma4_vision_ref.py) for size_rule.txt")
    args = ap.parse_args()
    make_cases(os.path.join(HERE, "cases"))
    make_cuts(os.path.join(HERE, "cases"))
    make_resize(os.path.join(HERE, "resize"))
    if args.oracle:
        make_size_rule(os.path.join(HERE, "size_rule.txt"), args.oracle)
    else:
        print("no --oracle: size_rule.txt left as it is", file=sys.stderr)


if __name__ == "__main__":
    main()
