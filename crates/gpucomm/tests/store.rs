//! The rendezvous store: operations, token check, garbage, bounded waits.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gpucomm::store::{StoreClient, StoreServer};

#[test]
fn set_get_wait_add_barrier() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let addr = s.addr().to_string();
    let mut a = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
    a.set("k", b"v").unwrap();
    assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(a.get("missing").unwrap(), None);
    assert_eq!(a.add("c", 5).unwrap(), 5);
    assert_eq!(a.add("c", -2).unwrap(), 3);
    let addr2 = addr.clone();
    let h = std::thread::spawn(move || {
        let mut b = StoreClient::connect(&addr2, "tok", Duration::from_secs(5)).unwrap();
        let v = b.wait("later", Duration::from_secs(5)).unwrap();
        b.barrier("x", 2, Duration::from_secs(5)).unwrap();
        v
    });
    std::thread::sleep(Duration::from_millis(50));
    a.set("later", b"now").unwrap();
    a.barrier("x", 2, Duration::from_secs(5)).unwrap();
    assert_eq!(h.join().unwrap(), b"now");
}

/// A barrier name used again is a new barrier: each round waits for all
/// `n` (the counter was never reset, so every round after the first
/// passed at once).
#[test]
fn a_barrier_name_can_be_reused() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let addr = s.addr().to_string();
    let connect = || StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
    let (mut a, mut b) = (connect(), connect());
    for round in 0..3 {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|sc| {
            let a = &mut a;
            sc.spawn(move || {
                let r = a.barrier("again", 2, Duration::from_secs(10));
                tx.send(r.map_err(|e| e.to_string())).unwrap();
            });
            // Alone in the barrier, `a` waits.
            assert!(
                rx.recv_timeout(Duration::from_millis(300)).is_err(),
                "round {round}: the barrier let one of two through"
            );
            b.barrier("again", 2, Duration::from_secs(10)).unwrap();
            let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert!(r.is_ok(), "round {round}: {r:?}");
        });
    }
    // The store keeps no key per round.
    let keys = a.num_keys().unwrap();
    assert!(keys <= 2, "{keys} keys after three rounds");
    assert!(a.barrier("zero", 0, Duration::from_secs(1)).is_err());
}

#[test]
fn wait_is_bounded() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let mut a = StoreClient::connect(&s.addr().to_string(), "tok", Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    assert!(a.wait("never", Duration::from_millis(200)).is_err());
    assert!(t.elapsed() < Duration::from_secs(3));
}

/// Waits at the edges of `Duration`: zero and sub-millisecond timeouts end
/// in a timed-out error (no panic, no hang); `u64::MAX` s and
/// `Duration::MAX` wait until the key is set, and return it at once when
/// it is (no panic, no overflow).
#[test]
fn wait_takes_any_duration() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let addr = s.addr().to_string();
    let mut a = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
    for t in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(999),
    ] {
        let e = a.wait("never", t).unwrap_err();
        assert!(e.to_string().contains("not set within"), "{t:?}: {e}");
    }
    a.set("k", b"v").unwrap();
    for t in [
        Duration::ZERO,
        Duration::from_micros(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        assert_eq!(a.wait("k", t).unwrap(), b"v", "{t:?}");
    }
    for t in [Duration::from_secs(u64::MAX), Duration::MAX] {
        let key = format!("later{t:?}");
        let h = std::thread::spawn({
            let (addr, key) = (addr.clone(), key.clone());
            move || {
                let mut b = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                b.set(&key, b"now").unwrap();
            }
        });
        assert_eq!(a.wait(&key, t).unwrap(), b"now", "{t:?}");
        h.join().unwrap();
    }
}

/// A store that stops while a client waits closes the connection: the
/// client's error says so, and is no timeout (the store answered "not
/// found", which the client took for its 60 s passing at once).
#[test]
fn a_wait_on_a_store_that_stops_says_it_closed() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let mut a = StoreClient::connect(&s.addr().to_string(), "tok", Duration::from_secs(5)).unwrap();
    let h = std::thread::spawn(move || a.wait("never", Duration::from_secs(60)).unwrap_err());
    std::thread::sleep(Duration::from_millis(200));
    drop(s);
    let e = h.join().unwrap().to_string();
    assert!(
        e.contains("the store closed the connection") && !e.contains("not set within"),
        "{e}"
    );
}

