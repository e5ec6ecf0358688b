//! The TCP transport: one non-blocking socket per (peer, channel).
//!
//! Wire format (all integers little endian):
//!
//! ```text
//! hello (connector -> acceptor, once):
//!   magic u32 = "GPCH" | version u16 | token length u16 | from rank u32 | channel u32 | token bytes (<= 256)
//! frame header (48 bytes), then `len` payload bytes:
//!   magic u32 = "GPCM" | version u16 | kind u8 (1 data, 2 desc) | flags u8 (0)
//!   | seq u64 | desc [u64; 2] | len u64 | reserved u64
//! ```
//!
//! A receiver reads exactly one header, checks magic, version, kind, the
//! operation descriptor and `len == posted length` *before* reading any
//! payload, then reads the payload straight into the destination (receive)
//! or through a fixed staging buffer (receive-and-reduce). Nothing is ever
//! allocated from a length read off the wire.

#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::Socket;

use super::{Link, MsgKind, OpDesc, RecvReq, SendReq, WaitHandle, XferState, ZeroCopy};
use crate::error::{LinkError, TransportKind};

pub(crate) const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"GPCM");
pub(crate) const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"GPCH");
pub(crate) const WIRE_VERSION: u16 = 1;
pub(crate) const HDR: usize = 48;
const STAGE: usize = 256 * 1024;
/// Largest token accepted in a hello.
pub(crate) const MAX_TOKEN: usize = 256;

pub(crate) fn encode_header(kind: MsgKind, seq: u64, desc: &OpDesc, len: u64) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    h[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&WIRE_VERSION.to_le_bytes());
    h[6] = match kind {
        MsgKind::Data => 1,
        MsgKind::Desc => 2,
    };
    let d = desc.encode();
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&d[0].to_le_bytes());
    h[24..32].copy_from_slice(&d[1].to_le_bytes());
    h[32..40].copy_from_slice(&len.to_le_bytes());
    h
}

/// A parsed frame header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub kind: u8,
    pub seq: u64,
    pub desc: OpDesc,
    pub len: u64,
}

pub(crate) fn decode_header(h: &[u8; HDR]) -> Result<FrameHeader, LinkError> {
    let word = |a: usize| u64::from_le_bytes(h[a..a + 8].try_into().expect("8 bytes"));
    let magic = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    if magic != FRAME_MAGIC {
        return Err(LinkError::protocol(format!(
            "bad frame magic {magic:#010x}"
        )));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != WIRE_VERSION {
        return Err(LinkError::protocol(format!(
            "wire version {version}, this build speaks {WIRE_VERSION}"
        )));
    }
    if !(1..=2).contains(&h[6]) || h[7] != 0 {
        return Err(LinkError::protocol(format!(
            "bad frame kind {} / flags {}",
            h[6], h[7]
        )));
    }
    Ok(FrameHeader {
        kind: h[6],
        seq: word(8),
        desc: OpDesc::decode([word(16), word(24)]),
        len: word(32),
    })
}

pub(crate) fn encode_hello(token: &str, rank: u32, channel: u32) -> Vec<u8> {
    let t = token.as_bytes();
    let mut v = Vec::with_capacity(16 + t.len());
    v.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    v.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    v.extend_from_slice(&(t.len() as u16).to_le_bytes());
    v.extend_from_slice(&rank.to_le_bytes());
    v.extend_from_slice(&channel.to_le_bytes());
    v.extend_from_slice(t);
    v
}

/// Reads and checks a hello from a blocking socket with a read timeout set.
/// Returns `(rank, channel)`.
pub(crate) fn read_hello(s: &mut impl io::Read, token: &str) -> io::Result<(u32, u32)> {
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    let magic = u32::from_le_bytes(h[0..4].try_into().expect("4"));
    let version = u16::from_le_bytes([h[4], h[5]]);
    let tlen = u16::from_le_bytes([h[6], h[7]]) as usize;
    if magic != HELLO_MAGIC || version != WIRE_VERSION || tlen > MAX_TOKEN {
        return Err(io::Error::other("bad hello"));
    }
    let mut t = [0u8; MAX_TOKEN];
    s.read_exact(&mut t[..tlen])?;
    if !crate::store::ct_eq(&t[..tlen], token.as_bytes()) {
        return Err(io::Error::other("wrong job token"));
    }
    Ok((
        u32::from_le_bytes(h[8..12].try_into().expect("4")),
        u32::from_le_bytes(h[12..16].try_into().expect("4")),
    ))
}

/// Socket options every data connection gets.
pub(crate) fn tune_socket(s: &Socket) -> io::Result<()> {
    s.set_tcp_nodelay(true)?;
    let _ = s.set_send_buffer_size(4 << 20);
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true)
}

