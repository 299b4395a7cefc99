//! A PDF stream's filters undone within a byte limit, the way lopdf's
//! `Stream::decompressed_content` undoes them (Flate with its raw-deflate fallback, LZW,
//! ASCII85, the PNG predictors), to learn whether lopdf may decode it at all: lopdf inflates
//! with no limit, and 400 KB of Flate became 400 MB (an LZW stream grows ~1,000 times). Output
//! stops one step past the limit, so a bomb costs at most the limit. On damaged data lopdf can
//! drop the last piece it read before the error; this keeps it, so its output is lopdf's or
//! longer, never shorter, and lopdf's own decoding, run once this passes, stays in the limit.

use std::io::Read;

use pdf_extract::{Dictionary, Object, Stream};

/// What a stream holds once its filters are undone.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decoded {
    /// The decoded bytes: lopdf's, or (on damaged data) lopdf's and more.
    Plain(Vec<u8>),
    /// lopdf cannot undo its filters (an image codec, a filter it does not know, a broken
    /// predictor): pdf-extract then reads the bytes as they are stored.
    AsStored,
}

/// The stream would decode to more than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OverLimit;

/// Bytes read from a decoder at a time.
const STEP: usize = 64 * 1024;

/// `stream`'s content with its filters undone, in at most `limit` bytes.
pub(super) fn decode(stream: &Stream, limit: u64) -> Result<Decoded, OverLimit> {
    // A filter that is not a name or an array of names: lopdf reads the bytes as stored.
    let Ok(filters) = stream.filters() else {
        return Ok(Decoded::AsStored);
    };
    let params = stream
        .dict
        .get(b"DecodeParms")
        .and_then(Object::as_dict)
        .ok();
    // An empty /Filter array decodes to nothing in lopdf; so it does here.
    let mut data = Vec::new();
    for (i, filter) in filters.iter().enumerate() {
        let input = if i == 0 { &stream.content } else { &data };
        let stage = match *filter {
            b"FlateDecode" => predicted(inflate(input, limit)?, params, limit)?,
            b"LZWDecode" => predicted(lzw(input, params, limit)?, params, limit)?,
            b"ASCII85Decode" => ascii85(input, limit)?,
            _ => None,
        };
        match stage {
            Some(out) => data = out,
            None => return Ok(Decoded::AsStored),
        }
    }
    Ok(Decoded::Plain(data))
}

/// The output of one filter, or `None` when lopdf fails on it.
type Stage = Result<Option<Vec<u8>>, OverLimit>;

/// Reads `reader` to its end or its first error (as `read_to_end` leaves its buffer), in at most
/// `limit` bytes.
fn read_within(mut reader: impl Read, limit: u64) -> Result<Vec<u8>, OverLimit> {
    let mut out = Vec::new();
    let mut buf = vec![0; STEP];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return Ok(out),
            Ok(n) => {
                if (out.len() + n) as u64 > limit {
                    return Err(OverLimit);
                }
                out.extend_from_slice(&buf[..n]);
            }
        }
    }
}

/// Flate as lopdf undoes it: zlib, and when that fails before any output, raw deflate after
/// the two header bytes (a corrupt checksum, as in some encrypted files).
fn inflate(input: &[u8], limit: u64) -> Result<Vec<u8>, OverLimit> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut decoder = flate2::read::ZlibDecoder::new(input);
    let mut out = Vec::new();
    let mut buf = vec![0; STEP];
    let failed = loop {
        match decoder.read(&mut buf) {
            Ok(0) => break false,
            Err(_) => break true,
            Ok(n) => {
                if (out.len() + n) as u64 > limit {
                    return Err(OverLimit);
                }
                out.extend_from_slice(&buf[..n]);
            }
        }
    };
    if failed && out.is_empty() && input.len() > 2 {
        return read_within(flate2::read::DeflateDecoder::new(&input[2..]), limit);
    }
    Ok(out)
}

