//! Hostile files, built when a test runs rather than committed (issue 32): PDFs built to exhaust
//! the extractor (a page of path operators, a Flate bomb, a page of text operators, a form that
//! draws itself, an object stream that inflates to gigabytes), PDFs broken in their structure
//! (cross-reference offsets, a page tree that loops), a Word file of tens of megabytes of text,
//! and good files to put beside them. Each takes its size, so tests build them small enough
//! to stay quick and `write_full_size_hostile_files` builds them at the sizes the issue measured.
#![allow(dead_code)] // Each test binary uses its own share.

use std::io::Write;

pub use parley_testkit::pdf::{pdf, stream};

/// `data` compressed as a PDF's `/FlateDecode` holds it (zlib).
pub fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// `n` copies of `byte`, compressed as [`zlib`] does, a mebibyte at a time: deflate's best
/// ratio is about 1,000 to 1, so a gigabyte becomes about a megabyte.
pub fn zlib_repeated(byte: u8, n: usize) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let block = vec![byte; 1 << 20];
    let mut left = n;
    while left > 0 {
        let take = left.min(block.len());
        z.write_all(&block[..take]).unwrap();
        left -= take;
    }
    z.finish().unwrap()
}

/// `n` zero bytes as a zlib stream written by hand: one literal, then copies of 258 bytes from
/// one byte back, each 13 bits in deflate's fixed codes. A gigabyte is 6.8 MB, built in well
/// under a second where compressing it takes a minute in a debug build.
pub fn zlib_zeros(n: usize) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        len: u32,
    }
    impl Bits {
        /// `count` bits of `value`, least significant first (headers, extra bits).
        fn push(&mut self, value: u64, count: u32) {
            self.acc |= value << self.len;
            self.len += count;
            while self.len >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.len -= 8;
            }
        }
        /// A Huffman code, most significant bit first.
        fn code(&mut self, code: u64, count: u32) {
            let reversed = (0..count).fold(0, |r, i| r | ((code >> i) & 1) << (count - 1 - i));
            self.push(reversed, count);
        }
    }
    let mut bits = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        len: 0,
    };
    bits.push(1, 1); // the last block
    bits.push(1, 2); // fixed codes
    let copies = n.saturating_sub(1) / 258;
    let rest = n.saturating_sub(1) % 258;
    if n > 0 {
        bits.code(0x30, 8); // the literal 0
    }
    for _ in 0..copies {
        bits.code(0xc5, 8); // length 258 (code 285)
        bits.code(0, 5); // distance 1
    }
    for _ in 0..rest {
        bits.code(0x30, 8);
    }
    bits.code(0, 7); // end of block
    let pad = (8 - bits.len % 8) % 8;
    bits.push(0, pad); // to a byte boundary
    let mut out = bits.out;
    // Adler-32 of n zeros: a stays 1, b adds 1 per byte.
    let b = (n % 65521) as u32;
    out.extend_from_slice(&((b << 16) | 1).to_be_bytes());
    out
}

const HELVETICA: &[u8] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>";

/// One letter-sized page with Helvetica as `/F1`, drawing `content` (a stream object, object
/// 5), and `extra` objects from 6 on.
fn one_page(content: Vec<u8>, xobjects: &str, extra: Vec<Vec<u8>>) -> Vec<u8> {
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
             /Resources << /Font << /F1 4 0 R >> {xobjects} >> /Contents 5 0 R >>"
        )
        .into_bytes(),
        HELVETICA.to_vec(),
        content,
    ];
    objects.extend(extra);
    pdf(&objects)
}

/// A page's text: each line at 12 points, one under the other.
fn text_content(lines: &[&str]) -> Vec<u8> {
    let mut content = b"BT /F1 12 Tf 14 TL 72 720 Td\n".to_vec();
    for line in lines {
        let escaped = line
            .replace('\\', "\\\\")
            .replace('(', "\\(")
            .replace(')', "\\)");
        content.extend_from_slice(format!("({escaped}) Tj T*\n").as_bytes());
    }
    content.extend_from_slice(b"ET\n");
    content
}

