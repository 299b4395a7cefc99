//! A loopback TCP proxy that can break its connections the two ways the tests need: sever them
//! the way a frozen Lambda instance finds them on thaw (the server side is gone, but the client
//! does not know until it next writes), and lose one answer after the server has sent it (a
//! write committed whose answer never arrives). The one proxy of the tests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct TcpProxy {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    sever: watch::Sender<u64>,
    lose: Armed,
    task: JoinHandle<()>,
}

/// The answer to lose, once armed.
type Armed = Arc<Mutex<Option<Arc<LoseOnce>>>>;

/// Loses the answer of the first exchange whose request bytes contain `request`: the proxy
/// holds what the server sends until it contains `answer`, then closes both sides.
#[derive(Debug)]
struct LoseOnce {
    request: Vec<u8>,
    answer: Vec<u8>,
    lost: AtomicBool,
    /// Once the answer is lost, the proxy plays the server gone (a redeploy, a crash): the next
    /// connection is closed as it is accepted and the port closed, so every later one is
    /// refused.
    then_gone: bool,
}

impl TcpProxy {
    /// Forwards `127.0.0.1:<port>` to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let (sever, severed) = watch::channel(0u64);
        let lose: Armed = Arc::default();
        let (counter, armed) = (accepted.clone(), lose.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let gone = armed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref()
                    .is_some_and(|f| f.then_gone && f.lost.load(Ordering::SeqCst));
                if gone {
                    // Dropping the listener with it closes the port.
                    drop(client);
                    return;
                }
                tokio::spawn(forward(client, upstream, severed.clone(), armed.clone()));
            }
        });
        TcpProxy {
            addr,
            accepted,
            sever,
            lose,
            task,
        }
    }

    /// A proxy to the host and port of the Postgres URL `url`, and `url` pointed through it.
    pub async fn in_front_of(url: &str) -> (TcpProxy, String) {
        let mut url = url::Url::parse(url).expect("a database URL");
        let upstream = (
            url.host_str().expect("a database host").to_owned(),
            url.port().unwrap_or(5432),
        );
        let upstream = tokio::net::lookup_host(upstream)
            .await
            .expect("the database address")
            .next()
            .expect("a database address");
        let proxy = TcpProxy::start(upstream).await;
        url.set_port(Some(proxy.addr.port())).expect("a port");
        (proxy, url.to_string())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Every open connection loses its server side now; its client side is closed when the
    /// client next sends something (or closes). New connections are unaffected.
    pub fn sever(&self) {
        self.sever.send_modify(|n| *n += 1);
    }

    /// The first request (from now on) whose bytes contain `request` never gets its answer:
    /// the proxy waits until the server's answer contains `answer` (so the server has done
    /// the work, e.g. committed a write), then closes both sides without passing it on.
    /// Everything else goes through untouched.
    pub fn lose_first_answer(&self, request: &[u8], answer: &[u8]) {
        self.arm(request, answer, false);
    }

    /// As [`TcpProxy::lose_first_answer`], and after that the server is gone: no connection
    /// gets through again, as after a redeploy or a crash.
    pub fn lose_first_answer_then_go(&self, request: &[u8], answer: &[u8]) {
        self.arm(request, answer, true);
    }

    fn arm(&self, request: &[u8], answer: &[u8], then_gone: bool) {
        *self.lose.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(LoseOnce {
            request: request.to_vec(),
            answer: answer.to_vec(),
            lost: AtomicBool::new(false),
            then_gone,
        }));
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut severed: watch::Receiver<u64>,
    armed: Armed,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    severed.borrow_and_update();
    let (mut from_client, mut from_server) = ([0u8; 16 * 1024], [0u8; 16 * 1024]);
    // Set once this connection carries the request whose answer is to be lost.
    let mut losing: Option<Arc<LoseOnce>> = None;
    let mut held = Vec::new();
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => match read {
                Ok(n) if n > 0 => {
                    if losing.is_none() {
                        let fault = armed.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        losing = fault.filter(|f| {
                            !f.lost.load(Ordering::SeqCst) && contains(&from_client[..n], &f.request)
                        });
                    }
                    if server.write_all(&from_client[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            read = server.read(&mut from_server) => match read {
                Ok(n) if n > 0 => {
                    if let Some(fault) = &losing {
                        held.extend_from_slice(&from_server[..n]);
                        if contains(&held, &fault.answer) && !fault.lost.swap(true, Ordering::SeqCst) {
                            // The server has done the work and answered; the answer goes nowhere.
                            return;
                        }
                        continue;
                    }
                    if client.write_all(&from_server[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            _ = severed.changed() => break,
        }
    }
    // Severed: the server sees its client go away at once; the client hears nothing until it
    // writes, and then its connection closes.
    drop(server);
    let _ = client.read(&mut from_client).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answering each read with `{"result":"<what it read>"}`, counting requests.
    async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = conn.read(&mut buf).await {
                        count.fetch_add(1, Ordering::SeqCst);
                        let said = String::from_utf8_lossy(&buf[..n]).into_owned();
                        let answer = format!(r#"{{"result":"{said}"}}"#);
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, served)
    }

    /// Sends `request` on a new connection through `proxy`; what comes back before it closes
    /// or 2 s pass.
    async fn exchange(proxy: &TcpProxy, request: &str) -> String {
        let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout(std::time::Duration::from_secs(2), conn.read(&mut buf));
        match read.await {
            Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            _ => "(no answer in 2 s)".to_owned(),
        }
    }

    #[tokio::test]
    async fn only_the_first_matching_request_loses_its_answer_after_the_server_answered() {
        let (upstream, served) = echo().await;
        let proxy = TcpProxy::start(upstream).await;
        proxy.lose_first_answer(b"tools/call", b"\"result\"");
        assert_eq!(exchange(&proxy, "ping").await, r#"{"result":"ping"}"#);
        assert_eq!(
            exchange(&proxy, "tools/call 1").await,
            "",
            "closed without the answer"
        );
        assert_eq!(served.load(Ordering::SeqCst), 2, "the server did answer it");
        assert_eq!(
            exchange(&proxy, "tools/call 2").await,
            r#"{"result":"tools/call 2"}"#,
            "only the first is lost"
        );
        assert_eq!(proxy.accepted(), 3);
    }
}
