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

#[test]
fn wait_is_bounded() {
    let s = StoreServer::start("127.0.0.1:0", "tok").unwrap();
    let mut a = StoreClient::connect(&s.addr().to_string(), "tok", Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    assert!(a.wait("never", Duration::from_millis(200)).is_err());
    assert!(t.elapsed() < Duration::from_secs(3));
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
    // A stranger that sends nothing does not block others.
    let _silent = TcpStream::connect(s.addr()).unwrap();
    let mut a = StoreClient::connect(&s.addr().to_string(), "tok", Duration::from_secs(5)).unwrap();
    a.set("still", b"works").unwrap();
    assert_eq!(a.get("still").unwrap().as_deref(), Some(&b"works"[..]));
}
