//! The server's doors: how connections are let in, kept and let go, so that no client, signed
//! in or not, can hold the API down with connections it opens and leaves open.
//!
//! - [`serve`] is the accept loop. Every connection counts against an overall cap and against
//!   its client address's cap ([`Doors::admit`]). At a cap, the oldest connection (of that
//!   address, or of any for the overall cap) with no request in flight is let go: a flood of idle
//!   or slow connections displaces only connections that are doing nothing, so a real request
//!   (a health check, a signed-in client) still gets in. When every counted connection has a
//!   request in flight, the new one is refused at once with `503` and a JSON body saying which
//!   cap it met.
//! - hyper's `header_read_timeout` closes a connection that has not sent a request's whole head
//!   in time. Its clock starts as soon as the connection waits for a request, so it is also the
//!   idle (keep-alive) timeout between requests.
//! - tower-http's `RequestBodyTimeoutLayer` fails a body that stalls (the API answers `408`),
//!   and its `TimeoutLayer` answers `503` when a request is not answered within its budget.
//! - [`raise_descriptor_limit`] lifts the soft `RLIMIT_NOFILE` to the hard one, and the overall
//!   cap stays well below it, so accepting never runs out of descriptors.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use clap::Args;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tower::ServiceExt;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use crate::Failure;

/// Descriptors kept for everything but connections: the data directory, SQLite, logs, steps'
/// sandboxes and their pipes.
const KEPT_FOR_THE_ENGINE: u64 = 1024;

/// The overall cap when none is given: this, or half the descriptors this process may open,
/// whichever is lower.
const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// How long the accept loop waits when accepting failed (out of descriptors, say): the error
/// passes as connections close, and retrying at once would only spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// `overture serve`'s limits on connections and the time they may take.
#[derive(Args, Debug, Clone)]
pub struct DoorArgs {
    /// At most this many connections open at once, from every client together [default: 4096,
    /// or half the process's descriptor limit if lower].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,
    /// At most this many connections open at once from one client address.
    #[arg(long, value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections_per_address: u64,
    /// Seconds a connection has to send a request's whole head (request line and headers); also
    /// how long a connection may wait idle between requests.
    #[arg(long, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,
    /// Seconds a request's body may stall between two pieces before the request is answered
    /// 408.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout: u64,
    /// Seconds a request may take, its body included, before it is answered 503 (a stream of
    /// events is answered at once and then runs as long as it needs).
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout: u64,
}

/// The caps, checked against the descriptors this process may open.
#[derive(Clone, Copy, Debug)]
struct Caps {
    overall: usize,
    per_address: usize,
}

/// [`DoorArgs`] checked, with the descriptor limit raised: what [`serve`] holds connections to.
#[derive(Clone, Debug)]
pub struct Limits {
    caps: Caps,
    header_timeout: Duration,
    body_timeout: Duration,
    request_timeout: Duration,
}

impl DoorArgs {
    /// Raises the descriptor limit ([`raise_descriptor_limit`]) and checks the caps against it;
    /// a cap the process could not hold is bad input naming its flag.
    pub fn check(&self) -> Result<Limits, Failure> {
        let descriptors = raise_descriptor_limit()
            .map_err(|e| Failure::Engine(anyhow::anyhow!("reading RLIMIT_NOFILE: {e}")))?;
        let caps = self.caps(descriptors)?;
        tracing::info!(
            max_connections = caps.overall,
            max_connections_per_address = caps.per_address,
            descriptors,
            "connection caps"
        );
        Ok(Limits {
            caps,
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            request_timeout: Duration::from_secs(self.request_timeout),
        })
    }

