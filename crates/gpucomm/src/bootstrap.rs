//! Joining a job: the store, host detection, and connecting every peer.
//!
//! 1. Rank 0 starts the [`crate::store::StoreServer`] on `store_addr`; every
//!    rank connects to it with the job token.
//! 2. Each rank publishes `info/<rank>`: its host id, pid, shared-memory region
//!    (memfd) and TCP listening address.
//! 3. For every peer the first transport whose `can_connect` holds is used
//!    (priority: shared memory if the host ids are equal, then TCP), unless
//!    [`TransportChoice`] forces one.
//! 4. Shared memory: map the peer's region through `/proc/<pid>/fd/<fd>` and
//!    open a pidfd to notice its death. TCP: the higher rank connects to the
//!    lower one and presents the token; the acceptor drops any connection
//!    whose hello is wrong and keeps waiting, until the deadline.
//! 5. A store barrier; then the job runs without the store.

use std::net::{SocketAddr, TcpListener};
#[cfg(test)]
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::Socket;

use crate::buffer::Segment;
use crate::comm::InnerParts;
use crate::env::{BootstrapConfig, TransportChoice};
use crate::error::{Error, TransportKind};
use crate::netif;
use crate::split::Origin;
use crate::store::{Bounded, ConnectError, StoreClient, StoreServer};
use crate::transport::ring::{Liveness, Region, RingLink, pidfd, region_bytes};
use crate::transport::tcp::{TcpLink, connect_retry, encode_hello, read_hello, tune_socket};
use crate::transport::{CHANNELS, Link};

/// An identifier equal for processes that can share memory: hostname, boot
/// id, and the network and pid namespaces (ranks in different network
/// namespaces are treated as different hosts).
pub fn host_id() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let link = |p: &str| {
        std::fs::read_link(p)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    format!(
        "{}|{}|{}|{}",
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id"),
        link("/proc/self/ns/net"),
        link("/proc/self/ns/pid")
    )
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Info {
    host: String,
    pid: u32,
    region_fd: i32,
    region_len: usize,
    tcp: Option<String>,
    /// Address of this process's CMA probe word.
    cma_probe: usize,
    /// The rank's `TransportChoice` (name): every rank must have the same.
    transport: String,
    /// The world size the rank was started with: every rank must have the
    /// same, and a rank at or beyond rank 0's is no rank of the job.
    world_size: usize,
}

pub(crate) fn bootstrap(cfg: &BootstrapConfig) -> Result<InnerParts, Error> {
    let (me, n) = (cfg.rank, cfg.world_size);
    let fail = |d: String| Error::Bootstrap {
        rank: me,
        detail: d,
    };
    if n > crate::env::MAX_WORLD_SIZE {
        return Err(fail(format!(
            "world size {n} is more than gpucomm supports (at most {} ranks)",
            crate::env::MAX_WORLD_SIZE
        )));
    }
    if n == 0 || me >= n {
        return Err(fail(format!("rank {me} out of range for world size {n}")));
    }
    if cfg.token.len() > crate::transport::tcp::MAX_TOKEN {
        return Err(fail("token longer than 256 bytes".into()));
    }
    let timeout = cfg.timeout;
    let deadline = crate::comm::deadline_after(timeout);
    let server = if me == 0 {
        Some(StoreServer::start(&cfg.store_addr, &cfg.token)?)
    } else {
        None
    };
    let store_addr = match &server {
        // Port 0: the one the server took, on the host as named (a name's
        // server listens on every interface, so its own address says
        // nothing).
        Some(s) if cfg.store_addr.ends_with(":0") => {
            let host = &cfg.store_addr[..cfg.store_addr.len() - 2];
            format!("{host}:{}", s.addr().port())
        }
        _ => cfg.store_addr.clone(),
    };
    let mut store = match StoreClient::try_connect(&store_addr, &cfg.token, timeout) {
        Ok(store) => store,
        // Rank 0 hosts the store from its start until its communicator is
        // dropped: a rank that finds nothing there for its whole timeout
        // came too late, or to the wrong place, or rank 0 never started.
        Err(ConnectError::Unreachable(e)) => {
            return Err(fail(format!(
                "the rendezvous at {store_addr} is over or unreachable: rank {me} of world {n} \
                 could not join (no store accepted a connection there within {timeout:?}: \
                 {e}; rank 0 serves it from its start until its communicator is dropped: \
                 check the store address (MASTER_ADDR, MASTER_PORT), that rank 0 runs, and \
                 that this rank belongs to a job still joining)"
            )));
        }
        Err(ConnectError::Other(e)) => return Err(e),
    };
    let mut note = JoinNote::default();
    match join_as(cfg, &mut store, deadline, "", None, &mut note).and_then(|parts| {
        leave(&mut store, me, n, deadline, timeout)?;
        Ok(parts)
    }) {
        Ok(mut parts) => {
            // The store is not needed after this; splits connect anew, to
            // the address as resolved.
            drop(store);
            parts.origin = Some(Origin::Store {
                config: BootstrapConfig {
                    store_addr,
                    ..cfg.clone()
                },
            });
            parts.server = server;
            Ok(parts)
        }
        Err(e) => {
            // Every rank counts itself out of the store, also on failure; the
            // rank hosting it lingers a little, so that the others read what
            // they need to fail with their own clear error (not "the store
            // went away"): its own ranks, and the ranks of a larger world
            // size some rank was started with (strays, counted apart: in a
            // job that runs, rank 0 must not take one for its own).
            if me == 0 {
                let expect = n.max(note.world_seen);
                let linger = (Instant::now() + Duration::from_secs(2)).min(deadline);
                while Instant::now() < linger
                    && count(&mut store, "init/left") + count(&mut store, "init/stray") + 1 < expect
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            } else if note.stray {
                let _ = store.add("init/stray", 1);
            } else {
                let _ = store.add("init/left", 1);
            }
            Err(e)
        }
    }
}

/// How often a group's join looks whether to give up.
pub(crate) const WATCH_SLICE: Duration = Duration::from_millis(100);

/// What a group's join (a split, `crate::split`) watches while it waits:
/// a member that failed (its reason under `{ns}failed`), and whatever the
/// caller gives as a reason to stop (the parent aborted, a member's process
/// gone). A job's own join (`ns` empty, no `stop`) watches nothing.
struct Watch<'a> {
    ns: &'a str,
    stop: Option<&'a dyn Fn() -> Option<String>>,
}

