//! The model's server-sent events, read from its body a piece at a time: each event's `data`
//! handed on as text borrowed from the piece when the event lies whole in it (the usual case:
//! a server writes an event per piece), copied only when it spans pieces. Only `data` is
//! read; event names, ids, retry times and comments carry nothing a dialect needs.

use super::LlmError;

/// The state between two pieces of one stream.
#[derive(Debug, Default)]
pub(super) struct Reader {
    /// The end of the last piece when it did not end a line.
    line: Vec<u8>,
    /// The data of the event being read, when it began in an earlier piece (or has more
    /// than one `data` line, joined by newlines).
    data: Vec<u8>,
    /// The event being read has data, in `data` or (within a piece) borrowed.
    has_data: bool,
    /// The last piece ended in `\r`: a `\n` opening the next belongs to that line end.
    skip_lf: bool,
    /// The stream's first line has been read (a byte order mark opening it is skipped).
    begun: bool,
}

/// Where the event being read keeps its data within a piece.
#[derive(Clone, Copy)]
enum Data {
    None,
    /// A range of the piece.
    Borrowed(usize, usize),
    /// In [`Reader::data`].
    Owned,
}

impl Reader {
    /// Reads `piece`, handing the data of each event it completes to `on_data`, in order, until
    /// that returns something or fails.
    pub(super) fn feed<T>(
        &mut self,
        mut piece: &[u8],
        mut on_data: impl FnMut(&str) -> Result<Option<T>, LlmError>,
    ) -> Result<Option<T>, LlmError> {
        if self.skip_lf {
            self.skip_lf = false;
            piece = piece.strip_prefix(b"\n").unwrap_or(piece);
        }
        let mut data = if self.has_data {
            Data::Owned
        } else {
            Data::None
        };
        let mut at = 0;
        while let Some(end) = piece[at..]
            .iter()
            .position(|b| matches!(b, b'\n' | b'\r'))
            .map(|i| at + i)
        {
            let (start, line_end) = (at, end);
            at = end + 1;
            if piece[end] == b'\r' {
                match piece.get(at) {
                    Some(b'\n') => at += 1,
                    None => self.skip_lf = true,
                    Some(_) => {}
                }
            }
            if !self.line.is_empty() {
                // A line begun in the last piece (never an empty one): put together, so copied.
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&piece[start..line_end]);
                let line = self.first_line(&line);
                if let Some(value) = data_value(line) {
                    if !matches!(data, Data::None) {
                        self.own(data, piece);
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(value);
                    data = Data::Owned;
                    self.has_data = true;
                }
                continue;
            }
            let line = self.first_line(&piece[start..line_end]);
            if line.is_empty() {
                let taken = std::mem::replace(&mut data, Data::None);
                self.has_data = false;
                let text = match taken {
                    Data::None => continue,
                    Data::Borrowed(from, to) => &piece[from..to],
                    Data::Owned => &self.data[..],
                };
                let text = std::str::from_utf8(text).map_err(|_| {
                    LlmError::BadResponse("the event stream is malformed: not UTF-8".into())
                })?;
                let result = on_data(text);
                self.data.clear();
                match result? {
                    Some(done) => return Ok(Some(done)),
                    None => continue,
                }
            }
            if let Some(value) = data_value(line) {
                if matches!(data, Data::None) {
                    data = Data::Borrowed(line_end - value.len(), line_end);
                } else {
                    self.own(data, piece);
                    self.data.push(b'\n');
                    self.data.extend_from_slice(value);
                    data = Data::Owned;
                }
                self.has_data = true;
            }
        }
        // The piece ends inside a line or an event: what is borrowed from it is kept.
        self.line.extend_from_slice(&piece[at..]);
        self.own(data, piece);
        Ok(None)
    }

    /// `line` without the byte order mark a stream may open with, if it is the first.
    fn first_line<'l>(&mut self, line: &'l [u8]) -> &'l [u8] {
        if std::mem::replace(&mut self.begun, true) {
            line
        } else {
            line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
        }
    }

    /// The event's data copied into [`data`](Self::data) if it is still borrowed from `piece`.
    fn own(&mut self, data: Data, piece: &[u8]) {
        if let Data::Borrowed(from, to) = data {
            self.data.extend_from_slice(&piece[from..to]);
        }
    }
}

/// The value of a `data` line (one space after the colon dropped, as the format says), or
/// `None` for any other line.
fn data_value(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"data")?;
    match rest {
        [] => Some(rest),
        [b':', value @ ..] => Some(value.strip_prefix(b" ").unwrap_or(value)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data of the events in `pieces`, read one piece at a time.
    fn events(pieces: &[&[u8]]) -> Vec<String> {
        let mut reader = Reader::default();
        let mut out = Vec::new();
        for piece in pieces {
            let none: Option<()> = reader
                .feed(piece, |data| {
                    out.push(data.to_owned());
                    Ok(None)
                })
                .unwrap();
            assert!(none.is_none());
        }
        out
    }

    #[test]
    fn events_are_read_whole_in_a_piece_or_across_pieces() {
        let stream = b"event: a\ndata: {\"x\":1}\n\n: comment\nid: 7\ndata:{\"y\":2}\n\n";
        let whole = events(&[stream]);
        assert_eq!(whole, [r#"{"x":1}"#, r#"{"y":2}"#]);
        // Cut at every place, and a byte at a time: the same events.
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(events(&[a, b]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole);
    }

    #[test]
    fn lines_end_in_any_of_the_three_ways_and_data_lines_join() {
        let stream = b"\xEF\xBB\xBFdata: a\r\ndata: b\r\n\r\ndata: c\rdata\r\rdata: d\n\n";
        let whole = events(&[stream]);
        assert_eq!(whole, ["a\nb", "c\n", "d"]);
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(events(&[a, b]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn an_event_without_data_or_without_its_blank_line_is_none() {
        assert!(events(&[b"event: ping\n\ndata: cut"]).is_empty());
        assert_eq!(events(&[b"dataX: no\ndata: yes\n\n"]), ["yes"]);
    }

    #[test]
    fn reading_stops_at_what_the_reader_returns() {
        let mut reader = Reader::default();
        let mut seen = Vec::new();
        let done = reader
            .feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\n", |data| {
                seen.push(data.to_owned());
                Ok((data == "2").then_some(()))
            })
            .unwrap();
        assert_eq!((done, seen.len()), (Some(()), 2));
        let bad = reader.feed(b"data: \xff\n\n", |_| Ok(Some(())));
        assert!(matches!(bad, Err(LlmError::BadResponse(_))), "{bad:?}");
    }
}
