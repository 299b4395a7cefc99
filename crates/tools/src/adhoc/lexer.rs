//! The words of an SQL text as Postgres' own lexer reads them (`src/backend/parser/scan.l`):
//! identifiers folded and decoded as the parser sees them, everything else skipped. The guard
//! (`guard`) reads names with it; it never decides what a statement means.
//!
//! Where this lexer and Postgres' could disagree, it errs towards seeing more identifiers, never
//! fewer: a string or comment it ends early shows its inside as words (a refusal too many), one
//! it ended late would hide words, so it never ends one later than Postgres does.

/// One token the guard looks at. Strings, numbers, parameters and operators are [`Tok::Other`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// A name as the parser sees it: unquoted ones folded to lower case (ASCII only, as
    /// Postgres does in UTF-8), quoted and `U&"..."` ones as written, escapes decoded; all cut
    /// to 63 bytes, as Postgres truncates identifiers.
    Ident {
        name: String,
        quoted: bool,
    },
    Open,
    Dot,
    Semicolon,
    Other,
}

/// Why a text could not be read. Postgres refuses such a text too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LexError {
    #[error("unterminated {0}")]
    Unterminated(&'static str),
    #[error("invalid Unicode escape in an identifier")]
    BadEscape,
    #[error("zero-length quoted identifier")]
    EmptyIdentifier,
}

/// Postgres keeps the first NAMEDATALEN - 1 bytes of an identifier.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The tokens of `sql`, comments and whitespace left out.
pub fn tokens(sql: &str) -> Result<Vec<Tok>, LexError> {
    let mut lexer = Lexer {
        s: sql.as_bytes(),
        text: sql,
        i: 0,
    };
    let mut out = Vec::new();
    while let Some(tok) = lexer.next()? {
        out.push(tok);
    }
    Ok(out)
}