/// Why a watched wait ended early.
enum Stop {
    /// The store's own error (a timeout at the deadline, a lost connection).
    Store(Error),
    /// The group gave up.
    Watch(String),
}

impl Watch<'_> {
    fn watching(&self) -> bool {
        !self.ns.is_empty() || self.stop.is_some()
    }

    fn check(&self, store: &mut StoreClient) -> Result<(), Stop> {
        if let Some(why) = self.stop.and_then(|stop| stop()) {
            return Err(Stop::Watch(why));
        }
        if !self.ns.is_empty()
            && let Some(why) = store.get(&failed_key(self.ns)).map_err(Stop::Store)?
        {
            return Err(Stop::Watch(format!(
                "a member of the group failed: {}",
                String::from_utf8_lossy(&why)
            )));
        }
        Ok(())
    }

    /// `store.wait(key)` until `deadline`, in slices when watching.
    fn wait(&self, store: &mut StoreClient, key: &str, deadline: Instant) -> Result<Vec<u8>, Stop> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = if self.watching() {
                left.min(WATCH_SLICE)
            } else {
                left
            };
            match store.wait(key, slice) {
                Ok(v) => return Ok(v),
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::TimedOut && slice < left => {}
                Err(e) => {
                    // The store closing may follow from what the caller
                    // watches (the job's rank 0, its host, failed the
                    // split and left): that reason first.
                    if let Some(why) = self.stop.and_then(|stop| stop()) {
                        return Err(Stop::Watch(why));
                    }
                    return Err(Stop::Store(e));
                }
            }
            self.check(store)?;
        }
    }
}

