//! A connection to Postgres whose server messages are bounded as they arrive: tokio-postgres
//! reads a whole message into memory before parsing it, and one error quoting a 450 MB value
//! took 929 MB (the message, then its text) and 17 s. Here an error or notice over the bound
//! is passed on with each field cut to [`FIELD_BYTES`], nothing of the rest kept; any other
//! message over it closes the connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

/// Bytes kept of each field (message, detail, hint...) of an error or notice over the bound:
/// more than anything shown of it (the SQL tools pass on 2,000 characters).
pub const FIELD_BYTES: usize = 8 * 1024;

/// What a cut field ends with.
const CUT_MARK: &[u8] = " [cut]".as_bytes();

/// A message other than an error or a notice was larger than the bound.
#[derive(Debug, thiserror::Error)]
#[error("the server sent a message of {bytes} bytes (type {kind:?}); the limit is {limit}")]
pub struct MessageTooLarge {
    pub kind: char,
    pub bytes: usize,
    pub limit: usize,
}

/// `S` with every server message bounded to `limit` bytes (see the module doc).
pub struct Bounded<S> {
    inner: S,
    limit: usize,
    state: State,
    /// Bytes ready for tokio-postgres, from `taken` on.
    ready: Vec<u8>,
    taken: usize,
    scratch: Box<[u8]>,
}

enum State {
    /// Reading the type byte and the length.
    Header { bytes: [u8; 5], got: usize },
    /// A message within the bound: passed on as it comes.
    Pass { left: usize },
    /// An error or notice over the bound, its fields being cut.
    Cut(Cut),
}

struct Cut {
    kind: u8,
    left: usize,
    /// The rewritten body so far.
    body: Vec<u8>,
    /// At a field's type byte, not inside its value.
    at_field: bool,
    /// Where the current value starts in `body`, and whether it was cut.
    value_start: usize,
    value_cut: bool,
}

impl<S> Bounded<S> {
    pub fn new(inner: S, limit: usize) -> Self {
        Self {
            inner,
            limit,
            state: State::Header {
                bytes: [0; 5],
                got: 0,
            },
            ready: Vec::new(),
            taken: 0,
            scratch: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// Moves `input` (bytes read from the server) through the framing into `ready`.
    fn absorb(&mut self, mut input: &[u8]) -> io::Result<()> {
        while !input.is_empty() {
            match &mut self.state {
                State::Header { bytes, got } => {
                    let take = (5 - *got).min(input.len());
                    bytes[*got..*got + take].copy_from_slice(&input[..take]);
                    *got += take;
                    input = &input[take..];
                    if *got < 5 {
                        continue;
                    }
                    let header = *bytes;
                    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
                    let body = (length as usize).checked_sub(4).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "bad message length")
                    })?;
                    if body <= self.limit {
                        self.ready.extend_from_slice(&header);
                        self.state = if body == 0 {
                            State::Header {
                                bytes: [0; 5],
                                got: 0,
                            }
                        } else {
                            State::Pass { left: body }
                        };
                    } else if header[0] == b'E' || header[0] == b'N' {
                        self.state = State::Cut(Cut {
                            kind: header[0],
                            left: body,
                            body: Vec::with_capacity(4 * FIELD_BYTES),
                            at_field: true,
                            value_start: 0,
                            value_cut: false,
                        });
                    } else {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            MessageTooLarge {
                                kind: char::from(header[0]),
                                bytes: body,
                                limit: self.limit,
                            },
                        ));
                    }
                }
                State::Pass { left } => {
                    let take = (*left).min(input.len());
                    self.ready.extend_from_slice(&input[..take]);
                    *left -= take;
                    input = &input[take..];
                    if *left == 0 {
                        self.state = State::Header {
                            bytes: [0; 5],
                            got: 0,
                        };
                    }
                }
                State::Cut(cut) => {
                    let take = cut.left.min(input.len());
                    cut.absorb(&input[..take]);
                    cut.left -= take;
                    input = &input[take..];
                    if cut.left == 0 {
                        let length = u32::try_from(cut.body.len() + 4).unwrap_or(u32::MAX);
                        self.ready.push(cut.kind);
                        self.ready.extend_from_slice(&length.to_be_bytes());
                        self.ready.append(&mut cut.body);
                        self.state = State::Header {
                            bytes: [0; 5],
                            got: 0,
                        };
                    }
                }
            }
        }
        Ok(())
    }
}