struct RecvChan {
    hdr: [u8; HDR],
    stage_fill: usize,
}

/// A link over TCP sockets, one per channel.
pub(crate) struct TcpLink {
    peer: usize,
    socks: Vec<Socket>,
    recv: Vec<RecvChan>,
    stage: Vec<u64>,
}

impl TcpLink {
    pub fn new(peer: usize, socks: Vec<Socket>) -> Self {
        let n = socks.len();
        TcpLink {
            peer,
            socks,
            recv: (0..n)
                .map(|_| RecvChan {
                    hdr: [0; HDR],
                    stage_fill: 0,
                })
                .collect(),
            stage: vec![0u64; STAGE / 8],
        }
    }

    fn closed(&self, e: Option<io::Error>) -> LinkError {
        match e {
            None => LinkError::gone(format!("peer {} closed the connection", self.peer)),
            Some(e) => LinkError::gone(format!("connection to peer {}: {e}", self.peer)),
        }
    }

    /// Non-blocking read into `buf`; Ok(0) means "nothing now".
    fn read_some(&self, ch: usize, buf: &mut [u8]) -> Result<usize, LinkError> {
        if buf.is_empty() {
            return Ok(0);
        }
        // SAFETY: u8 and MaybeUninit<u8> have one layout; recv only writes.
        let ubuf = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        match self.socks[ch].recv(ubuf) {
            Ok(0) => Err(self.closed(None)),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(self.closed(Some(e))),
        }
    }

    fn write_some(&self, ch: usize, bufs: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        match self.socks[ch].send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(self.closed(Some(e))),
        }
    }
}

impl Link for TcpLink {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn zero_copy_ok(&self, _zc: &ZeroCopy) -> bool {
        false
    }

    fn poll_send(
        &mut self,
        ch: usize,
        req: &SendReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError> {
        let hdr = encode_header(req.kind, req.seq, &req.desc, req.len as u64);
        let data: &[u8] = if req.len == 0 {
            &[]
        } else {
            // SAFETY: the engine guarantees req.data is valid for req.len bytes.
            unsafe { std::slice::from_raw_parts(req.data, req.len) }
        };
        loop {
            // st.partial: header bytes written; st.done: payload bytes written.
            if st.partial >= HDR && st.done >= req.len {
                return Ok(true);
            }
            let n = if st.partial < HDR {
                self.write_some(ch, &[IoSlice::new(&hdr[st.partial..]), IoSlice::new(data)])?
            } else {
                self.write_some(ch, &[IoSlice::new(&data[st.done..])])?
            };
            if n == 0 {
                return Ok(false);
            }
            let h = (HDR - st.partial.min(HDR)).min(n);
            st.partial += h;
            st.done += n - h;
            st.started = true;
        }
    }

    fn poll_recv(
        &mut self,
        ch: usize,
        req: &RecvReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError> {
        if !st.started {
            let mut hdr = self.recv[ch].hdr;
            let n = self.read_some(ch, &mut hdr[st.partial..])?;
            self.recv[ch].hdr = hdr;
            st.partial += n;
            if st.partial < HDR {
                return Ok(false);
            }
            let h = decode_header(&hdr)?;
            if h.desc != req.desc {
                return Err(LinkError::mismatch(
                    req.desc.to_string(),
                    h.desc.to_string(),
                ));
            }
            let want = match req.kind {
                MsgKind::Data => 1,
                MsgKind::Desc => 2,
            };
            if h.kind != want {
                return Err(LinkError::mismatch(
                    format!("{} expecting a {:?} message", req.desc, req.kind),
                    format!("{} sending frame kind {}", h.desc, h.kind),
                ));
            }
            if h.len != req.len as u64 {
                return Err(LinkError::protocol(format!(
                    "frame of {} bytes for a receive of {} bytes",
                    h.len, req.len
                )));
            }
            st.started = true;
            self.recv[ch].stage_fill = 0;
        }
        loop {
            if st.done >= req.len {
                return Ok(true);
            }
            match req.reduce {
                None => {
                    // SAFETY: dst is valid for req.len bytes (engine contract).
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(req.dst.add(st.done), req.len - st.done)
                    };
                    let n = self.read_some(ch, dst)?;
                    if n == 0 {
                        return Ok(false);
                    }
                    st.done += n;
                }
                Some((src, r)) => {
                    let piece = (req.len - st.done).min(STAGE);
                    let fill = self.recv[ch].stage_fill;
                    let stage = self.stage.as_mut_ptr() as *mut u8;
                    // SAFETY: stage holds STAGE bytes >= piece.
                    let sbuf =
                        unsafe { std::slice::from_raw_parts_mut(stage.add(fill), piece - fill) };
                    let n = self.read_some(ch, sbuf)?;
                    if n == 0 {
                        return Ok(false);
                    }
                    self.recv[ch].stage_fill += n;
                    if self.recv[ch].stage_fill == piece {
                        // SAFETY: dst/src valid for req.len bytes (engine
                        // contract), stage for piece bytes, 8-aligned; stage
                        // does not overlap dst.
                        unsafe { r.apply(req.dst.add(st.done), src.add(st.done), stage, piece) };
                        st.done += piece;
                        self.recv[ch].stage_fill = 0;
                    }
                }
            }
        }
    }

    /// The peer closed the connection (its process exited) when a socket
    /// reads end-of-file with nothing pending; pending bytes are left for
    /// the reads (the peer may have written everything before it left).
    fn check_peer(&mut self) -> Result<(), LinkError> {
        for s in &self.socks {
            // MSG_PEEK leaves the byte in the socket; MSG_DONTWAIT keeps the
            // call from blocking.
            let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
            match s.recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
                Ok(0) => return Err(self.closed(None)),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(self.closed(Some(e))),
            }
        }
        Ok(())
    }

