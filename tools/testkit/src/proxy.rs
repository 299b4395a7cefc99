//! A loopback TCP proxy that can sever its connections the way a frozen Lambda instance finds
//! them on thaw: the server side is gone, but the client does not know until it next writes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct TcpProxy {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    sever: watch::Sender<u64>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// Forwards `127.0.0.1:<port>` to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let (sever, severed) = watch::channel(0u64);
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(forward(client, upstream, severed.clone()));
            }
        });
        TcpProxy {
            addr,
            accepted,
            sever,
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
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr, mut severed: watch::Receiver<u64>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    severed.borrow_and_update();
    let (mut from_client, mut from_server) = ([0u8; 16 * 1024], [0u8; 16 * 1024]);
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => match read {
                Ok(n) if n > 0 => {
                    if server.write_all(&from_client[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            read = server.read(&mut from_server) => match read {
                Ok(n) if n > 0 => {
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