impl Cut {
    /// Fields are a type byte and a NUL-terminated value; a zero type byte ends the body.
    fn absorb(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.at_field {
                let kind = chunk[0];
                self.body.push(kind);
                chunk = &chunk[1..];
                if kind != 0 {
                    self.at_field = false;
                    self.value_start = self.body.len();
                    self.value_cut = false;
                }
                continue;
            }
            let end = memchr::memchr(0, chunk);
            let value = &chunk[..end.unwrap_or(chunk.len())];
            let room = FIELD_BYTES.saturating_sub(self.body.len() - self.value_start);
            let keep = room.min(value.len());
            self.body.extend_from_slice(&value[..keep]);
            self.value_cut |= keep < value.len();
            chunk = &chunk[value.len()..];
            if end.is_some() {
                if self.value_cut {
                    // Never end inside a character: tokio-postgres wants UTF-8.
                    if let Err(e) = std::str::from_utf8(&self.body[self.value_start..])
                        && e.error_len().is_none()
                    {
                        self.body.truncate(self.value_start + e.valid_up_to());
                    }
                    self.body.extend_from_slice(CUT_MARK);
                }
                self.body.push(0);
                self.at_field = true;
                chunk = &chunk[1..];
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.ready.len() {
                let n = (this.ready.len() - this.taken).min(buf.remaining());
                buf.put_slice(&this.ready[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.ready.len() {
                    this.ready.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut scratch = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut scratch))?;
            let read = scratch.filled().len();
            if read == 0 {
                return Poll::Ready(Ok(()));
            }
            // The scratch buffer is moved out for the call so `absorb` may borrow `self`.
            let scratch = std::mem::take(&mut this.scratch);
            let absorbed = this.absorb(&scratch[..read]);
            this.scratch = scratch;
            absorbed?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Bounded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose streams are [`Bounded`]: over TLS the bound applies to what TLS
/// decrypted, where Postgres' messages are.
pub struct BoundedTls<T> {
    pub inner: T,
    pub limit: usize,
}

impl<S, T> TlsConnect<S> for BoundedTls<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
{
    type Stream = Bounded<T::Stream>;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, T::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let limit = self.limit;
        let connecting = self.inner.connect(stream);
        Box::pin(async move { connecting.await.map(|s| Bounded::new(s, limit)) })
    }
}

/// A socket that could not be opened, handed to tokio-postgres so that it reports the
/// failure as its own (`is_connection_error`): its error type cannot be built outside it.
pub struct Unopened(pub Option<io::Error>);

impl Unopened {
    fn error(&mut self) -> io::Error {
        self.0
            .take()
            .unwrap_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "not connected"))
    }
}

impl AsyncRead for Unopened {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(self.get_mut().error()))
    }
}

impl AsyncWrite for Unopened {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(self.get_mut().error()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(self.get_mut().error()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&u32::try_from(body.len() + 4).unwrap().to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// Everything `bytes` becomes, fed in pieces of `step` bytes.
    fn through(bytes: &[u8], limit: usize, step: usize) -> io::Result<Vec<u8>> {
        let mut bounded = Bounded::new((), limit);
        for piece in bytes.chunks(step) {
            bounded.absorb(piece)?;
        }
        Ok(bounded.ready)
    }

    #[test]
    fn messages_within_the_bound_pass_untouched() {
        let mut bytes = message(b'D', b"\0\x01\0\0\0\x03abc");
        bytes.extend(message(b'Z', b"I"));
        for step in [1, 3, 1000] {
            assert_eq!(through(&bytes, 64, step).unwrap(), bytes);
        }
    }

    #[test]
    fn an_error_over_the_bound_keeps_its_fields_each_cut_on_a_character() {
        let value = "é".repeat(3 * FIELD_BYTES);
        let mut body = b"SERROR\0C22P02\0M".to_vec();
        body.extend_from_slice(value.as_bytes());
        body.extend_from_slice(b"\0Hshort\0\0");
        let mut bytes = message(b'E', &body);
        bytes.extend(message(b'Z', b"I"));
        for step in [7, 65536] {
            let out = through(&bytes, 1024, step).unwrap();
            let length = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
            let fields = &out[5..1 + length];
            let text = std::str::from_utf8(fields).unwrap();
            assert!(text.starts_with("SERROR\0C22P02\0Méé"), "{step}");
            assert!(text.ends_with("é [cut]\0Hshort\0\0"), "{step}");
            assert!(length < FIELD_BYTES + 100);
            assert_eq!(&out[1 + length..], message(b'Z', b"I"));
        }
    }

    #[test]
    fn any_other_message_over_the_bound_closes_the_connection() {
        let e = through(&message(b'D', &[0; 100]), 64, 1000).unwrap_err();
        assert!(e.to_string().contains("100 bytes"), "{e}");
    }
}