/// LZW with the code size switch lopdf picks from `/EarlyChange` (on unless 0).
fn lzw(input: &[u8], params: Option<&Dictionary>, limit: u64) -> Result<Vec<u8>, OverLimit> {
    use weezl::{BitOrder, LzwStatus, decode::Decoder};
    let early_change = params
        .and_then(|p| p.get(b"EarlyChange").ok())
        .and_then(|p| p.as_i64().ok())
        .is_none_or(|v| v != 0);
    let mut decoder = if early_change {
        Decoder::with_tiff_size_switch(BitOrder::Msb, 8)
    } else {
        Decoder::new(BitOrder::Msb, 8)
    };
    let mut out = Vec::new();
    let mut buf = vec![0; STEP];
    let mut input = input;
    loop {
        let step = decoder.decode_bytes(input, &mut buf);
        input = &input[step.consumed_in..];
        if (out.len() + step.consumed_out) as u64 > limit {
            return Err(OverLimit);
        }
        out.extend_from_slice(&buf[..step.consumed_out]);
        match step.status {
            Ok(LzwStatus::Ok) if step.consumed_in + step.consumed_out > 0 => {}
            _ => return Ok(out),
        }
    }
}

/// The PNG predictors (10-15) lopdf undoes after Flate and LZW; `None` when it fails on them
/// (a row cut short, an unknown row filter). Its two row buffers are `Columns` wide: a huge
/// `Columns` would make them gigabytes, so they count against the limit too.
fn predicted(data: Vec<u8>, params: Option<&Dictionary>, limit: u64) -> Stage {
    let Some(params) = params else {
        return Ok(Some(data));
    };
    let int =
        |key: &[u8], default: i64| params.get(key).and_then(Object::as_i64).unwrap_or(default);
    if !(10..=15).contains(&int(b"Predictor", 1)) {
        return Ok(Some(data));
    }
    let columns = int(b"Columns", 1).max(1) as u64;
    let colors = int(b"Colors", 1).max(1) as u64;
    let bits = int(b"BitsPerComponent", 8).max(8) as u64;
    let row = colors
        .checked_mul(bits)
        .map(|b| b / 8)
        .and_then(|bytes| bytes.checked_mul(columns))
        .ok_or(OverLimit)?;
    if row.saturating_mul(2).saturating_add(data.len() as u64) > limit {
        return Err(OverLimit);
    }
    let decoded = pdf_extract::filters::png::decode_frame(
        &data,
        (colors * bits / 8) as usize,
        columns as usize,
    );
    Ok(decoded.ok())
}

