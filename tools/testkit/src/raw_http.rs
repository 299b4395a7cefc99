//! A bare HTTP/1.1 connection for tests that need what an HTTP client library hides: half a
//! request, a body left unsent, the exact response head, or whether the server closed the
//! connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any wait on the server may take before the test fails: generous, because the
/// outcome is what is asserted, not the time.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct RawConnection {
    stream: TcpStream,
    /// Bytes read past the last response head.
    buffered: Vec<u8>,
}

/// A response's status line and headers (names lower-cased), and what of its body came along.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body_start: Vec<u8>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a server said to a request whose body it did not wait for.
pub struct EarlyAnswer {
    pub head: Head,
    pub body: Vec<u8>,
    /// Whether the server then closed the connection.
    pub closed: bool,
}

impl EarlyAnswer {
    /// Asserts the answer is `status` with the JSON error `code`, says `Connection: close`, and
    /// the server then closed the connection.
    pub fn assert_refused_and_closed(&self, status: u16, code: &str) {
        assert_eq!(self.head.status, status);
        assert_eq!(self.head.header("connection"), Some("close"));
        let body: serde_json::Value =
            serde_json::from_slice(&self.body).expect("a JSON error body");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(self.closed, "the server kept the connection open");
    }
}

/// POSTs to `path` on `base` with `headers`, declaring a 2 MB body but sending only 128 KiB
/// of it (past every body limit the functions have by default, and within what loopback
/// buffers hold), as a client streaming a large upload would.
pub async fn post_oversize(base: &str, path: &str, headers: &[(&str, &str)]) -> EarlyAnswer {
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    let mut request = format!("POST {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Content-Length: 2000000\r\n\r\n");
    let mut request = request.into_bytes();
    request.extend(std::iter::repeat_n(b' ', 128 * 1024));
    let mut conn = RawConnection::open(base).await;
    conn.send(&request).await.expect("send");
    let head = conn.read_head().await.expect("an answer");
    let body = conn.read_body(&head).await;
    let closed = conn.closed_by_server().await;
    EarlyAnswer { head, body, closed }
}

impl RawConnection {
    /// Connects to `base` (`http://host:port`).
    pub async fn open(base: &str) -> Self {
        let addr: SocketAddr = base
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("base is http://ip:port");
        Self {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buffered: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Reads up to the end of the next response head; `None` if the server closed first.
    pub async fn read_head(&mut self) -> Option<Head> {
        let mut data = std::mem::take(&mut self.buffered);
        let end = loop {
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut chunk))
                .await
                .expect("the server answers in time")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            data.extend_from_slice(&chunk[..n]);
        };
        let text = String::from_utf8_lossy(&data[..end]).into_owned();
        let mut lines = text.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Some(Head {
            status,
            headers,
            body_start: data[end + 4..].to_vec(),
        })
    }

    /// Reads `head`'s body to its `content-length`.
    pub async fn read_body(&mut self, head: &Head) -> Vec<u8> {
        let length: usize = head
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .expect("a content-length");
        let mut body = head.body_start.clone();
        while body.len() < length {
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut chunk))
                .await
                .expect("the body arrives in time")
                .expect("read");
            assert!(n > 0, "the server closed in the middle of a body");
            body.extend_from_slice(&chunk[..n]);
        }
        self.buffered = body.split_off(length);
        body
    }

    /// Whether the server closes the connection (reads to end of stream, discarding anything
    /// still sent), waiting at most [`PATIENCE`]. A reset counts as closed.
    pub async fn closed_by_server(&mut self) -> bool {
        let drain = async {
            let mut chunk = [0u8; 8192];
            loop {
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(PATIENCE, drain).await.is_ok()
    }
}