/// A store named by a host name listens on every interface (the name may
/// resolve to loopback on rank 0's host and to a routable address elsewhere,
/// as Debian's `127.0.1.1 <hostname>`); an IP literal binds just that IP.
/// Another loopback address stands in for another interface.
#[test]
fn a_named_store_listens_on_every_interface() {
    let named = StoreServer::start("localhost:0", "tok").unwrap();
    let other = format!("127.0.0.2:{}", named.addr().port());
    let mut c = StoreClient::connect(&other, "tok", Duration::from_secs(5)).unwrap();
    c.set("k", b"v").unwrap();
    let literal = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let other = format!("127.0.0.2:{}", literal.addr().port());
    assert!(StoreClient::connect(&other, "tok", Duration::from_millis(300)).is_err());
}

/// The hello shares the connection's deadline: a store that comes up late
/// and never answers costs the timeout, not the timeout again on top.
#[test]
fn connect_is_bounded_by_one_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let t = Instant::now();
    let r = StoreClient::connect(&format!("127.0.0.1:{port}"), "tok", Duration::from_secs(2));
    let took = t.elapsed();
    assert!(r.is_err());
    assert!(took < Duration::from_millis(2900), "{took:?}");
    late.join().unwrap();
}

#[test]
fn wrong_token_is_dropped() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let err = match StoreClient::connect(&s.addr().to_string(), "nope", Duration::from_secs(2)) {
        Ok(_) => panic!("a wrong token was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("wrong job token"), "unclear error: {err}");
}

#[test]
fn garbage_and_oversized_lengths_are_dropped_and_the_store_keeps_serving() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    // Garbage first bytes.
    let mut g = TcpStream::connect(s.addr()).unwrap();
    g.write_all(&[0xff; 64]).unwrap();
    g.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        g.read(&mut buf).unwrap_or(0),
        0,
        "connection closed without a reply"
    );
    // A hello claiming a 4 GiB key.
    let mut o = TcpStream::connect(s.addr()).unwrap();
    o.write_all(&[1, 0xff, 0xff, 0xff, 0xff]).unwrap();
    o.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(o.read(&mut buf).unwrap_or(0), 0);
    // A hello claiming a 1 MiB token (at most 256 bytes): dropped at once,
    // not read (it was allocated and waited for).
    let mut big = TcpStream::connect(s.addr()).unwrap();
    big.write_all(&frame(1, b"", &[])[..5]).unwrap();
    big.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    assert_eq!(big.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(matches!(
        StoreClient::connect(
            &s.addr().to_string(),
            &"t".repeat(257),
            Duration::from_secs(1)
        ),
        Err(gpucomm::Error::InvalidArgument(_))
    ));
    // A stranger that sends nothing does not block others.
    let _silent = TcpStream::connect(s.addr()).unwrap();
    let mut a = StoreClient::connect(&s.addr().to_string(), "tok", Duration::from_secs(5)).unwrap();
    a.set("still", b"works").unwrap();
    assert_eq!(a.get("still").unwrap().as_deref(), Some(&b"works"[..]));
}

/// A stranger that sends a hello a byte at a time, each byte well within
/// the 5 s a read may take, is still dropped 5 s after it connected: the
/// bound is on the whole hello (it was per read, so such a client held a
/// server thread for as long as it kept trickling).
#[test]
fn a_trickled_hello_is_dropped_within_five_seconds() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let mut t = TcpStream::connect(s.addr()).unwrap();
    // A hello announcing a token of 256 bytes: 265 bytes to trickle.
    let mut hello = frame(1, b"", &[b'x'; 256]);
    hello.truncate(hello.len() - 1);
    t.set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let start = Instant::now();
    let mut closed = None;
    for b in &hello {
        if t.write_all(&[*b]).is_err() {
            closed = Some(start.elapsed());
            break;
        }
        let mut buf = [0u8; 1];
        match t.read(&mut buf) {
            Ok(0) => {
                closed = Some(start.elapsed());
                break;
            }
            Ok(_) => panic!("a reply to half a hello"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = Some(start.elapsed());
                break;
            }
        }
        if start.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    let took = closed.expect("the trickling stranger kept its connection past 8 s");
    assert!(took >= Duration::from_secs(4), "dropped early: {took:?}");
}