/// ASCII85 as lopdf reads it; `None` where it fails (`z` inside a group, an overflow).
fn ascii85(input: &[u8], limit: u64) -> Stage {
    let input = input.strip_suffix(b"~>").unwrap_or(input);
    let mut out = Vec::new();
    let (mut group, mut count) = (0u32, 0usize);
    for &c in input {
        if (out.len() + 4) as u64 > limit {
            return Err(OverLimit);
        }
        if c == b'z' {
            if count != 0 {
                return Ok(None);
            }
            out.extend_from_slice(&[0; 4]);
            continue;
        }
        if c.is_ascii_whitespace() {
            continue;
        }
        if !(b'!'..=b'u').contains(&c) {
            break;
        }
        let Some(next) = group
            .checked_mul(85)
            .and_then(|g| g.checked_add((c - b'!') as u32))
        else {
            return Ok(None);
        };
        group = next;
        count += 1;
        if count == 5 {
            out.extend_from_slice(&group.to_be_bytes());
            (group, count) = (0, 0);
        }
    }
    if count > 0 {
        for _ in count..5 {
            let Some(next) = group.checked_mul(85).and_then(|g| g.checked_add(84)) else {
                return Ok(None);
            };
            group = next;
        }
        out.extend_from_slice(&group.to_be_bytes()[..count - 1]);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use pdf_extract::{Dictionary, Object, Stream};

    use super::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    fn lzw(data: &[u8]) -> Vec<u8> {
        let mut encoder = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
        encoder.encode(data).unwrap()
    }

    fn stream(filters: &[&str], params: Option<Dictionary>, content: Vec<u8>) -> Stream {
        let mut dict = Dictionary::new();
        let names: Vec<Object> = filters
            .iter()
            .map(|f| Object::Name(f.as_bytes().to_vec()))
            .collect();
        dict.set("Filter", Object::Array(names));
        if let Some(p) = params {
            dict.set("DecodeParms", Object::Dictionary(p));
        }
        Stream::new(dict, content)
    }

    /// What lopdf gives, as `decode` says it: its output, or its bytes as stored on failure.
    fn lopdf(stream: &Stream) -> Decoded {
        match stream.decompressed_content() {
            Ok(data) => Decoded::Plain(data),
            Err(_) => Decoded::AsStored,
        }
    }

    fn png_params(columns: i64) -> Dictionary {
        let mut p = Dictionary::new();
        p.set("Predictor", 12);
        p.set("Columns", columns);
        p
    }

    #[test]
    fn every_filter_lopdf_knows_decodes_to_exactly_what_lopdf_gives() {
        let text = b"BT /F1 12 Tf (Hello) Tj ET\n".repeat(100);
        // Rows of 4 bytes, each after its PNG filter byte (2: Up).
        let rows: Vec<u8> = (0..50u8).flat_map(|i| [2, i, 1, 2, 3]).collect();
        let mut truncated = zlib(&text);
        truncated.truncate(truncated.len() / 2);
        let mut bad_checksum = zlib(&text);
        let at = bad_checksum.len() - 1;
        bad_checksum[at] ^= 0xff;
        let cases = [
            stream(&["FlateDecode"], None, zlib(&text)),
            stream(&["FlateDecode"], None, truncated),
            stream(&["FlateDecode"], None, bad_checksum),
            stream(&["FlateDecode"], None, b"not zlib at all".to_vec()),
            stream(&["LZWDecode"], None, lzw(&text)),
            stream(&["FlateDecode", "FlateDecode"], None, zlib(&zlib(&text))),
            stream(&["ASCII85Decode"], None, b"87cURD]i,\"Ebo80z!!~>".to_vec()),
            stream(&["ASCII85Decode"], None, b"87z".to_vec()),
            stream(&["FlateDecode"], Some(png_params(4)), zlib(&rows)),
            stream(&["FlateDecode"], Some(png_params(4)), zlib(&rows[..7])),
            stream(&["FlateDecode", "DCTDecode"], None, zlib(&text)),
            stream(&[], None, text.clone()),
        ];
        for (i, s) in cases.iter().enumerate() {
            match (decode(s, u64::MAX).unwrap(), lopdf(s)) {
                // Damaged data: lopdf may drop the last piece it read.
                (Decoded::Plain(ours), Decoded::Plain(theirs)) if i == 1 || i == 2 => {
                    assert!(ours.starts_with(&theirs), "case {i}")
                }
                (ours, theirs) => assert_eq!(ours, theirs, "case {i}"),
            }
        }
    }

    #[test]
    fn a_stream_stops_decoding_one_step_past_the_limit() {
        let big = zlib(&vec![b' '; 1 << 20]);
        let s = stream(&["FlateDecode"], None, big);
        assert_eq!(decode(&s, (1 << 20) - 1), Err(OverLimit));
        assert_eq!(
            decode(&s, 1 << 20).unwrap(),
            Decoded::Plain(vec![b' '; 1 << 20])
        );
        // A double Flate whose inner layer is small but whose content is not.
        let double = stream(
            &["FlateDecode", "FlateDecode"],
            None,
            zlib(&zlib(&vec![0; 1 << 20])),
        );
        assert_eq!(decode(&double, 1 << 16), Err(OverLimit));
        let lzw_bomb = stream(&["LZWDecode"], None, lzw(&vec![0; 1 << 20]));
        assert_eq!(decode(&lzw_bomb, 1 << 16), Err(OverLimit));
        let zeros = stream(&["ASCII85Decode"], None, b"z".repeat(1 << 16));
        assert_eq!(decode(&zeros, 1 << 16), Err(OverLimit));
    }

    #[test]
    fn a_predictor_row_wider_than_the_limit_is_refused_before_lopdf_allocates_it() {
        let s = stream(
            &["FlateDecode"],
            Some(png_params(1 << 40)),
            zlib(b"\x02abcd"),
        );
        assert_eq!(decode(&s, 64 << 20), Err(OverLimit));
    }

    #[test]
    fn a_stream_without_filters_or_with_a_malformed_one_is_read_as_stored() {
        let plain = Stream::new(Dictionary::new(), b"q Q".to_vec());
        assert_eq!(decode(&plain, 0).unwrap(), Decoded::AsStored);
        let mut dict = Dictionary::new();
        dict.set("Filter", 7);
        assert_eq!(
            decode(&Stream::new(dict, b"q Q".to_vec()), 0).unwrap(),
            Decoded::AsStored
        );
    }
}