    fn wait_handle(&self) -> WaitHandle {
        WaitHandle::Fd(self.socks[0].as_raw_fd())
    }

    fn shutdown(&mut self) {
        for s in &self.socks {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Connects to `addr`, retrying until `deadline` (the peer may not listen
/// yet) unless `give_up` says otherwise between tries.
pub(crate) fn connect_retry(
    addr: &std::net::SocketAddr,
    deadline: Instant,
    give_up: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<Socket> {
    let mut last = None;
    while Instant::now() < deadline {
        let s = Socket::new(
            socket2::Domain::for_address(*addr),
            socket2::Type::STREAM,
            None,
        )?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        match s.connect_timeout(&(*addr).into(), left.min(Duration::from_secs(2))) {
            Ok(()) => return Ok(s),
            Err(e) => last = Some(e),
        }
        give_up()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "connect timed out")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{DataType, Reducer};
    use crate::transport::RecvReq;
    use gpucomm_algo::ReduceOp;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    fn desc(count: u64) -> OpDesc {
        OpDesc {
            coll: 1,
            dtype: DataType::F32.code(),
            op: 1,
            algo: 1,
            arg: 0,
            count,
        }
    }

    /// A TcpLink whose peer is a raw socket the test writes anything into.
    fn raw_pair() -> (TcpLink, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let s = Socket::from(s);
        tune_socket(&s).unwrap();
        (TcpLink::new(1, vec![s]), raw)
    }

    fn recv_until_done(link: &mut TcpLink, req: &RecvReq) -> Result<bool, LinkError> {
        let mut st = XferState::default();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if link.poll_recv(0, req, &mut st)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn req(buf: &mut [f32], d: OpDesc) -> RecvReq {
        RecvReq {
            kind: MsgKind::Data,
            desc: d,
            dst: buf.as_mut_ptr() as *mut u8,
            len: buf.len() * 4,
            reduce: None,
        }
    }

    #[test]
    fn header_round_trip() {
        let h = encode_header(MsgKind::Data, 7, &desc(3), 12);
        let d = decode_header(&h).unwrap();
        assert_eq!(d.seq, 7);
        assert_eq!(d.desc, desc(3));
        assert_eq!(d.len, 12);
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let (mut link, mut raw) = raw_pair();
        raw.write_all(&[0xAB; 100]).unwrap();
        let mut buf = [0f32; 4];
        let e = recv_until_done(&mut link, &req(&mut buf, desc(4))).unwrap_err();
        assert!(
            matches!(e.failure, crate::Failure::Protocol(ref s) if s.contains("magic")),
            "{e:?}"
        );
    }

    #[test]
    fn wrong_version_is_refused() {
        let (mut link, mut raw) = raw_pair();
        let mut h = encode_header(MsgKind::Data, 0, &desc(4), 16);
        h[4] = 9;
        raw.write_all(&h).unwrap();
        let mut buf = [0f32; 4];
        let e = recv_until_done(&mut link, &req(&mut buf, desc(4))).unwrap_err();
        assert!(
            matches!(e.failure, crate::Failure::Protocol(ref s) if s.contains("version")),
            "{e:?}"
        );
    }

    #[test]
    fn oversized_length_is_refused_before_any_payload_is_read() {
        let (mut link, mut raw) = raw_pair();
        // Announces 2^60 bytes; sends a little payload after it.
        let h = encode_header(MsgKind::Data, 0, &desc(4), 1 << 60);
        raw.write_all(&h).unwrap();
        raw.write_all(&[1u8; 64]).unwrap();
        let mut buf = [7f32; 4];
        let e = recv_until_done(&mut link, &req(&mut buf, desc(4))).unwrap_err();
        assert!(
            matches!(e.failure, crate::Failure::Protocol(ref s) if s.contains("bytes")),
            "{e:?}"
        );
        assert_eq!(buf, [7.0; 4], "nothing copied");
    }

    #[test]
    fn other_descriptor_is_a_mismatch() {
        let (mut link, mut raw) = raw_pair();
        raw.write_all(&encode_header(MsgKind::Data, 0, &desc(5), 16))
            .unwrap();
        let mut buf = [0f32; 4];
        let e = recv_until_done(&mut link, &req(&mut buf, desc(4))).unwrap_err();
        assert!(
            matches!(e.failure, crate::Failure::Mismatch { .. }),
            "{e:?}"
        );
    }

    #[test]
    fn closed_connection_is_peer_gone() {
        let (mut link, raw) = raw_pair();
        drop(raw);
        let mut buf = [0f32; 4];
        let e = recv_until_done(&mut link, &req(&mut buf, desc(4))).unwrap_err();
        assert!(matches!(e.failure, crate::Failure::PeerGone(_)), "{e:?}");
    }

    #[test]
    fn valid_frame_with_reduce_in_small_writes() {
        let (mut link, mut raw) = raw_pair();
        let n = 100_000usize;
        let payload: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let h = encode_header(MsgKind::Data, 0, &desc(n as u64), (n * 4) as u64);
        let writer = std::thread::spawn(move || {
            raw.write_all(&h[..5]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            raw.write_all(&h[5..]).unwrap();
            for c in payload.chunks(777) {
                raw.write_all(c).unwrap();
            }
            raw
        });
        let src = vec![1f32; n];
        let mut out = vec![0f32; n];
        let r = RecvReq {
            kind: MsgKind::Data,
            desc: desc(n as u64),
            dst: out.as_mut_ptr() as *mut u8,
            len: n * 4,
            reduce: Some((
                src.as_ptr() as *const u8,
                Reducer {
                    dtype: DataType::F32,
                    op: ReduceOp::Sum,
                },
            )),
        };
        assert!(recv_until_done(&mut link, &r).unwrap());
        let _raw = writer.join().unwrap();
        for (i, x) in out.iter().enumerate() {
            assert_eq!(*x, i as f32 + 1.0);
        }
    }

    #[test]
    fn hello_with_wrong_token_is_refused() {
        let mut bad = encode_hello("wrong", 1, 0);
        let mut r: &[u8] = &bad;
        assert!(read_hello(&mut r, "right").is_err());
        bad = encode_hello("right", 3, 0);
        let mut r: &[u8] = &bad;
        assert_eq!(read_hello(&mut r, "right").unwrap(), (3, 0));
        let mut huge = bad.clone();
        huge[6..8].copy_from_slice(&60000u16.to_le_bytes());
        let mut r: &[u8] = &huge;
        assert!(read_hello(&mut r, "right").is_err());
    }
}
