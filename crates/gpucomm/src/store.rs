//! The rendezvous store: a small TCP key-value server hosted by rank 0.
//!
//! Operations: `set`, `get`, `wait` (until a key exists, bounded), `add`
//! (atomic counter), `delete_keys`, `num_keys` and `barrier`. Every
//! connection must first present the job token (at most 256 bytes); a
//! connection that sends anything else or an oversized length is dropped,
//! and so is one whose hello has not arrived in full 5 s after it was
//! accepted (however it is cut up: a byte every few seconds gets no longer).
//! Every wait is bounded by the caller's timeout. A store that stops
//! (dropped by its owner) closes every connection without an answer, a
//! waiting one's included.
//!
//! Wire format (little endian): a request is `op u8 | key length u32 | key |
//! value length u32 | value`; a reply is `status u8 (0 ok, 1 not found or
//! timed out, 2 refused) | length u32 | value`. Keys are limited to 4 KiB and
//! values to 1 MiB, checked before anything is allocated. A delete carries
//! its keys in the value, each as `length u32 | key`, and is answered with
//! the number it removed (u64); `num_keys` is answered the same way.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Error;

const OP_HELLO: u8 = 1;
const OP_SET: u8 = 2;
const OP_GET: u8 = 3;
const OP_WAIT: u8 = 4;
const OP_ADD: u8 = 5;
const OP_DELETE: u8 = 6;
const OP_NUM_KEYS: u8 = 7;
/// Longest key accepted.
pub const MAX_KEY: usize = 4096;
/// Longest value accepted.
pub const MAX_VALUE: usize = 1 << 20;
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Constant-time comparison (the token is a secret).
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Default)]
struct Shared {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

/// The server side, run by rank 0 on a background thread; stops when dropped.
pub struct StoreServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StoreServer {
    /// Listens on `addr` (`host:port`; port 0 picks one) for connections
    /// presenting `token` (at most 256 bytes). An IP literal is bound as
    /// given; a host name binds every interface (IPv6 and IPv4 where the host
    /// has IPv6), as PyTorch's `TCPStore` does, since a name may resolve to
    /// a loopback address here and to a routable one on the other hosts.
    pub fn start(addr: &str, token: &str) -> Result<StoreServer, Error> {
        check_token(token)?;
        let listener = bind_store(addr).map_err(|e| Error::io(format!("store: bind {addr}"), e))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("store: local_addr", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("store: set_nonblocking", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let token = token.to_string();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gpucomm-store".into())
            .spawn(move || accept_loop(listener, token, shared, stop2))
            .map_err(|e| Error::io("store: spawn", e))?;
        Ok(StoreServer {
            addr: local,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Binds `addr` as [`StoreServer::start`] describes.
fn bind_store(addr: &str) -> std::io::Result<TcpListener> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return TcpListener::bind(addr); // its own error for a malformed one
    };
    let port: u16 = port
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad port"))?;
    if let Some(sa) = crate::netif::literal_addr(host, port)? {
        return TcpListener::bind(sa);
    }
    let any6 = || -> std::io::Result<TcpListener> {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV6, Type::STREAM, None)?;
        s.set_only_v6(false)?;
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
        s.listen(128)?;
        Ok(s.into())
    };
    any6().or_else(|_| TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)))
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, token: String, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((s, _)) => {
                let (token, shared, stop) = (token.clone(), shared.clone(), stop.clone());
                if let Ok(h) = std::thread::Builder::new()
                    .name("gpucomm-store-conn".into())
                    .spawn(move || {
                        let _ = serve(s, &token, &shared, &stop);
                    })
                {
                    workers.push(h);
                }
                workers.retain(|h| !h.is_finished());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    shared.changed.notify_all();
    // Connection threads notice `stop` within 100 ms; a stranger that never
    // sent its hello holds one for at most HELLO_TIMEOUT. Neither is joined:
    // the store must not delay its owner's exit.
    drop(workers);
}

/// A job token is at most [`crate::transport::tcp::MAX_TOKEN`] bytes (the
/// data connections' hello carries it too).
fn check_token(token: &str) -> Result<(), Error> {
    let max = crate::transport::tcp::MAX_TOKEN;
    if token.len() > max {
        return Err(Error::InvalidArgument(format!(
            "job token of {} bytes (at most {max})",
            token.len()
        )));
    }
    Ok(())
}

/// Reads from a socket until `until` in all, however the bytes arrive: a
/// peer that sends a byte at a time gets no more time than one that sends
/// nothing. Bounds the store's hello and the data connections' hello
/// (`crate::bootstrap`).
pub(crate) struct Bounded<'a> {
    pub s: &'a socket2::Socket,
    pub until: Instant,
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.s.set_read_timeout(Some(left))?;
        let mut s: &socket2::Socket = self.s;
        Read::read(&mut s, buf)
    }
}

/// Reads one request whose value holds at most `max_value` bytes.
fn read_frame(s: &mut impl Read, max_value: usize) -> std::io::Result<(u8, String, Vec<u8>)> {
    let mut op = [0u8; 5];
    s.read_exact(&mut op)?;
    let klen = u32::from_le_bytes(op[1..5].try_into().expect("4")) as usize;
    if klen > MAX_KEY {
        return Err(std::io::Error::other("key too long"));
    }
    let mut key = vec![0u8; klen];
    s.read_exact(&mut key)?;
    let mut vl = [0u8; 4];
    s.read_exact(&mut vl)?;
    let vlen = u32::from_le_bytes(vl) as usize;
    if vlen > max_value {
        return Err(std::io::Error::other("value too long"));
    }
    let mut val = vec![0u8; vlen];
    s.read_exact(&mut val)?;
    let key = String::from_utf8(key).map_err(|_| std::io::Error::other("key not utf-8"))?;
    Ok((op[0], key, val))
}

/// A delete's key list: `length u32 | key` each, every key UTF-8 and at most
/// [`MAX_KEY`] bytes; `None` if the bytes are not exactly such a list.
fn decode_keys(mut b: &[u8]) -> Option<Vec<&str>> {
    let mut keys = Vec::new();
    while !b.is_empty() {
        let (len, rest) = b.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if len > MAX_KEY || len > rest.len() {
            return None;
        }
        let (key, rest) = rest.split_at(len);
        keys.push(std::str::from_utf8(key).ok()?);
        b = rest;
    }
    Some(keys)
}

fn reply(s: &mut TcpStream, status: u8, v: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(5 + v.len());
    out.push(status);
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(v);
    s.write_all(&out)
}

/// Reads with a short timeout so the thread notices `stop`.
fn serve(mut s: TcpStream, token: &str, shared: &Shared, stop: &AtomicBool) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    // The hello holds a token (at most MAX_TOKEN bytes): a stranger's
    // claim of a larger one is dropped before anything is allocated. It
    // must arrive within HELLO_TIMEOUT in all, however it is cut up.
    let sock = socket2::SockRef::from(&s);
    let mut hello = Bounded {
        s: &sock,
        until: Instant::now() + HELLO_TIMEOUT,
    };
    let (op, _, val) = read_frame(&mut hello, crate::transport::tcp::MAX_TOKEN)?;
    if op != OP_HELLO || !ct_eq(&val, token.as_bytes()) {
        // Drop the connection without a word: a stray client learns nothing.
        return Ok(());
    }
    reply(&mut s, 0, &[])?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(());
        }
        // Wait for the first byte with a timeout, then read the frame.
        let mut peek = [0u8; 1];
        match s.peek(&mut peek) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        }
        s.set_read_timeout(Some(HELLO_TIMEOUT))?;
        let (op, key, val) = read_frame(&mut s, MAX_VALUE)?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        match op {
            OP_SET => {
                crate::lock(&shared.map).insert(key, val);
                shared.changed.notify_all();
                reply(&mut s, 0, &[])?;
            }
            OP_GET => {
                let v = crate::lock(&shared.map).get(&key).cloned();
                match v {
                    Some(v) => reply(&mut s, 0, &v)?,
                    None => reply(&mut s, 1, &[])?,
                }
            }
            OP_WAIT => {
                let ms = u64::from_le_bytes(
                    val.get(..8)
                        .and_then(|b| b.try_into().ok())
                        .unwrap_or([0; 8]),
                );
                let deadline = wait_deadline(Instant::now(), ms);
                let mut map = crate::lock(&shared.map);
                let found = loop {
                    if let Some(v) = map.get(&key) {
                        break Some(v.clone());
                    }
                    if stop.load(Ordering::Acquire) {
                        // Closed without an answer, as every connection of
                        // a stopped store: "not found" read as the wait's
                        // timeout passing, at once.
                        return Ok(());
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break None;
                    }
                    let wait = (deadline - now).min(Duration::from_millis(100));
                    map = shared
                        .changed
                        .wait_timeout(map, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                };
                drop(map);
                match found {
                    Some(v) => reply(&mut s, 0, &v)?,
                    None => reply(&mut s, 1, &[])?,
                }
            }
            OP_ADD => {
                let d = i64::from_le_bytes(
                    val.get(..8)
                        .and_then(|b| b.try_into().ok())
                        .unwrap_or([0; 8]),
                );
                let mut map = crate::lock(&shared.map);
                let cur = map
                    .get(&key)
                    .and_then(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                    .map(i64::from_le_bytes)
                    .unwrap_or(0);
                let new = cur.wrapping_add(d);
                map.insert(key, new.to_le_bytes().to_vec());
                drop(map);
                shared.changed.notify_all();
                reply(&mut s, 0, &new.to_le_bytes())?;
            }
            OP_DELETE => {
                let Some(keys) = decode_keys(&val) else {
                    reply(&mut s, 2, b"malformed key list")?;
                    return Ok(());
                };
                let mut map = crate::lock(&shared.map);
                let gone = keys.iter().filter(|k| map.remove(**k).is_some()).count();
                drop(map);
                reply(&mut s, 0, &(gone as u64).to_le_bytes())?;
            }
            OP_NUM_KEYS => {
                let n = crate::lock(&shared.map).len();
                reply(&mut s, 0, &(n as u64).to_le_bytes())?;
            }
            _ => {
                reply(&mut s, 2, b"unknown op")?;
                return Ok(());
            }
        }
    }
}