    fn caps(&self, descriptors: u64) -> Result<Caps, Failure> {
        let usable = descriptors.saturating_sub(KEPT_FOR_THE_ENGINE);
        let overall = match self.max_connections {
            None => (DEFAULT_MAX_CONNECTIONS as u64).min(descriptors / 2),
            Some(n) if n <= usable => n,
            Some(n) => {
                return Err(Failure::BadInput(format!(
                    "--max-connections {n}: this process may open {descriptors} descriptors \
                     (RLIMIT_NOFILE) and keeps {KEPT_FOR_THE_ENGINE} for the engine; give at most \
                     {usable}, or raise the limit (ulimit -n)"
                )))
            }
        };
        let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(Caps {
            overall: as_usize(overall.max(1)),
            per_address: as_usize(self.max_connections_per_address),
        })
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit; returns the soft
/// limit in force.
pub fn raise_descriptor_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the rlimit it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the rlimit it is given; raising the soft limit up to the
        // hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

/// Serves `app` on `listener` within `limits` until `stop` resolves; then closes the listener
/// (the port refuses new connections), lets every connection finish the request it is
/// answering, within the time a request may take, and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
) {
    let caps = limits.caps;
    let app = app
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            limits.request_timeout,
        ))
        .layer(RequestBodyTimeoutLayer::new(limits.body_timeout));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let doors = Arc::new(Doors {
        caps,
        open: Mutex::new(Open::default()),
    });
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "could not accept a connection");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let ticket = match doors.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(refusal) => {
                refuse(stream, refusal, caps);
                continue;
            }
        };
        let in_flight = Arc::clone(&ticket.in_flight);
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = Busy::new(&in_flight);
            let app = app.clone();
            async move {
                let response = app.oneshot(request).await?;
                // The answer's body may stream for long (Server-Sent Events): the connection is
                // busy until hyper has sent it all and dropped it.
                Ok::<_, Infallible>(
                    response.map(|body| Body::new(body.map_frame(move |frame| busy.keep(frame)))),
                )
            }
        });
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let mut ticket = ticket;
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                // Either: closes at once when no request is in flight, else after its answer.
                _ = &mut ticket.let_go => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                () = async { let _ = stopped.wait_for(|stopping| *stopping).await; } => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                // Clients going away, and the header timeout, end here: no fault of the server.
                tracing::debug!(%error, %peer, "connection ended");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // A request has this long to be answered anyway; a stream of events that outlasts it is
    // cut, as the server's end would cut it.
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.request_timeout, finished)
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "connections still busy when the server stopped were closed"
        );
    }
}

/// A request in flight on a connection, counted while it lives.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(in_flight: &Arc<AtomicUsize>) -> Self {
        in_flight.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(in_flight))
    }

    /// Passes a frame through; the body that holds this keeps the connection busy.
    fn keep<T>(&self, frame: T) -> T {
        frame
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Which cap a refused connection met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    PerAddress,
    Overall,
}

/// Answers a refused connection with `503` and closes it. A new connection's send buffer is
/// empty, so the answer goes out in one write without waiting on the client.
fn refuse(stream: TcpStream, refusal: Refusal, caps: Caps) {
    let message = match refusal {
        Refusal::PerAddress => format!(
            "too many connections from your address ({} at most, each with a request in flight); \
             try again later",
            caps.per_address
        ),
        Refusal::Overall => format!(
            "the server holds as many connections as it may ({}, each with a request in \
             flight); try again later",
            caps.overall
        ),
    };
    let body = serde_json::json!({ "code": "unavailable", "message": message }).to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
    // What the client already sent is read away before the close: a socket closed with unread
    // bytes is reset, and the client's stack would drop the answer with it. Only what has
    // arrived: the refusal never waits on the client.
    let mut unread = [0u8; 4096];
    for _ in 0..16 {
        match stream.try_read(&mut unread) {
            Ok(read) if read > 0 => continue,
            _ => break,
        }
    }
    tracing::debug!(?refusal, "refused a connection");
}

/// The connections open now, and the caps they are held to.
struct Doors {
    caps: Caps,
    open: Mutex<Open>,
}

/// Every counted connection, oldest first, and how many each address holds.
#[derive(Default)]
struct Open {
    next: u64,
    connections: BTreeMap<u64, Connection>,
    per_address: HashMap<IpAddr, usize>,
}

struct Connection {
    address: IpAddr,
    in_flight: Arc<AtomicUsize>,
    let_go: oneshot::Sender<()>,
}

/// A counted connection: its count is given back when the connection's task drops it.
struct Ticket {
    doors: Arc<Doors>,
    id: u64,
    in_flight: Arc<AtomicUsize>,
    /// Fires when the connection is let go to make room for a newer one.
    let_go: oneshot::Receiver<()>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.doors.lock().remove(self.id);
    }
}