/// A good one-page PDF: `lines` of text, compressed as most producers write them.
pub fn text_pdf(lines: &[&str]) -> Vec<u8> {
    let content = stream("/Filter /FlateDecode", &zlib(&text_content(lines)));
    one_page(content, "", vec![])
}

/// A page of `operators` path operators (`m` and `l`, a line from point to point, never
/// painted) and no text, Flate-compressed. The file: 4 million of them, 114 KB. The
/// points repeat every 256 operators, so deflate shrinks them about 400 times.
pub fn path_bomb(operators: usize) -> Vec<u8> {
    let mut content = Vec::with_capacity(operators * 12);
    for i in 0..operators {
        let op = if i % 2 == 0 { "m" } else { "l" };
        let n = (i % 256) as u64;
        let (x, y) = (n * 37 % 612, n * 53 % 792);
        content.extend_from_slice(format!("{x} {y} {op}\n").as_bytes());
    }
    one_page(stream("/Filter /FlateDecode", &zlib(&content)), "", vec![])
}

/// A page whose content stream inflates to `inflated` bytes of spaces (no operator at all).
/// The file: 400 KB, inflating to about 400 MB.
pub fn flate_bomb(inflated: usize) -> Vec<u8> {
    let content = stream("/Filter /FlateDecode", &zlib_repeated(b' ', inflated));
    one_page(content, "", vec![])
}

/// A page that shows `glyphs` characters of text, a thousand to a `Tj`, all at one spot.
/// The file: 74 KB.
pub fn text_bomb(glyphs: usize) -> Vec<u8> {
    let run = format!("({}) Tj\n", "W".repeat(1000));
    let mut content = b"BT /F1 12 Tf 72 720 Td\n".to_vec();
    for _ in 0..glyphs.div_ceil(1000) {
        content.extend_from_slice(run.as_bytes());
    }
    content.extend_from_slice(b"ET\n");
    one_page(stream("/Filter /FlateDecode", &zlib(&content)), "", vec![])
}

/// A good PDF whose cross-reference table gives every object an offset 7 bytes past where it
/// is (as a file edited by hand, or cut and joined, ends up).
pub fn broken_xref() -> Vec<u8> {
    let objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_vec(),
        HELVETICA.to_vec(),
        stream("", &text_content(&["Offsets are wrong."])),
    ];
    parley_testkit::pdf::pdf_with(&objects, "", |o| o + 7)
}

/// A PDF whose page tree loops: the root's kid is a node whose kid is the root again, and no
/// page is ever reached.
pub fn cyclic_page_tree() -> Vec<u8> {
    pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>".to_vec(),
    ])
}

/// A page that draws a form XObject which draws itself: pdf-extract follows `Do` into the form
/// again and again until its stack overflows, which aborts the process.
pub fn form_loop() -> Vec<u8> {
    let form = stream(
        "/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /X0 6 0 R >> >>",
        b"/X0 Do",
    );
    one_page(
        stream("", b"/X0 Do"),
        "/XObject << /X0 6 0 R >>",
        vec![form],
    )
}

/// A page that draws a form that draws the next, `depth` forms deep, the last showing text.
pub fn nested_forms(depth: usize) -> Vec<u8> {
    let forms = (0..depth)
        .map(|i| {
            let (resources, content) = if i + 1 < depth {
                (
                    format!("/Resources << /XObject << /X0 {} 0 R >> >>", 7 + i),
                    b"/X0 Do".to_vec(),
                )
            } else {
                (
                    "/Resources << /Font << /F1 4 0 R >> >>".to_owned(),
                    text_content(&["Deep inside."]),
                )
            };
            stream(
                &format!("/Type /XObject /Subtype /Form /BBox [0 0 612 792] {resources}"),
                &content,
            )
        })
        .collect();
    one_page(stream("", b"/X0 Do"), "/XObject << /X0 6 0 R >>", forms)
}