struct Lexer<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_cont(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

/// Dollar-quote tags take no `$`.
fn is_tag_cont(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.s.get(self.i + ahead).copied()
    }

    fn starts(&self, prefix: &[u8]) -> bool {
        self.s[self.i..].starts_with(prefix)
    }

    /// Whitespace and comments (nested block comments, as Postgres nests them).
    fn skip_blank(&mut self) -> Result<(), LexError> {
        loop {
            match self.peek(0) {
                Some(b) if is_space(b) => self.i += 1,
                Some(b'-') if self.peek(1) == Some(b'-') => {
                    while let Some(b) = self.peek(0) {
                        if b == b'\n' || b == b'\r' {
                            break;
                        }
                        self.i += 1;
                    }
                }
                Some(b'/') if self.peek(1) == Some(b'*') => {
                    self.i += 2;
                    let mut depth = 1;
                    while depth > 0 {
                        if self.i >= self.s.len() {
                            return Err(LexError::Unterminated("comment"));
                        }
                        if self.starts(b"/*") {
                            depth += 1;
                            self.i += 2;
                        } else if self.starts(b"*/") {
                            depth -= 1;
                            self.i += 2;
                        } else {
                            self.i += 1;
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn next(&mut self) -> Result<Option<Tok>, LexError> {
        self.skip_blank()?;
        let Some(b) = self.peek(0) else {
            return Ok(None);
        };
        let tok = match b {
            b'(' => {
                self.i += 1;
                Tok::Open
            }
            b';' => {
                self.i += 1;
                Tok::Semicolon
            }
            b'.' if self.peek(1).is_some_and(|d| d.is_ascii_digit()) => {
                self.number();
                Tok::Other
            }
            b'.' => {
                self.i += 1;
                Tok::Dot
            }
            b'\'' => {
                self.i += 1;
                self.plain_string()?;
                Tok::Other
            }
            b'"' => {
                self.i += 1;
                let raw = self.quoted_identifier()?;
                Tok::Ident {
                    name: cut(raw.replace("\"\"", "\"")),
                    quoted: true,
                }
            }
            b'$' if self.peek(1).is_some_and(|d| d.is_ascii_digit()) => {
                self.i += 1;
                while self.peek(0).is_some_and(|d| d.is_ascii_digit()) {
                    self.i += 1;
                }
                Tok::Other
            }
            b'$' => {
                if !self.dollar_string()? {
                    self.i += 1;
                }
                Tok::Other
            }
            b'0'..=b'9' => {
                self.number();
                Tok::Other
            }
            b'e' | b'E' if self.peek(1) == Some(b'\'') => {
                self.i += 2;
                self.escape_string()?;
                Tok::Other
            }
            b'b' | b'B' | b'x' | b'X' | b'n' | b'N' if self.peek(1) == Some(b'\'') => {
                self.i += 2;
                self.plain_string()?;
                Tok::Other
            }
            b'u' | b'U' if self.peek(1) == Some(b'&') && self.peek(2) == Some(b'\'') => {
                self.i += 3;
                self.plain_string()?;
                self.uescape()?;
                Tok::Other
            }
            b'u' | b'U' if self.peek(1) == Some(b'&') && self.peek(2) == Some(b'"') => {
                self.i += 3;
                let raw = self.quoted_identifier()?.replace("\"\"", "\"");
                let escape = self.uescape()?.unwrap_or('\\');
                Tok::Ident {
                    name: cut(decode_unicode(&raw, escape)?),
                    quoted: true,
                }
            }
            b if is_ident_start(b) => {
                let start = self.i;
                while self.peek(0).is_some_and(is_ident_cont) {
                    self.i += 1;
                }
                Tok::Ident {
                    name: cut(self.text[start..self.i].to_ascii_lowercase()),
                    quoted: false,
                }
            }
            _ => {
                // An operator character or anything else: one at a time, so that `--` and `/*`
                // inside an operator start a comment, as they do for Postgres.
                self.i += self.text[self.i..].chars().next().map_or(1, char::len_utf8);
                Tok::Other
            }
        };
        Ok(Some(tok))
    }

    /// After the opening quote: up to the closing one, `''` being a quote inside. Backslashes
    /// are plain characters (`standard_conforming_strings`, on by default and set by the SQL
    /// tools' transaction): reading them as escapes could end the string later than Postgres.
    fn plain_string(&mut self) -> Result<(), LexError> {
        loop {
            match self.peek(0) {
                None => return Err(LexError::Unterminated("quoted string")),
                Some(b'\'') if self.peek(1) == Some(b'\'') => self.i += 2,
                Some(b'\'') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(_) => self.i += 1,
            }
        }
    }

    /// After `E'`: backslash escapes a character, `''` is a quote.
    fn escape_string(&mut self) -> Result<(), LexError> {
        loop {
            match self.peek(0) {
                None => return Err(LexError::Unterminated("quoted string")),
                Some(b'\\') => self.i += 2,
                Some(b'\'') if self.peek(1) == Some(b'\'') => self.i += 2,
                Some(b'\'') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(_) => self.i += 1,
            }
        }
    }

    /// After the opening `"`: the raw text up to the closing one (`""` kept doubled).
    fn quoted_identifier(&mut self) -> Result<String, LexError> {
        let start = self.i;
        loop {
            match self.peek(0) {
                None => return Err(LexError::Unterminated("quoted identifier")),
                Some(b'"') if self.peek(1) == Some(b'"') => self.i += 2,
                Some(b'"') => {
                    let raw = self.text[start..self.i].to_owned();
                    self.i += 1;
                    if raw.is_empty() {
                        return Err(LexError::EmptyIdentifier);
                    }
                    return Ok(raw);
                }
                Some(_) => self.i += 1,
            }
        }
    }

    /// At a `$` that may open `$tag$...$tag$`: consumes the whole string and returns true, or
    /// returns false when this `$` opens none (Postgres then reads it as an error).
    fn dollar_string(&mut self) -> Result<bool, LexError> {
        let mut end = self.i + 1;
        if self.s.get(end).is_some_and(|&b| is_ident_start(b)) {
            while self.s.get(end).is_some_and(|&b| is_tag_cont(b)) {
                end += 1;
            }
        }
        if self.s.get(end) != Some(&b'$') {
            return Ok(false);
        }
        let delimiter = &self.text[self.i..=end];
        let body = end + 1;
        match self.text[body..].find(delimiter) {
            Some(at) => {
                self.i = body + at + delimiter.len();
                Ok(true)
            }
            None => Err(LexError::Unterminated("dollar-quoted string")),
        }
    }

    /// A numeric literal: `0x`/`0o`/`0b` integers, or digits with an optional fraction and
    /// exponent, `_` between digits. Letters right after one are left to be read as a name
    /// (Postgres refuses them as trailing junk).
    fn number(&mut self) {
        let digits = |lexer: &mut Self, ok: fn(u8) -> bool| {
            while lexer.peek(0).is_some_and(|b| ok(b) || b == b'_') {
                lexer.i += 1;
            }
        };
        if self.peek(0) == Some(b'0')
            && let Some(radix) = self.peek(1)
        {
            let ok: Option<fn(u8) -> bool> = match radix {
                b'x' | b'X' => Some(|b: u8| b.is_ascii_hexdigit()),
                b'o' | b'O' => Some(|b: u8| (b'0'..=b'7').contains(&b)),
                b'b' | b'B' => Some(|b: u8| b == b'0' || b == b'1'),
                _ => None,
            };
            if let Some(ok) = ok {
                self.i += 2;
                digits(self, ok);
                return;
            }
        }
        digits(self, |b| b.is_ascii_digit());
        // `1..2` is two numbers around an operator.
        if self.peek(0) == Some(b'.') && self.peek(1) != Some(b'.') {
            self.i += 1;
            digits(self, |b| b.is_ascii_digit());
        }
        if matches!(self.peek(0), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(self.peek(1), Some(b'+' | b'-')));
            if self.peek(1 + sign).is_some_and(|b| b.is_ascii_digit()) {
                self.i += 1 + sign;
                digits(self, |b| b.is_ascii_digit());
            }
        }
    }

    /// After a `U&` string or identifier: an optional `UESCAPE 'c'`, comments and whitespace
    /// allowed around it, as Postgres' grammar reads it. Returns the escape character.
    fn uescape(&mut self) -> Result<Option<char>, LexError> {
        let saved = self.i;
        self.skip_blank()?;
        let word = b"uescape";
        let is_word = self.s.len() >= self.i + word.len()
            && self.s[self.i..self.i + word.len()].eq_ignore_ascii_case(word)
            && !self
                .s
                .get(self.i + word.len())
                .is_some_and(|&b| is_ident_cont(b));
        if !is_word {
            self.i = saved;
            return Ok(None);
        }
        self.i += word.len();
        self.skip_blank()?;
        if self.peek(0) != Some(b'\'') {
            return Err(LexError::BadEscape);
        }
        self.i += 1;
        let rest = &self.text[self.i..];
        let mut chars = rest.chars();
        let (Some(c), Some('\'')) = (chars.next(), chars.next()) else {
            return Err(LexError::BadEscape);
        };
        if c.is_ascii_hexdigit() || matches!(c, '+' | '\'' | '"') || c.is_whitespace() {
            return Err(LexError::BadEscape);
        }
        self.i += c.len_utf8() + 1;
        Ok(Some(c))
    }
}

/// A `U&"..."` identifier's text with its escapes (`\XXXX`, `\+XXXXXX`, surrogate pairs, the
/// escape character doubled) decoded, as Postgres' `str_udeescape` does.
fn decode_unicode(raw: &str, escape: char) -> Result<String, LexError> {
    let chars: Vec<char> = raw.chars().collect();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    let mut pending_high: Option<u32> = None;
    while i < chars.len() {
        let c = chars[i];
        if c != escape {
            if pending_high.is_some() {
                return Err(LexError::BadEscape);
            }
            out.push(c);
            i += 1;
            continue;
        }
        if chars.get(i + 1) == Some(&escape) {
            if pending_high.is_some() {
                return Err(LexError::BadEscape);
            }
            out.push(escape);
            i += 2;
            continue;
        }
        let (digits, skip) = if chars.get(i + 1) == Some(&'+') {
            (6, 2)
        } else {
            (4, 1)
        };
        let hex: String = chars.iter().skip(i + skip).take(digits).collect();
        if hex.len() != digits || !hex.chars().all(|h| h.is_ascii_hexdigit()) {
            return Err(LexError::BadEscape);
        }
        let code = u32::from_str_radix(&hex, 16).map_err(|_| LexError::BadEscape)?;
        i += skip + digits;
        match (pending_high.take(), code) {
            (None, 0xD800..=0xDBFF) => pending_high = Some(code),
            (Some(high), 0xDC00..=0xDFFF) => {
                let combined = 0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00);
                out.push(char::from_u32(combined).ok_or(LexError::BadEscape)?);
            }
            (Some(_), _) | (None, 0xDC00..=0xDFFF) | (None, 0) => {
                return Err(LexError::BadEscape);
            }
            (None, code) => out.push(char::from_u32(code).ok_or(LexError::BadEscape)?),
        }
    }
    if pending_high.is_some() {
        return Err(LexError::BadEscape);
    }
    Ok(out)
}

/// The first 63 bytes, on a character boundary (Postgres' `truncate_identifier`).
fn cut(mut name: String) -> String {
    if name.len() > MAX_IDENTIFIER_BYTES {
        let mut end = MAX_IDENTIFIER_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sql: &str) -> Vec<String> {
        tokens(sql)
            .unwrap()
            .into_iter()
            .filter_map(|t| match t {
                Tok::Ident { name, .. } => Some(name),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn unquoted_names_fold_and_quoted_ones_keep_their_case() {
        assert_eq!(
            names("SELECT Pg_Cancel_Backend(1), \"Mixed\"\"Q\" FROM t"),
            ["select", "pg_cancel_backend", "Mixed\"Q", "from", "t"]
        );
    }

    #[test]
    fn strings_comments_and_dollar_quotes_hide_nothing_else() {
        assert_eq!(
            names(
                "SELECT 'set_config(''x'')' /* a /* nested */ set_config */ -- set_config\n\
                 , $q$ set_config $q$, $$x$$, E'\\' set_config', a$b$c, $1 FROM t"
            ),
            ["select", "a$b$c", "from", "t"]
        );
        // A backslash in a plain string is a character: the string ends at the next quote,
        // and what follows is read as words.
        assert_eq!(
            names(r"SELECT 'a\' , txid_current() --'"),
            ["select", "txid_current"]
        );
    }

    #[test]
    fn unicode_escaped_identifiers_are_decoded_with_their_escape_character() {
        assert_eq!(
            names(r#"SELECT U&"pg\005fterminate\005Fbackend"(1)"#),
            ["select", "pg_terminate_backend"]
        );
        assert_eq!(
            names("SELECT u&\"set!005fconfig\" /* c */ UESCAPE '!' ('a', 'b', true)"),
            ["select", "set_config", "true"]
        );
        assert_eq!(names(r#"SELECT U&"\+01F600""#), ["select", "😀"]);
        assert_eq!(names(r#"SELECT U&"\D83D\DE00""#), ["select", "😀"]);
        assert!(tokens(r#"SELECT U&"\00zz""#).is_err());
        assert!(tokens(r#"SELECT U&"\D83D""#).is_err());
    }

    #[test]
    fn identifiers_are_cut_to_63_bytes_as_postgres_cuts_them() {
        let long = format!("{}tail", "a".repeat(63));
        assert_eq!(names(&long), ["a".repeat(63)]);
    }

    #[test]
    fn unterminated_texts_are_errors() {
        for sql in [
            "SELECT 'x",
            "SELECT \"x",
            "SELECT /* /* */",
            "SELECT $a$ x",
            "SELECT \"\"",
        ] {
            assert!(tokens(sql).is_err(), "{sql}");
        }
    }

    #[test]
    fn punctuation_the_guard_needs_is_kept() {
        assert_eq!(
            tokens("s.f(1);").unwrap(),
            [
                Tok::Ident {
                    name: "s".into(),
                    quoted: false
                },
                Tok::Dot,
                Tok::Ident {
                    name: "f".into(),
                    quoted: false
                },
                Tok::Open,
                Tok::Other,
                Tok::Other,
                Tok::Semicolon
            ]
        );
        assert_eq!(names("SELECT 1.5e-3x, .5, 0x1F_FF"), ["select", "x"]);
    }
}