impl Doors {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a new connection from `address`, letting an idle one go when a cap is reached,
    /// or refuses it when every connection that could make room has a request in flight.
    fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Ticket, Refusal> {
        let mut open = self.lock();
        let of_address = open.per_address.get(&address).copied().unwrap_or(0);
        if of_address >= self.caps.per_address && !open.let_go_oldest_idle(Some(address)) {
            return Err(Refusal::PerAddress);
        }
        if open.connections.len() >= self.caps.overall && !open.let_go_oldest_idle(None) {
            return Err(Refusal::Overall);
        }
        let id = open.next;
        open.next += 1;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (let_go, on_let_go) = oneshot::channel();
        open.connections.insert(
            id,
            Connection {
                address,
                in_flight: Arc::clone(&in_flight),
                let_go,
            },
        );
        *open.per_address.entry(address).or_default() += 1;
        Ok(Ticket {
            doors: Arc::clone(self),
            id,
            in_flight,
            let_go: on_let_go,
        })
    }
}

impl Open {
    /// Lets go the oldest connection (of `address`, or of any) with no request in flight; false
    /// when there is none.
    fn let_go_oldest_idle(&mut self, address: Option<IpAddr>) -> bool {
        let idle = self.connections.iter().find(|(_, c)| {
            address.is_none_or(|a| a == c.address) && c.in_flight.load(Ordering::SeqCst) == 0
        });
        let Some(id) = idle.map(|(id, _)| *id) else {
            return false;
        };
        if let Some(connection) = self.remove(id) {
            // Its task may have ended already: then there is nothing left to let go.
            let _ = connection.let_go.send(());
        }
        true
    }

    fn remove(&mut self, id: u64) -> Option<Connection> {
        let connection = self.connections.remove(&id)?;
        if let Some(count) = self.per_address.get_mut(&connection.address) {
            *count -= 1;
            if *count == 0 {
                self.per_address.remove(&connection.address);
            }
        }
        Some(connection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doors(overall: usize, per_address: usize) -> Arc<Doors> {
        Arc::new(Doors {
            caps: Caps {
                overall,
                per_address,
            },
            open: Mutex::new(Open::default()),
        })
    }

    fn at(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn an_idle_connection_makes_room_and_a_busy_one_does_not() {
        let doors = doors(3, 2);
        let mut first = doors.admit(at(1)).expect("admitted");
        let second = doors.admit(at(1)).expect("admitted");
        let _busy = Busy::new(&second.in_flight);

        let third = doors.admit(at(1)).expect("the idle first made room");
        assert!(first.let_go.try_recv().is_ok(), "the first was let go");
        let _also_busy = Busy::new(&third.in_flight);
        assert_eq!(doors.admit(at(1)).err(), Some(Refusal::PerAddress));

        let other = doors.admit(at(2)).expect("another address has room");
        let _busy_too = Busy::new(&other.in_flight);
        assert_eq!(doors.admit(at(3)).err(), Some(Refusal::Overall));
        drop(first);
        assert_eq!(doors.lock().connections.len(), 3, "counted once each");
    }

    #[test]
    fn a_ticket_dropped_gives_its_count_back() {
        let doors = doors(1, 1);
        let ticket = doors.admit(at(1)).expect("admitted");
        let _busy = Busy::new(&ticket.in_flight);
        assert!(doors.admit(at(1)).is_err());
        drop(_busy);
        drop(ticket);
        assert!(doors.lock().per_address.is_empty());
        assert!(doors.admit(at(1)).is_ok());
    }

    #[test]
    fn a_cap_above_the_descriptor_limit_is_refused_naming_the_flag() {
        let args = DoorArgs {
            max_connections: Some(50_000),
            max_connections_per_address: 256,
            header_timeout: 10,
            body_timeout: 30,
            request_timeout: 60,
        };
        let error = args.caps(20_000).expect_err("too many").to_string();
        assert!(
            error.contains("--max-connections 50000") && error.contains("18976"),
            "{error}"
        );
        let defaulted = DoorArgs {
            max_connections: None,
            ..args
        };
        assert_eq!(defaulted.caps(1024).expect("capped").overall, 512);
        assert_eq!(defaulted.caps(1 << 20).expect("capped").overall, 4096);
    }
}