/// A good one-page PDF holding, beside its page, an object stream that inflates to `inflated`
/// bytes: lopdf inflates every object stream while it loads a file, whether a page uses its
/// objects or not.
pub fn object_stream_bomb(inflated: usize) -> Vec<u8> {
    // One object (7, an empty dictionary), then spaces to the size asked for.
    let index = b"7 0 ";
    let mut data = index.to_vec();
    data.extend_from_slice(b"<< >>");
    data.resize(inflated.max(data.len()), b' ');
    let objstm = stream(
        &format!(
            "/Type /ObjStm /N 1 /First {} /Filter /FlateDecode",
            index.len()
        ),
        &zlib(&data),
    );
    let content = stream("", &text_content(&["Beside an object stream."]));
    one_page(content, "", vec![objstm])
}

/// A good one-page PDF whose objects are listed by a cross-reference stream (PDF 1.5) that
/// inflates to `inflated` bytes: its entries, then zeros lopdf never reads. lopdf inflates the
/// stream whole before it reads any object.
pub fn xref_stream_bomb(inflated: usize) -> Vec<u8> {
    let objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_vec(),
        HELVETICA.to_vec(),
        stream("", &text_content(&["Listed by a cross-reference stream."])),
    ];
    let mut out = b"%PDF-1.7\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    offsets.push(xref);
    // Entries of 1 + 4 + 2 bytes: type, offset, generation; object 0 is free.
    let mut entries = vec![0, 0, 0, 0, 0, 0xff, 0xff];
    for o in offsets {
        entries.push(1);
        entries.extend_from_slice(&(o as u32).to_be_bytes());
        entries.extend_from_slice(&[0, 0]);
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&entries).unwrap();
    let block = vec![0; 1 << 20];
    let mut left = inflated.saturating_sub(entries.len());
    while left > 0 {
        let take = left.min(block.len());
        z.write_all(&block[..take]).unwrap();
        left -= take;
    }
    let data = z.finish().unwrap();
    out.extend_from_slice(&stream_object(
        objects.len() + 1,
        &format!(
            "/Type /XRef /Size {} /W [1 4 2] /Root 1 0 R /Filter /FlateDecode",
            objects.len() + 2
        ),
        &data,
    ));
    out.extend_from_slice(format!("startxref\n{xref}\n%%EOF\n").as_bytes());
    out
}

/// `n 0 obj`, a stream, `endobj`.
fn stream_object(n: usize, dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = format!("{n} 0 obj\n").into_bytes();
    out.extend_from_slice(&stream(dict, data));
    out.extend_from_slice(b"\nendobj\n");
    out
}

/// A zip of `parts`, deflated as Word writes them.
pub fn zip_parts(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    for (name, body) in parts {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(*name, options).unwrap();
        zip.write_all(body).unwrap();
    }
    zip.finish().unwrap();
    out.into_inner()
}

const W: &str = "xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"";

/// A Word file of one paragraph after another, `text_bytes` bytes of text in all, each
/// paragraph a few sentences: the file was 236 KB and unpacked to ~60 MB of text.
pub fn docx_of_text(text_bytes: usize) -> Vec<u8> {
    let sentence = "Each paragraph of this report repeats what the last one said, in case the \
                    reader missed it. ";
    let para = sentence.repeat(4);
    let mut body = String::with_capacity(text_bytes + text_bytes / 10);
    let mut written = 0;
    while written < text_bytes {
        body.push_str("<w:p><w:r><w:t>");
        body.push_str(&para);
        body.push_str("</w:t></w:r></w:p>");
        written += para.len();
    }
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><w:document {W}><w:body>{body}</w:body></w:document>"
    );
    zip_parts(&[("word/document.xml", document.as_bytes())])
}

/// A small good Word file.
pub fn small_docx(text: &str) -> Vec<u8> {
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><w:document {W}><w:body><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:body></w:document>"
    );
    zip_parts(&[("word/document.xml", document.as_bytes())])
}
