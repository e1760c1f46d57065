//! Sending one outbound HTTP request to addresses the policy already
//! checked: the host resolves the name itself, and this module connects to
//! exactly the checked `SocketAddr`s — there is no second lookup between
//! the check and the connection, so a name cannot re-resolve (DNS
//! rebinding) to an address the policy never saw.
//!
//! TLS (for `https`) verifies the server against the Mozilla roots
//! (`webpki-roots`) under the request's host name, as wasmtime-wasi-http's
//! default sender does; HTTP/1.1 only.

use std::{
    future::Future,
    net::SocketAddr,
    pin::{pin, Pin},
    sync::Arc,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};
use tokio_rustls::rustls::{self, pki_types::ServerName};
use wasmtime_wasi_http::{io::TokioIo, Error as HttpErrorCode, WasiBody};

/// The connection's I/O future, handed back with the response.
pub(crate) type IoFuture = Box<dyn Future<Output = Result<(), HttpErrorCode>> + Send>;

/// The three request timeouts, already clamped to the job's deadline.
#[derive(Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) first_byte: Duration,
    pub(crate) between_bytes: Duration,
}

/// Every address `host:port` resolves to, without brackets around IPv6.
/// An IP literal is returned as is (no lookup).
pub(crate) async fn resolve(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, HttpErrorCode> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
        Err(_) => Err(HttpErrorCode::DnsTimeout),
        Ok(Err(e)) => Err(HttpErrorCode::DnsError {
            rcode: Some(e.to_string()),
            info_code: None,
        }),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(HttpErrorCode::DestinationNotFound)
            } else {
                Ok(addrs)
            }
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T> Stream for T where T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}

/// Connects to the first of `addrs` that answers within the connect
/// timeout (shared by all attempts), adds TLS when `https`, and sends the
/// request over HTTP/1.1. `host` is the request's host (no brackets): the
/// TLS server name.
pub(crate) async fn send(
    mut request: http::Request<WasiBody>,
    addrs: &[SocketAddr],
    host: &str,
    https: bool,
    timeouts: Timeouts,
) -> Result<(http::Response<WasiBody>, IoFuture), HttpErrorCode> {
    let connect = async {
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(HttpErrorCode::Connect(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to")
        })))
    };
    let tcp = tokio::time::timeout(timeouts.connect, connect)
        .await
        .map_err(|_| HttpErrorCode::ConnectionTimeout)??;
    let stream: Box<dyn Stream> = if https {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ServerName::from(ip),
            Err(_) => ServerName::try_from(host.to_string())?,
        };
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp);
        Box::new(
            tokio::time::timeout(timeouts.connect, tls)
                .await
                .map_err(|_| HttpErrorCode::ConnectionTimeout)?
                .map_err(HttpErrorCode::Tls)?,
        )
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = tokio::time::timeout(
        timeouts.connect,
        hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| HttpErrorCode::ConnectionTimeout)??;

    // The request line carries only the path: scheme and authority are for
    // proxies (the `host` header names the server).
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str)
        .to_string();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| HttpErrorCode::HttpRequestUriInvalid)?;

    let first_byte = timeouts.first_byte;
    let between = timeouts.between_bytes.max(Duration::from_nanos(1));
    let send = async move {
        let response = tokio::time::timeout(first_byte, sender.send_request(request))
            .await
            .map_err(|_| HttpErrorCode::ConnectionReadTimeout)??;
        let mut timeout = tokio::time::interval(between);
        timeout.reset();
        Ok::<_, HttpErrorCode>(
            response.map(|incoming| TimedBody { incoming, timeout }.boxed_unsync()),
        )
    };
    let mut send = pin!(send);
    let mut conn = Some(conn);
    // Drive the connection while waiting for the response head.
    let response = std::future::poll_fn(|cx| match send.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(r),
        Poll::Pending => {
            let Some(fut) = conn.as_mut() else {
                return Poll::Pending;
            };
            let done = ready!(Pin::new(fut).poll(cx));
            conn = None;
            match done {
                Ok(()) => send.as_mut().poll(cx),
                Err(e) => Poll::Ready(Err(HttpErrorCode::from(e))),
            }
        }
    })
    .await?;
    let io = async move {
        match conn {
            None => Ok(()),
            Some(conn) => conn.await.map_err(|e| {
                if e.is_timeout() {
                    HttpErrorCode::HttpResponseTimeout
                } else {
                    HttpErrorCode::from(e)
                }
            }),
        }
    };
    Ok((response, Box::new(io)))
}

/// A response body that fails when no bytes arrive for `between_bytes`.
struct TimedBody {
    incoming: hyper::body::Incoming,
    timeout: tokio::time::Interval,
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = HttpErrorCode;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpErrorCode>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                HttpErrorCode::HttpResponseTimeout
            } else {
                HttpErrorCode::from(e)
            }))),
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                Poll::Ready(Some(Err(HttpErrorCode::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
