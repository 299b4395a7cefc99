//! PDFs written byte by byte, for tests that need a file of an exact shape (a page of one
//! kind, a broken cross-reference table, an encryption dictionary) that no producer writes.

/// A PDF of `objects` (object `n` is `objects[n - 1]`, object 1 the catalog), with a
/// cross-reference table whose offsets are right.
pub fn pdf(objects: &[Vec<u8>]) -> Vec<u8> {
    pdf_with(objects, "", |offset| offset)
}

/// [`pdf`], with `trailer` added to the trailer's entries (`/Encrypt 4 0 R ...`) and the
/// cross-reference table's offsets passed through `offset` first.
pub fn pdf_with(objects: &[Vec<u8>], trailer: &str, offset: impl Fn(usize) -> usize) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        out.extend_from_slice(format!("{:010} 00000 n \n", offset(o)).as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R {trailer}>>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// A stream object: `dict` holds the entries other than `/Length`.
pub fn stream(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = format!("<< /Length {} {dict} >>\nstream\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\nendstream");
    out
}
