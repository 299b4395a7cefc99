//! A PDF content stream's tokens, split where lopdf's parser splits them but without building
//! anything: numbers, names, strings, arrays and dictionaries, keywords and operators, inline
//! images stepped over. The guard counts a page's tokens with it before pdf-extract decodes the
//! page into one `Vec<Operation>` (lopdf keeps every operand as an `Object`), and learns which
//! forms the page draws. It never stops where lopdf would go on: bytes lopdf cannot read are
//! stepped over, so a count is never lower than what lopdf would decode.

/// One token of a content stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Token<'a> {
    /// A string, `true`, `false` or `null`: an operand lopdf keeps as one `Object`.
    Operand,
    /// A number, also an operand.
    Number(&'a [u8]),
    /// A name (without its `/`), also an operand.
    Name(&'a [u8]),
    /// `[` or `<<` (as `b'['` or `b'<'`): an array or dictionary operand opens (its items are
    /// tokens of their own).
    Open(u8),
    /// `]` or `>>` (as `b']'` or `b'>'`).
    Close(u8),
    /// An operator (`Tj`, `re`, `Do`); an inline image (`BI` to `EI`) is one `BI`.
    Operator(&'a [u8]),
}

/// Whitespace as PDF defines it; lopdf's content parser takes only the first four, and stops
/// at the others: stepping over them as well never counts less than lopdf reads.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' | b'\0')
}

fn is_delimiter(b: u8) -> bool {
    matches!(
        b,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

/// What lopdf's content parser reads as an operator's letters.
fn is_operator_byte(b: u8) -> bool {
    b.is_ascii_alphabetic() || matches!(b, b'*' | b'\'' | b'"')
}

/// The tokens of one content stream, in order.
#[derive(Clone)]
pub(super) struct Lexer<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(data: &'a [u8]) -> Lexer<'a> {
        Lexer { data, at: 0 }
    }

    fn peek(&self, ahead: usize) -> Option<u8> {
        self.data.get(self.at + ahead).copied()
    }

    /// Steps past a literal string: `(` already read; nested parentheses balance, a backslash
    /// escapes the next byte. An unterminated string runs to the end, as lopdf then reads
    /// nothing more either.
    fn literal_string(&mut self) {
        let mut depth = 1usize;
        while let Some(b) = self.peek(0) {
            self.at += 1;
            match b {
                b'\\' => self.at += 1,
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
        self.at = self.data.len();
    }

    /// Steps past a hexadecimal string: `<` already read.
    fn hex_string(&mut self) {
        match memchr(b'>', &self.data[self.at..]) {
            Some(end) => self.at += end + 1,
            None => self.at = self.data.len(),
        }
    }

    /// Steps past an inline image's data: after `ID` and one whitespace byte, up to an `EI`
    /// between whitespace (or at the end). lopdf reads uncompressed data by its declared size
    /// and searches for `EI` otherwise; data that holds "` EI `" early makes this count the
    /// rest as tokens, more than lopdf reads, never fewer.
    fn inline_image_data(&mut self) {
        self.at = (self.at + 1).min(self.data.len());
        let rest = &self.data[self.at..];
        let end = rest.windows(2).enumerate().position(|(i, w)| {
            w == b"EI"
                && (i == 0 || is_space(rest[i - 1]))
                && rest
                    .get(i + 2)
                    .is_none_or(|&b| is_space(b) || is_delimiter(b))
        });
        self.at = match end {
            Some(i) => self.at + i + 2,
            None => self.data.len(),
        };
    }

    /// After `BI`: the image's dictionary up to `ID`, then its data. One token for all of it:
    /// lopdf keeps an inline image as one operation.
    fn inline_image(&mut self) {
        while let Some(token) = self.next_raw() {
            if let Token::Operator(op) = token {
                if op == b"ID" {
                    self.inline_image_data();
                    return;
                }
                if op == b"EI" {
                    return;
                }
            }
        }
    }

    /// Bytes read so far.
    pub(super) fn position(&self) -> usize {
        self.at
    }

    /// The next token, inline images not yet stepped over.
    fn next_raw(&mut self) -> Option<Token<'a>> {
        loop {
            let b = self.peek(0)?;
            if is_space(b) {
                self.at += 1;
                continue;
            }
            let start = self.at;
            self.at += 1;
            match b {
                b'%' => {
                    let rest = &self.data[self.at..];
                    self.at += rest
                        .iter()
                        .position(|&c| c == b'\r' || c == b'\n')
                        .unwrap_or(rest.len());
                }
                b'(' => {
                    self.literal_string();
                    return Some(Token::Operand);
                }
                b'<' if self.peek(0) == Some(b'<') => {
                    self.at += 1;
                    return Some(Token::Open(b'<'));
                }
                b'<' => {
                    self.hex_string();
                    return Some(Token::Operand);
                }
                b'>' if self.peek(0) == Some(b'>') => {
                    self.at += 1;
                    return Some(Token::Close(b'>'));
                }
                b'[' => return Some(Token::Open(b'[')),
                b']' => return Some(Token::Close(b']')),
                b'/' => {
                    while self
                        .peek(0)
                        .is_some_and(|c| !is_space(c) && !is_delimiter(c))
                    {
                        self.at += 1;
                    }
                    return Some(Token::Name(&self.data[start + 1..self.at]));
                }
                b'0'..=b'9' | b'+' | b'-' | b'.' => {
                    // lopdf's numbers: a sign, digits, a point, digits; a number ends where
                    // they do ("0Tj" is 0 then Tj).
                    let mut digits = b.is_ascii_digit();
                    let mut point = b == b'.';
                    while let Some(c) = self.peek(0) {
                        if c.is_ascii_digit() {
                            digits = true;
                        } else if c == b'.' && !point {
                            point = true;
                        } else {
                            break;
                        }
                        self.at += 1;
                    }
                    if digits {
                        return Some(Token::Number(&self.data[start..self.at]));
                    }
                    // A lone sign or point: nothing lopdf reads.
                }
                c if is_operator_byte(c) => {
                    while self.peek(0).is_some_and(is_operator_byte) {
                        self.at += 1;
                    }
                    let word = &self.data[start..self.at];
                    return Some(match word {
                        b"true" | b"false" | b"null" => Token::Operand,
                        _ => Token::Operator(word),
                    });
                }
                // Anything else (`)`, `{`, a lone `>`, bytes of binary data) is stepped over.
                _ => {}
            }
        }
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let token = self.next_raw()?;
        if token == Token::Operator(b"BI") {
            self.inline_image();
        }
        Some(token)
    }
}

/// The first `needle` in `haystack`.
fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(data: &[u8]) -> Vec<Token<'_>> {
        Lexer::new(data).collect()
    }

    fn operators(data: &[u8]) -> Vec<&str> {
        Lexer::new(data)
            .filter_map(|t| match t {
                Token::Operator(op) => Some(std::str::from_utf8(op).unwrap()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn operands_and_operators_split_where_lopdf_splits_them() {
        use Token::*;
        assert_eq!(
            tokens(b"BT /F1 12 Tf (a (b) \\) c) Tj [1 -2.5 <0a0b>] TJ ET"),
            [
                Operator(b"BT"),
                Name(b"F1"),
                Number(b"12"),
                Operator(b"Tf"),
                Operand,
                Operator(b"Tj"),
                Open(b'['),
                Number(b"1"),
                Number(b"-2.5"),
                Operand,
                Close(b']'),
                Operator(b"TJ"),
                Operator(b"ET"),
            ]
        );
        // Without spaces, a number ends where its digits do.
        assert_eq!(operators(b"1 2m3 4l.5 w"), ["m", "l", "w"]);
        assert_eq!(
            operators(b"q 1 0 0 1 0 0 cm T* ' \" Q"),
            ["q", "cm", "T*", "'", "\"", "Q"]
        );
    }

    #[test]
    fn comments_dictionaries_and_keywords_are_not_operators() {
        use Token::*;
        assert_eq!(
            tokens(b"% a comment Tj\n/Span << /MCID 0 /B true >> BDC EMC"),
            [
                Name(b"Span"),
                Open(b'<'),
                Name(b"MCID"),
                Number(b"0"),
                Name(b"B"),
                Operand,
                Close(b'>'),
                Operator(b"BDC"),
                Operator(b"EMC"),
            ]
        );
    }

    #[test]
    fn an_inline_image_is_one_token_whatever_its_data_holds() {
        let mut data = b"q BI /W 4 /H 1 /BPC 8 /CS /G ID ".to_vec();
        data.extend_from_slice(b"\x00Tj) m\xff");
        data.extend_from_slice(b" EI Q");
        assert_eq!(operators(&data), ["q", "BI", "Q"]);
    }

    #[test]
    fn bytes_lopdf_cannot_read_are_stepped_over_and_unterminated_strings_end_the_stream() {
        assert_eq!(operators(b"\xff\xfe m } { l"), ["m", "l"]);
        assert_eq!(operators(b"1 0 m (never closed l"), ["m"]);
        assert_eq!(operators(b"<00 l"), Vec::<&str>::new());
    }
}