/// A request frame as the client writes it (op, key, value).
fn frame(op: u8, key: &[u8], val: &[u8]) -> Vec<u8> {
    let mut out = vec![op];
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(val.len() as u32).to_le_bytes());
    out.extend_from_slice(val);
    out
}

#[test]
fn delete_keys_and_num_keys() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let addr = s.addr().to_string();
    let mut a = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
    assert_eq!(a.num_keys().unwrap(), 0);
    for k in ["a", "b", "c"] {
        a.set(k, k.as_bytes()).unwrap();
    }
    a.add("n", 1).unwrap();
    assert_eq!(a.num_keys().unwrap(), 4);
    // Missing keys and repeats count once; the others stay.
    assert_eq!(a.delete_keys(&["a", "missing", "n", "a"]).unwrap(), 2);
    assert_eq!(a.num_keys().unwrap(), 2);
    assert_eq!(a.get("a").unwrap(), None);
    assert_eq!(a.get("b").unwrap().as_deref(), Some(&b"b"[..]));
    // A deleted counter starts again from zero.
    assert_eq!(a.add("n", 1).unwrap(), 1);
    assert_eq!(a.delete_keys::<&str>(&[]).unwrap(), 0);
    // A waiter for a deleted key waits for it to be set again.
    a.delete_keys(&["b"]).unwrap();
    let h = std::thread::spawn(move || {
        let mut b = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
        b.wait("b", Duration::from_secs(5)).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    a.set("b", b"again").unwrap();
    assert_eq!(h.join().unwrap(), b"again");
    // More keys than one request holds (1 MiB) go in several.
    let many: Vec<String> = (0..40_000).map(|i| format!("key-{i:024}")).collect();
    for k in many.iter().step_by(997) {
        a.set(k, b"").unwrap();
    }
    let before = a.num_keys().unwrap();
    assert_eq!(a.delete_keys(&many).unwrap(), 40_000usize.div_ceil(997));
    assert_eq!(a.num_keys().unwrap(), before - 40_000usize.div_ceil(997));
    // A key too long to be set is refused before anything is sent.
    let long = "k".repeat(gpucomm::store::MAX_KEY + 1);
    assert!(matches!(
        a.delete_keys(&[long]),
        Err(gpucomm::Error::InvalidArgument(_))
    ));
    assert_eq!(a.get("c").unwrap().as_deref(), Some(&b"c"[..]));
}

#[test]
fn a_malformed_delete_is_refused_and_deletes_nothing() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let mut a = StoreClient::connect(&s.addr().to_string(), "tok", Duration::from_secs(5)).unwrap();
    a.set("keep", b"1").unwrap();
    // One good key, then a length running past the end of the list.
    let mut list = Vec::new();
    list.extend_from_slice(&4u32.to_le_bytes());
    list.extend_from_slice(b"keep");
    list.extend_from_slice(&100u32.to_le_bytes());
    list.extend_from_slice(b"short");
    let mut raw = TcpStream::connect(s.addr()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&frame(1, b"", b"tok")).unwrap();
    let mut hello = [0u8; 5];
    raw.read_exact(&mut hello).unwrap();
    assert_eq!(hello[0], 0);
    raw.write_all(&frame(6, b"", &list)).unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).unwrap();
    assert_eq!(reply[0], 2, "refused");
    assert_eq!(&reply[5..], b"malformed key list");
    assert_eq!(a.get("keep").unwrap().as_deref(), Some(&b"1"[..]));
}