/// After the job's init barrier: rank 0 hosts the store, so it must not
/// return (and maybe exit) before every other rank is done with the store;
/// the others count themselves out. (A split's groups need none of this:
/// the split's closing barrier on the parent keeps the store's host.)
fn leave(
    store: &mut StoreClient,
    me: usize,
    n: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), Error> {
    if me != 0 {
        store.add("init/left", 1)?;
        return Ok(());
    }
    loop {
        let left = count(store, "init/left");
        if left >= n - 1 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Bootstrap {
                rank: me,
                detail: format!(
                    "only {left} of {} ranks left the init barrier within {timeout:?}",
                    n - 1
                ),
            });
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The counter `key`: how many ranks other than the store's host counted
/// themselves out (`init/left`), or how many strays did (`init/stray`).
fn count(store: &mut StoreClient, key: &str) -> usize {
    store
        .get(key)
        .ok()
        .flatten()
        .and_then(|v| v.get(..8).and_then(|b| b.try_into().ok()))
        .map(i64::from_le_bytes)
        .unwrap_or(0)
        .max(0) as usize
}

/// Whether a store error is the store closing the connection (it stopped,
/// or its process went), not a timeout.
fn store_closed(e: &Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(e, Error::Io { source, .. }
        if matches!(source.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe))
}

/// The key under which rank `r` of the job or group `ns` publishes its
/// address.
fn info_key(ns: &str, r: usize) -> String {
    format!("{ns}info/{r}")
}

/// The counter of the init barrier of `ns`; it is done once `{this}/done`
/// is set.
fn init_barrier_key(ns: &str) -> String {
    format!("barrier/{ns}init")
}

/// The counter a process joining as rank `r` of `ns` takes first: the
/// first to take it is rank `r`, any other is refused.
fn claim_key(ns: &str, r: usize) -> String {
    format!("{ns}rank/{r}")
}

/// Where a member of the group `ns` that failed to join leaves its reason,
/// for the others to stop waiting for it (`crate::split`).
pub(crate) fn failed_key(ns: &str) -> String {
    format!("{ns}failed")
}

/// Every key [`join`] sets for a job or group `ns` of `n` ranks, to delete
/// once all of them have joined (a split's group: `crate::split`).
pub(crate) fn join_keys(ns: &str, n: usize) -> Vec<String> {
    let barrier = init_barrier_key(ns);
    let done = format!("{barrier}/done");
    (0..n)
        .flat_map(|r| [claim_key(ns, r), info_key(ns, r)])
        .chain([barrier, done])
        .collect()
}

/// A group of one rank (a split's, `crate::split`): it has no peer to meet,
/// so it needs no rendezvous, and no store (which may be gone: its host,
/// the job's rank 0, may have dropped its communicator). As [`join`] makes
/// it for one rank: no link, no region, one rank per node.
pub(crate) fn alone(cfg: &BootstrapConfig, ns: &str) -> InnerParts {
    InnerParts {
        rank: 0,
        world: 1,
        local_ranks: 1,
        ranks_per_node: 1,
        links: vec![None],
        region: None,
        timeout: cfg.timeout,
        algorithm: cfg.algorithm,
        sockets: Vec::new(),
        origin: None,
        server: None,
        id: ns.to_string(),
    }
}

/// Everything after the store connection: publish, read the peers, connect.
/// The job's keys are under `ns` (empty for a job, a group's namespace for a
/// split: `crate::split`).
pub(crate) fn join(
    cfg: &BootstrapConfig,
    store: &mut StoreClient,
    deadline: Instant,
    ns: &str,
    stop: Option<&dyn Fn() -> Option<String>>,
) -> Result<InnerParts, Error> {
    join_as(cfg, store, deadline, ns, stop, &mut JoinNote::default())
}

/// What a failed join tells the job's bootstrap about the ranks to wait
/// for before the store goes.
#[derive(Default)]
struct JoinNote {
    /// The job has no such rank (rank 0 was started with a world size at
    /// most this rank).
    stray: bool,
    /// A world size another rank was started with, when it differs.
    world_seen: usize,
}

/// [`join`], noting in `note` why a world size check failed.
fn join_as(
    cfg: &BootstrapConfig,
    store: &mut StoreClient,
    deadline: Instant,
    ns: &str,
    stop: Option<&dyn Fn() -> Option<String>>,
    note: &mut JoinNote,
) -> Result<InnerParts, Error> {
    let watch = Watch { ns, stop };
    let (me, n) = (cfg.rank, cfg.world_size);
    let fail = |d: String| Error::Bootstrap {
        rank: me,
        detail: d,
    };
    let timeout = cfg.timeout;
    // A store that closed the connection while this rank waited: rank 0
    // dropped it (the job ended, or gave up); no peer is coming.
    let store_addr = store.addr().to_string();
    // In a split the ranks are the group's; the store's host is the job's
    // rank 0, which may be in no group with this one.
    let who = if ns.is_empty() {
        format!("rank {me} of world {n}")
    } else {
        format!("rank {me} of group {ns:?} ({n} members)")
    };
    let store_err = |what: String, e: Error| {
        if store_closed(&e) {
            fail(format!(
                "the rendezvous at {store_addr} ended while this rank was joining: {who} \
                 could not join (the store closed the connection: its host, the job's \
                 rank 0, dropped it; {what}: {e})"
            ))
        } else {
            fail(format!("{what}: {e}"))
        }
    };
    // One process per rank: a second one (a wrong RANK, the same
    // environment in two shells, a rank restarted into a running job)
    // would overwrite the first's address and write into rings meant for
    // one sender. It is refused before it publishes anything.
    if store.add(&claim_key(ns, me), 1)? != 1 {
        return Err(fail(format!(
            "another process already joined this job as rank {me} (each process needs its \
             own rank: check RANK / LOCAL_RANK, or whether a job with this store address and \
             token is already running)"
        )));
    }
    let host = host_id();
    let want_shm = cfg.transport != TransportChoice::Tcp && n > 1;
    let want_tcp = cfg.transport != TransportChoice::Shm && n > 1;
    let region = if want_shm {
        Some(Region::create(n)?)
    } else {
        None
    };
    let listener = if want_tcp {
        let local = store
            .local_addr()
            .map(|a| a.ip())
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let store_host = store
            .addr()
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or_default();
        let ip = netif::data_ip(
            local,
            store_host,
            cfg.socket_ifname.as_ref(),
            netif::interfaces,
        )
        .map_err(fail)?;
        // A link-local address binds with its scope (the zone of the
        // store address, as the store connection took it).
        let bind = netif::bind_addr(ip, store.local_addr());
        let l = TcpListener::bind(bind)
            .map_err(|e| Error::io(format!("binding the data listener to {bind}"), e))?;
        l.set_nonblocking(true)
            .map_err(|e| Error::io("listener nonblocking", e))?;
        Some(l)
    } else {
        None
    };
    let info = Info {
        host: host.clone(),
        pid: std::process::id(),
        region_fd: region.as_ref().map(|r| r.segment().raw_fd()).unwrap_or(-1),
        region_len: region.as_ref().map(|r| r.segment().len()).unwrap_or(0),
        tcp: listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string()),
        cma_probe: crate::transport::ring::CMA_PROBE.as_ptr() as usize,
        transport: cfg.transport.name().to_string(),
        world_size: n,
    };
    let json = serde_json::to_vec(&info).map_err(|e| fail(format!("encoding info: {e}")))?;
    store.set(&info_key(ns, me), &json)?;
    let mut infos: Vec<Option<Info>> = (0..n).map(|_| None).collect();
    for (p, slot) in infos.iter_mut().enumerate() {
        if p == me {
            continue;
        }
        let v = watch
            .wait(store, &info_key(ns, p), deadline)
            .map_err(|e| match e {
                Stop::Store(e) if store_closed(&e) => store_err(format!("waiting for rank {p}"), e),
                Stop::Store(e) => fail(format!("rank {p} did not join within {timeout:?}: {e}")),
                Stop::Watch(why) => fail(why),
            })?;
        let info: Info =
            serde_json::from_slice(&v).map_err(|e| fail(format!("bad info from rank {p}: {e}")))?;
        // Ranks that disagree on the world size would wait for peers that
        // never come, or a stray rank would join (its count completing a
        // barrier of its own size). Every rank reads rank 0's info first
        // and rank 0 reads everyone's, so each side learns it at once.
        if info.world_size != n {
            note.world_seen = info.world_size;
            if p == 0 && me >= info.world_size {
                note.stray = true;
                return Err(fail(format!(
                    "rank 0 was started with world size {}, so the job has no rank {me} \
                     (this rank was started with world size {n}: check RANK and WORLD_SIZE, \
                     or whether another job uses this store address and token)",
                    info.world_size
                )));
            }
            return Err(fail(format!(
                "rank {p} was started with world size {} and this rank with {n}: every rank \
                 of a job needs the same (WORLD_SIZE, GPUCOMM_WORLD_SIZE...)",
                info.world_size
            )));
        }
        // Ranks that chose differently would each wait for a link the
        // other never opens (shm against tcp), or fail on a region the
        // other did not make: say so, on every rank, at once.
        if info.transport != cfg.transport.name() {
            return Err(fail(format!(
                "rank {p} was started with transport {} (GPUCOMM_TRANSPORT) and this rank \
                 with {}: every rank of a job needs the same",
                info.transport, cfg.transport
            )));
        }
        *slot = Some(info);
    }
    let mut links: Vec<Option<Box<dyn Link>>> = (0..n).map(|_| None).collect();
    let mut sockets = Vec::new();
    // Shared memory first (priority order), TCP for the rest.
    let mut tcp_peers = Vec::new();
    for p in 0..n {
        let Some(info) = &infos[p] else { continue };
        let same_host = info.host == host;
        let use_shm = match cfg.transport {
            TransportChoice::Shm if !same_host => {
                return Err(fail(format!(
                    "transport shm forced but rank {p} is on another host"
                )));
            }
            TransportChoice::Shm => true,
            TransportChoice::Auto => same_host && info.region_fd >= 0,
            TransportChoice::Tcp => false,
        };
        if use_shm {
            if region_bytes(n).is_none_or(|b| info.region_len < b) {
                return Err(fail(format!("rank {p} announced a region too small")));
            }
            let seg =
                Segment::open_peer(info.pid, info.region_fd, info.region_len).map_err(|e| {
                    fail(format!(
                        "mapping rank {p}'s shared memory (pid {}): {e}",
                        info.pid
                    ))
                })?;
            let mine = region.clone().expect("shm wanted");
            let mut link = RingLink::new(
                TransportKind::Shm,
                me,
                p,
                mine,
                Region::from_segment(seg),
                Liveness::Process {
                    pid: info.pid,
                    pidfd: pidfd(info.pid),
                },
            );
            link.probe_cma(info.cma_probe);
            links[p] = Some(Box::new(link));
        } else {
            tcp_peers.push(p);
        }
    }
    if !tcp_peers.is_empty() {
        let listener = listener.ok_or_else(|| fail("TCP needed but not set up".into()))?;
        let mut socks: Vec<Vec<Option<Socket>>> = (0..n)
            .map(|_| (0..CHANNELS).map(|_| None).collect())
            .collect();
        // Connect to lower ranks.
        for &p in tcp_peers.iter().filter(|&&p| p < me) {
            let addr: SocketAddr = infos[p]
                .as_ref()
                .and_then(|i| i.tcp.as_ref())
                .and_then(|a| a.parse().ok())
                .map(|a| netif::peer_addr(a, store.local_addr()))
                .ok_or_else(|| fail(format!("rank {p} has no TCP address")))?;
            for (ch, slot) in socks[p].iter_mut().enumerate() {
                // A group stops retrying when it gives up (a member that
                // published its address and died never listens).
                let mut looked = Instant::now();
                let mut give_up = || {
                    if looked.elapsed() < WATCH_SLICE {
                        return Ok(());
                    }
                    looked = Instant::now();
                    watch.check(store).map_err(|e| match e {
                        Stop::Store(e) => std::io::Error::other(e.to_string()),
                        Stop::Watch(why) => std::io::Error::other(why),
                    })
                };
                let s = connect_retry(&addr, deadline, &mut give_up)
                    .map_err(|e| fail(format!("connecting to rank {p} at {addr}: {e}")))?;
                s.set_tcp_nodelay(true)
                    .map_err(|e| Error::io("nodelay", e))?;
                let mut w: &Socket = &s;
                std::io::Write::write_all(&mut w, &encode_hello(&cfg.token, me as u32, ch as u32))
                    .map_err(|e| fail(format!("hello to rank {p}: {e}")))?;
                *slot = Some(s);
            }
        }
        // Accept from higher ranks; drop strangers.
        let mut missing = tcp_peers.iter().filter(|&&p| p > me).count() * CHANNELS;
        let mut looked = Instant::now();
        while missing > 0 {
            if Instant::now() >= deadline {
                return Err(fail(format!(
                    "{missing} TCP connection(s) from higher ranks missing after {timeout:?}"
                )));
            }
            if looked.elapsed() >= WATCH_SLICE {
                watch.check(store).map_err(|e| match e {
                    Stop::Store(e) => e,
                    Stop::Watch(why) => fail(why),
                })?;
                looked = Instant::now();
            }
            match listener.accept() {
                Ok((s, _)) => {
                    let s = Socket::from(s);
                    let _ = s.set_nonblocking(false);
                    // A stranger that connects and says nothing, or
                    // dribbles its hello a byte at a time, holds the
                    // accept loop for at most this long in all.
                    let left = deadline.saturating_duration_since(Instant::now());
                    let mut r = Bounded {
                        s: &s,
                        until: Instant::now()
                            + left.clamp(Duration::from_millis(10), Duration::from_secs(2)),
                    };
                    match read_hello(&mut r, &cfg.token) {
                        Ok((rank, ch)) => {
                            let (rank, ch) = (rank as usize, ch as usize);
                            if rank > me
                                && rank < n
                                && ch < CHANNELS
                                && tcp_peers.contains(&rank)
                                && socks[rank][ch].is_none()
                            {
                                socks[rank][ch] = Some(s);
                                missing -= 1;
                            }
                        }
                        Err(_) => drop(s),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(e) => return Err(fail(format!("accept: {e}"))),
            }
        }
        for &p in &tcp_peers {
            let chans: Vec<Socket> = socks[p]
                .iter_mut()
                .map(|s| s.take().expect("all connected"))
                .collect();
            for s in &chans {
                tune_socket(s).map_err(|e| Error::io("socket options", e))?;
                if let Ok(c) = s.try_clone() {
                    sockets.push(c);
                }
            }
            links[p] = Some(Box::new(TcpLink::new(p, chans)));
        }
    }
    let key = init_barrier_key(ns);
    if store.add(&key, 1)? as usize == n {
        store.set(&format!("{key}/done"), b"1")?;
    }
    watch
        .wait(store, &format!("{key}/done"), deadline)
        .map_err(|e| match e {
            Stop::Store(e) => store_err("init barrier".into(), e),
            Stop::Watch(why) => fail(why),
        })?;
    // Ranks per node for the schedules: hosts must hold equal, contiguous
    // groups of ranks; otherwise (and when TCP is forced) the job is flat.
    let hosts: Vec<&str> = (0..n)
        .map(|p| {
            infos[p]
                .as_ref()
                .map(|i| i.host.as_str())
                .unwrap_or(host.as_str())
        })
        .collect();
    let first = hosts.iter().take_while(|h| **h == hosts[0]).count();
    let uniform = n % first == 0
        && hosts.chunks(first).all(|c| c.iter().all(|h| *h == c[0]))
        && (0..n / first).all(|g| (0..g).all(|h| hosts[h * first] != hosts[g * first]));
    let ranks_per_node = if cfg.transport == TransportChoice::Tcp || !uniform {
        1
    } else {
        first
    };
    let local_ranks = hosts.iter().filter(|h| **h == host.as_str()).count();
    Ok(InnerParts {
        rank: me,
        world: n,
        local_ranks,
        ranks_per_node,
        links,
        region,
        timeout,
        algorithm: cfg.algorithm,
        sockets,
        origin: None,
        server: None,
        id: ns.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreServer;

    /// Rank 0 of a two-rank group joins alone: its peer never comes, and
    /// `stop` (run after 200 ms) gives the join its reason to give up.
    fn lone_join(ns: &str, stop: impl FnOnce(&str, &AtomicBool) + Send) -> (String, Duration) {
        let server = StoreServer::start("127.0.0.1:0", "tok").unwrap();
        let addr = server.addr().to_string();
        let cfg = BootstrapConfig {
            rank: 0,
            world_size: 2,
            local_rank: None,
            local_world_size: None,
            store_addr: addr.clone(),
            token: "tok".into(),
            transport: TransportChoice::Auto,
            algorithm: None,
            timeout: Duration::from_secs(30),
            socket_ifname: None,
        };
        let abort = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                stop(&addr, &abort);
            });
            let mut client = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
            let t = Instant::now();
            let stop = || {
                abort
                    .load(Ordering::Acquire)
                    .then(|| "the parent communicator was aborted".to_string())
            };
            let e = join(&cfg, &mut client, t + cfg.timeout, ns, Some(&stop))
                .err()
                .expect("the peer never joins");
            (e.to_string(), t.elapsed())
        })
    }

    #[test]
    fn a_group_join_stops_retrying_a_member_that_published_and_left() {
        // Rank 0 publishes its TCP address and gives up at once (its
        // listener closes); rank 1 then connects to a port nobody listens
        // on, and stops retrying when its parent aborts, not at its 30 s
        // timeout (the connect loop did not look before).
        let server = StoreServer::start("127.0.0.1:0", "tok").unwrap();
        let addr = server.addr().to_string();
        let cfg = |rank| BootstrapConfig {
            rank,
            world_size: 2,
            local_rank: None,
            local_world_size: None,
            store_addr: addr.clone(),
            token: "tok".into(),
            transport: TransportChoice::Tcp,
            algorithm: None,
            timeout: Duration::from_secs(30),
            socket_ifname: None,
        };
        let join_as = |rank: usize, stop: &dyn Fn() -> Option<String>| {
            let c = cfg(rank);
            let mut client = StoreClient::connect(&addr, "tok", Duration::from_secs(5)).unwrap();
            let t = Instant::now();
            let e = join(&c, &mut client, t + c.timeout, "split0.1/", Some(stop))
                .err()
                .map(|e| e.to_string());
            (e, t.elapsed())
        };
        let gone = || Some("rank 0 gave up".to_string());
        let (e, _) = join_as(0, &gone);
        assert!(e.is_some_and(|e| e.contains("rank 0 gave up")));
        let abort = AtomicBool::new(false);
        let (e, took) = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                abort.store(true, Ordering::Release);
            });
            let stop = || {
                abort
                    .load(Ordering::Acquire)
                    .then(|| "the parent communicator was aborted".to_string())
            };
            join_as(1, &stop)
        });
        let e = e.expect("rank 0 never listens");
        assert!(e.contains("the parent communicator was aborted"), "{e}");
        assert!(took < Duration::from_secs(15), "{took:?}");
    }

    #[test]
    fn a_group_join_gives_up_when_a_member_failed_or_the_parent_aborted() {
        // A member's reason, set where the group's keys are.
        let (e, took) = lone_join("split0.3/", |addr, _| {
            let mut c = StoreClient::connect(addr, "tok", Duration::from_secs(5)).unwrap();
            c.set("split0.3/failed", b"rank 1: no memory").unwrap();
        });
        assert!(
            e.contains("a member of the group failed: rank 1: no memory"),
            "{e}"
        );
        // Well before the 30 s timeout it would otherwise wait out.
        assert!(took < Duration::from_secs(15), "{took:?}");
        // abort() on the parent from another thread.
        let (e, took) = lone_join("split0.3/", |_, abort| abort.store(true, Ordering::Release));
        assert!(e.contains("the parent communicator was aborted"), "{e}");
        assert!(took < Duration::from_secs(15), "{took:?}");
    }
}