/// The milliseconds a wait of `timeout` asks the store for
/// ([`crate::comm::timeout_ms`]: rounded up, at least 1, at most
/// `u64::MAX`), and how long the client waits for the answer: the store
/// answers at its own deadline, so 2 s more (saturating).
fn wait_request(timeout: Duration) -> (u64, Duration) {
    let ms = crate::comm::timeout_ms(timeout);
    (
        ms,
        Duration::from_millis(ms).saturating_add(Duration::from_secs(2)),
    )
}

/// The store's deadline for a wait of `ms` milliseconds from `now`: as
/// asked, however long (it was cut to 24 h, and the client then told of a
/// key "not set within" the longer time it asked for); one too far for the
/// clock is a century away ([`crate::comm::deadline`]).
fn wait_deadline(now: Instant, ms: u64) -> Instant {
    crate::comm::deadline(now, Duration::from_millis(ms))
}

/// Connects to the first of `addrs` that accepts: each in turn (a blackholed
/// one costs at most 2 s a round), round after round until `deadline` (rank
/// 0 may start late). The error is the last address's.
fn connect_any(addrs: &[SocketAddr], deadline: Instant) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let mut last = None;
    loop {
        for sa in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let tried = Socket::new(Domain::for_address(*sa), Type::STREAM, None).and_then(|s| {
                s.connect_timeout(&(*sa).into(), left.min(Duration::from_secs(2)))?;
                Ok(s)
            });
            match tried {
                Ok(s) => return Ok(s.into()),
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() >= deadline {
            return Err(last.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why [`StoreClient::try_connect`] failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// Nothing accepted a connection at the store's address until the
    /// timeout (the last address's error).
    Unreachable(std::io::Error),
    /// Anything else: the address, the token, a refused hello.
    Other(Error),
}

/// A client of the store.
///
/// ```no_run
/// use std::time::Duration;
/// let server = gpucomm::store::StoreServer::start("127.0.0.1:0", "secret").unwrap();
/// let mut c = gpucomm::store::StoreClient::connect(&server.addr().to_string(), "secret", Duration::from_secs(5)).unwrap();
/// c.set("k", b"v").unwrap();
/// assert_eq!(c.wait("k", Duration::from_secs(1)).unwrap(), b"v");
/// ```
pub struct StoreClient {
    s: TcpStream,
    addr: String,
    /// A request failed after it was sent (its reply timed out or came
    /// short): a late reply may still arrive and would be read as the next
    /// request's, so the connection is shut and every later request fails.
    broken: bool,
}

impl StoreClient {
    /// Connects (retrying until `timeout`: rank 0 may start late) and
    /// presents the token.
    /// A name that resolves to several addresses (IPv6 and IPv4, several
    /// interfaces) is tried at each in turn.
    pub fn connect(addr: &str, token: &str, timeout: Duration) -> Result<StoreClient, Error> {
        Self::try_connect(addr, token, timeout).map_err(|e| match e {
            ConnectError::Unreachable(e) => Error::io(format!("connecting to store {addr}"), e),
            ConnectError::Other(e) => e,
        })
    }

    /// [`StoreClient::connect`], telling a store that nothing at `addr`
    /// answered for (no connection accepted until the timeout: not up
    /// yet, or gone) from every other failure.
    pub(crate) fn try_connect(
        addr: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<StoreClient, ConnectError> {
        check_token(token).map_err(ConnectError::Other)?;
        let addrs = crate::netif::resolve(addr)
            .map_err(|e| ConnectError::Other(Error::io(format!("store address {addr}"), e)))?;
        Self::connect_to(addr, &addrs, token, timeout)
    }

    /// [`StoreClient::try_connect`] to the addresses `addr` resolved to.
    fn connect_to(
        addr: &str,
        addrs: &[SocketAddr],
        token: &str,
        timeout: Duration,
    ) -> Result<StoreClient, ConnectError> {
        let deadline = crate::comm::deadline_after(timeout);
        let err = |d: String| {
            ConnectError::Other(Error::Io {
                context: format!("store {addr}"),
                source: std::io::Error::other(d),
            })
        };
        if addrs.is_empty() {
            return Err(err("the name resolves to no address".into()));
        }
        let s = connect_any(addrs, deadline).map_err(ConnectError::Unreachable)?;
        s.set_nodelay(true)
            .map_err(|e| ConnectError::Other(Error::io("store nodelay", e)))?;
        let mut c = StoreClient {
            s,
            addr: addr.to_string(),
            broken: false,
        };
        // The store drops a connection with a wrong token without a reply,
        // so a failed hello most likely means another job's token.
        // Within the same deadline as the connection (at least a moment,
        // for a connect that took it all).
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let (st, _) = c
            .request(OP_HELLO, "", token.as_bytes(), left)
            .map_err(|e| {
                err(format!(
                    "the store did not accept this rank's hello: wrong job token \
                     (GPUCOMM_TOKEN, or launcher variables that differ between ranks), \
                     or not a gpucomm store at this address ({e})"
                ))
            })?;
        if st != 0 {
            return Err(err("token refused".into()));
        }
        Ok(c)
    }

    /// The store address this client was given (`host:port`).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The local address of the connection (the IP peers can reach us at).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.s.local_addr().ok()
    }

    fn request(
        &mut self,
        op: u8,
        key: &str,
        val: &[u8],
        reply_within: Duration,
    ) -> Result<(u8, Vec<u8>), Error> {
        let ctx = |addr: &str, what: &str| format!("store {addr} ({what} {key:?})");
        if key.len() > MAX_KEY || val.len() > MAX_VALUE {
            return Err(Error::InvalidArgument(format!(
                "store key/value too long for {key:?}"
            )));
        }
        if self.broken {
            return Err(Error::io(
                ctx(&self.addr, "request"),
                std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the connection was shut after an earlier request failed mid-way",
                ),
            ));
        }
        let mut frame = Vec::with_capacity(9 + key.len() + val.len());
        frame.push(op);
        frame.extend_from_slice(&(key.len() as u32).to_le_bytes());
        frame.extend_from_slice(key.as_bytes());
        frame.extend_from_slice(&(val.len() as u32).to_le_bytes());
        frame.extend_from_slice(val);
        let r = self
            .exchange(&frame, reply_within)
            .map_err(|(what, e)| Error::io(ctx(&self.addr, what), e));
        if r.is_err() {
            // Whatever is in flight must not answer a later request.
            self.broken = true;
            let _ = self.s.shutdown(std::net::Shutdown::Both);
        }
        r
    }

    /// Sends one request `frame` and reads its reply, on a connection in
    /// step; a failure says which part failed.
    fn exchange(
        &mut self,
        frame: &[u8],
        reply_within: Duration,
    ) -> Result<(u8, Vec<u8>), (&'static str, std::io::Error)> {
        self.s
            .set_read_timeout(Some(reply_within))
            .map_err(|e| ("timeout", e))?;
        self.s.write_all(frame).map_err(|e| ("send", e))?;
        let mut h = [0u8; 5];
        self.s
            .read_exact(&mut h)
            .map_err(|e| ("reply (the store closed the connection or timed out)", e))?;
        let n = u32::from_le_bytes(h[1..5].try_into().expect("4")) as usize;
        if n > MAX_VALUE {
            return Err(("reply", std::io::Error::other("oversized reply")));
        }
        let mut v = vec![0u8; n];
        self.s.read_exact(&mut v).map_err(|e| ("reply", e))?;
        Ok((h[0], v))
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.request(OP_SET, key, value, Duration::from_secs(10))
            .map(|_| ())
    }

    /// The value of `key`, if set.
    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let (st, v) = self.request(OP_GET, key, &[], Duration::from_secs(10))?;
        Ok((st == 0).then_some(v))
    }

    /// Waits until `key` is set (at most `timeout`) and returns its value.
    pub fn wait(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, Error> {
        let (ms, reply_within) = wait_request(timeout);
        let (st, v) = self.request(OP_WAIT, key, &ms.to_le_bytes(), reply_within)?;
        if st != 0 {
            return Err(Error::Io {
                context: format!("store {}: waiting for {key:?}", self.addr),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("not set within {timeout:?}"),
                ),
            });
        }
        Ok(v)
    }

    /// Adds `delta` to the counter `key` (0 if unset) and returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64, Error> {
        let (_, v) = self.request(OP_ADD, key, &delta.to_le_bytes(), Duration::from_secs(10))?;
        let b: [u8; 8] = v
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::io("store add", std::io::Error::other("short reply")))?;
        Ok(i64::from_le_bytes(b))
    }

    /// Removes each of `keys` that is set and returns how many were. A
    /// waiter for a removed key goes on waiting for it to be set again.
    /// Long lists go in several requests of at most [`MAX_VALUE`] bytes.
    pub fn delete_keys<S: AsRef<str>>(&mut self, keys: &[S]) -> Result<usize, Error> {
        let mut gone = 0;
        let mut batch = Vec::new();
        for key in keys {
            let key = key.as_ref();
            if key.len() > MAX_KEY {
                return Err(Error::InvalidArgument(format!(
                    "store key too long: {} bytes (at most {MAX_KEY})",
                    key.len()
                )));
            }
            if batch.len() + 4 + key.len() > MAX_VALUE {
                gone += self.delete_batch(&batch)?;
                batch.clear();
            }
            batch.extend_from_slice(&(key.len() as u32).to_le_bytes());
            batch.extend_from_slice(key.as_bytes());
        }
        if !batch.is_empty() {
            gone += self.delete_batch(&batch)?;
        }
        Ok(gone)
    }

    fn delete_batch(&mut self, batch: &[u8]) -> Result<usize, Error> {
        let (st, v) = self.request(OP_DELETE, "", batch, Duration::from_secs(10))?;
        self.count_reply("delete", st, &v)
    }

    /// How many keys the store holds.
    pub fn num_keys(&mut self) -> Result<usize, Error> {
        let (st, v) = self.request(OP_NUM_KEYS, "", &[], Duration::from_secs(10))?;
        self.count_reply("num_keys", st, &v)
    }

    /// A reply holding a count (u64).
    fn count_reply(&self, what: &str, st: u8, v: &[u8]) -> Result<usize, Error> {
        let ctx = format!("store {} ({what})", self.addr);
        if st != 0 {
            let why = String::from_utf8_lossy(v).into_owned();
            return Err(Error::io(ctx, std::io::Error::other(why)));
        }
        v.get(..8)
            .and_then(|b| b.try_into().ok())
            .map(|b| u64::from_le_bytes(b) as usize)
            .ok_or_else(|| Error::io(ctx, std::io::Error::other("short reply")))
    }

    /// Returns once `n` clients have entered the barrier `name` (at most
    /// `timeout`).
    ///
    /// A name can be used again, as an MPI or Gloo barrier: each of the `n`
    /// clients enters every round once, and the `k`-th arrival in all
    /// belongs to round `ceil(k / n)` and waits until that round is full.
    /// After a timeout the name's rounds are out of step (the late client's
    /// arrival counts toward the next round): use a new name.
    pub fn barrier(&mut self, name: &str, n: usize, timeout: Duration) -> Result<(), Error> {
        let size = i64::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::InvalidArgument(format!("store barrier {name:?} of {n} clients"))
        })?;
        let key = format!("barrier/{name}");
        let arrival = self.add(&key, 1)?;
        if arrival < 1 {
            return Err(Error::InvalidArgument(format!(
                "store barrier {name:?}: its counter {key:?} holds {arrival} (changed by add?)"
            )));
        }
        let round = (arrival - 1) / size + 1;
        let done = |round: i64| format!("{key}/done/{round}");
        if arrival % size == 0 {
            self.set(&done(round), b"1")?;
            // Every client has left the round before (it entered this one),
            // so its key is read by no one any more.
            if round > 1 {
                self.delete_keys(&[done(round - 1)])?;
            }
        }
        self.wait(&done(round), timeout).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait's timeout reaches the store by the one conversion: zero and
    /// sub-millisecond values wait a millisecond (they waited 0, a check
    /// at once: a loop of them was a busy loop), a fraction rounds up,
    /// u64::MAX s and Duration::MAX saturate without a panic, and a long
    /// wait is as long as asked (the store cut it to 24 h).
    #[test]
    fn a_wait_timeout_takes_the_one_conversion() {
        let secs = Duration::from_secs;
        for (timeout, ms) in [
            (Duration::ZERO, 1),
            (Duration::from_nanos(1), 1),
            (Duration::from_micros(999), 1),
            (Duration::from_micros(1500), 2),
            (secs(25 * 3600), 25 * 3600 * 1000),
            (secs(u64::MAX), u64::MAX),
            (Duration::MAX, u64::MAX),
        ] {
            let (got, reply_within) = wait_request(timeout);
            assert_eq!(got, ms, "{timeout:?}");
            assert_eq!(got, crate::comm::timeout_ms(timeout), "{timeout:?}");
            // The answer is waited for, longer than the store waits.
            assert!(reply_within > Duration::from_millis(ms), "{timeout:?}");
        }
        let now = Instant::now();
        assert_eq!(wait_deadline(now, 25 * 3600 * 1000) - now, secs(25 * 3600));
        assert_eq!(wait_deadline(now, 1) - now, Duration::from_millis(1));
        // Too far for the clock: far away, and no panic.
        assert!(wait_deadline(now, u64::MAX) - now > secs(50 * 365 * 24 * 3600));
    }

    /// A reply that comes after the client stopped waiting for it is never
    /// read as the next request's: the connection is shut at the failure.
    /// It was read so: a get after a wait whose reply was late returned the
    /// wait's value.
    #[test]
    fn a_late_reply_does_not_answer_the_next_request() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (late_tx, late_rx) = std::sync::mpsc::channel::<()>();
        let fake = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let read_request = |s: &mut TcpStream| {
                let mut h = [0u8; 5];
                s.read_exact(&mut h).unwrap();
                let mut key = vec![0u8; u32::from_le_bytes(h[1..5].try_into().unwrap()) as usize];
                s.read_exact(&mut key).unwrap();
                let mut n = [0u8; 4];
                s.read_exact(&mut n).unwrap();
                let mut val = vec![0u8; u32::from_le_bytes(n) as usize];
                s.read_exact(&mut val).unwrap();
                h[0]
            };
            let reply = |s: &mut TcpStream, v: &[u8]| {
                let mut r = vec![0u8];
                r.extend_from_slice(&(v.len() as u32).to_le_bytes());
                r.extend_from_slice(v);
                s.write_all(&r).unwrap();
            };
            assert_eq!(read_request(&mut s), OP_HELLO);
            reply(&mut s, b"");
            assert_eq!(read_request(&mut s), OP_WAIT);
            // Answered only once the client has given up on it.
            late_rx.recv().unwrap();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                reply(&mut s, b"the wait's value")
            }));
        });
        let mut c = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
        // The fake store never answers in time: the read gives up after the
        // wait's millisecond and its 2 s margin.
        assert!(c.wait("k", Duration::from_millis(1)).is_err());
        late_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let got = c.get("other");
        assert!(
            got.as_ref()
                .is_err_and(|e| e.to_string().contains("earlier request failed")),
            "{got:?}"
        );
        fake.join().unwrap();
    }

    /// A name whose first address refuses (a store listening on IPv4 only
    /// while the name lists IPv6 first) connects through the next one; only
    /// the first was tried, until the timeout.
    #[test]
    fn every_resolved_address_is_tried() {
        let server = StoreServer::start("127.0.0.1:0", "tok").unwrap();
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let t = Instant::now();
        let mut c = StoreClient::connect_to(
            "both",
            &[dead, server.addr()],
            "tok",
            Duration::from_secs(3),
        )
        .unwrap();
        c.set("k", b"v").unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // None accepting: the last error, within the timeout.
        let t = Instant::now();
        let e = StoreClient::connect_to("none", &[dead, dead], "tok", Duration::from_millis(300))
            .err()
            .expect("nothing listens");
        assert!(matches!(e, ConnectError::Unreachable(_)), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(StoreClient::connect_to("empty", &[], "tok", Duration::from_secs(1)).is_err());
    }
}
