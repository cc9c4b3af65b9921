#!/usr/bin/env python3
"""Makes the detection corpus with the Python standard library only (see README.md).

Deterministic: a fixed random seed, fixed timestamps. Every file is a real, valid file of its
format, a few KiB, above the pipeline's 1024-byte inline limit (tiny_*.png is below it on
purpose). JPEG, GIF, WebP, TIFF, MP3, FLAC and Ogg come from Debian tools (see README.md), not from here.
"""
import bz2, gzip, io, lzma, random, sqlite3, struct, tarfile, wave, zipfile, zlib, os

rng = random.Random(20261122)
here = os.path.dirname(os.path.abspath(__file__))


def noise(n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def write(name, data):
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)


def png(w, h):
    # 8-bit RGB, one filter byte per row; noise so zlib cannot shrink it below the limit.
    raw = b"".join(b"\x00" + noise(w * 3) for _ in range(h))
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def pdf():
    # A minimal valid PDF: catalog, pages, one page with a content stream; the binary comment
    # line marks it as binary as real producers do. xref offsets are computed.
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>"]
    text = b"".join(b"BT /F1 12 Tf 72 %d Td (Sales Dashboard row %d) Tj ET\n" % (720 - i * 14, i) for i in range(50))
    objs.append(b"<< /Length %d >>\nstream\n" % len(text) + text + b"endstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def wav():
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(noise(4000))
    return buf.getvalue()


def ooxml(kind):
    # The parts infer looks for: [Content_Types].xml first, then word/ or xl/.
    buf = io.BytesIO()
    ct = {"docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
          "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"}[kind]
    part = {"docx": "word/document.xml", "xlsx": "xl/workbook.xml"}[kind]
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        def add(name, data):
            info = zipfile.ZipInfo(name, date_time=(2026, 11, 22, 0, 0, 0))
            z.writestr(info, data)
        add("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Override PartName="/%s" ContentType="%s"/></Types>' % (part, ct))
        add("_rels/.rels", '<?xml version="1.0"?><Relationships/>')
        add(part, '<?xml version="1.0"?><doc>' + "".join("<p>row %d %s</p>" % (i, noise(8).hex()) for i in range(60)) + "</doc>")
        # Real documents have more parts; infer looks at the 4th entry to tell DOCX from XLSX.
        add(part.split("/")[0] + "/styles.xml", '<?xml version="1.0"?><styles/>')
        add("docProps/core.xml", '<?xml version="1.0"?><coreProperties/>')
    return buf.getvalue()


def plain_zip():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(zipfile.ZipInfo("data.bin", date_time=(2026, 11, 22, 0, 0, 0)), noise(3000))
    return buf.getvalue()


def tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        data = noise(2000)
        info = tarfile.TarInfo("data.bin")
        info.size = len(data)
        info.mtime = 1795000000
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sqlite_db():
    path = os.path.join(here, "tmp.sqlite")
    if os.path.exists(path):
        os.remove(path)
    con = sqlite3.connect(path)
    con.execute("create table t (id integer primary key, v blob)")
    con.executemany("insert into t (v) values (?)", [(noise(100),) for _ in range(20)])
    con.commit()
    con.close()
    data = open(path, "rb").read()
    os.remove(path)
    return data


write("sample.png", png(32, 24))
write("tiny.png", png(2, 2))
write("sample.pdf", pdf())
write("sample.wav", wav())
write("sample.docx", ooxml("docx"))
write("sample.xlsx", ooxml("xlsx"))
write("sample.zip", plain_zip())
write("sample.gz", gzip.compress(noise(3000), mtime=0))
write("sample.bz2", bz2.compress(noise(3000)))
write("sample.xz", lzma.compress(noise(3000)))
write("sample.tar", tar())
write("sample.sqlite", sqlite_db())
write("sample.bmp", b"BM" + struct.pack("<IHHI", 54 + 48 * 32 * 3, 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, 48, 32, 1, 24, 0, 48 * 32 * 3, 2835, 2835, 0, 0) + noise(48 * 32 * 3))
