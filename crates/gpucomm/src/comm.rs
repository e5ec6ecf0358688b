//! The communicator: argument checks, schedule choice and caching, in-place
//! staging, the async queue, abort, and the failure policy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpucomm_algo::{
    Algorithm, Collective, Problem, ReduceOp, Schedule, Slice, Step, StepKind, block_partition,
};

use crate::buffer::{Buffer, MemorySpace, Segment};
use crate::dtype::{DataType, Element, Reducer};
use crate::engine::{self, Exec, ExecState, Plan};
use crate::error::{Error, OpContext, TransportKind};
use crate::transport::doorbell::Bell;
use crate::transport::ring::{Region, STATE_ABORTED, STATE_CLOSED};
use crate::transport::{Link, OpDesc, ZeroCopy};

/// Default bound on every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// `timeout` from now; a timeout too long for the clock (`Duration::MAX`,
/// a way of saying "none") is a deadline a century away, not a panic.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    deadline(Instant::now(), timeout)
}

/// `now + d`, saturating a century ahead (see [`deadline_after`]).
pub(crate) fn deadline(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// A timeout in whole milliseconds, the one conversion every timeout that
/// travels or is kept in milliseconds takes (a communicator's, the store's
/// waits, `GPUCOMM_TIMEOUT_MS` for launched ranks): rounded up, so that no
/// wait is shorter than asked and none but zero is zero; at least 1, so
/// that zero waits a moment rather than not at all (a loop of zero waits
/// is no busy loop); at most `u64::MAX` (it wrapped: 2^61 s became 0 and
/// every call timed out at once). Back to a deadline with [`deadline`].
pub(crate) fn timeout_ms(d: Duration) -> u64 {
    d.as_nanos()
        .div_ceil(1_000_000)
        .clamp(1, u128::from(u64::MAX)) as u64
}

/// One call, with its root, peer or reduction op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Call {
    /// Every rank gets the op over all inputs.
    AllReduce(ReduceOp),
    /// Rank r gets block r of the op over all inputs.
    ReduceScatter(ReduceOp),
    /// Every rank gets every rank's block.
    AllGather,
    /// Every rank gets the root's data.
    Broadcast {
        /// Sending rank.
        root: usize,
    },
    /// The root gets the op over all inputs.
    Reduce {
        /// Reduction.
        op: ReduceOp,
        /// Receiving rank.
        root: usize,
    },
    /// Block p of rank r's input goes to block r of rank p's output.
    AllToAll,
    /// Each rank sends to rank + shift and receives from rank - shift.
    SendRecv {
        /// Ring distance.
        shift: usize,
    },
    /// Synchronisation.
    Barrier,
    /// Point-to-point send (matched by a [`Call::Recv`] on `peer`).
    Send {
        /// Destination.
        peer: usize,
    },
    /// Point-to-point receive.
    Recv {
        /// Source.
        peer: usize,
    },
    /// The root gets every rank's block, in rank order (`MPI_Gather`): each
    /// rank sends `count` elements, the root receives `n * count`.
    Gather {
        /// Receiving rank.
        root: usize,
    },
    /// Rank r gets block r of the root's input (`MPI_Scatter`): the root
    /// sends `n * count` elements, each rank receives `count`.
    Scatter {
        /// Sending rank.
        root: usize,
    },
    /// Send to `to` and receive from `from` at once, as `MPI_Sendrecv`
    /// (`to` and `from` may be the same rank). Each half matches a
    /// [`Call::Send`], [`Call::Recv`] or the other half of an exchange on
    /// that peer, so two ranks exchanging never wait for each other.
    Exchange {
        /// Destination of the send buffer.
        to: usize,
        /// Source of the receive buffer.
        from: usize,
    },
}

impl Call {
    /// The name used in errors and on command lines.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Send { .. } => "send",
            Call::Recv { .. } => "recv",
            Call::Exchange { .. } => "exchange",
            Call::Gather { .. } => "gather",
            Call::Scatter { .. } => "scatter",
            c => c.collective().map(|c| c.name()).unwrap_or("?"),
        }
    }

    /// The algo crate's collective, `None` for send and recv.
    pub fn collective(&self) -> Option<Collective> {
        Some(match *self {
            Call::AllReduce(_) => Collective::AllReduce,
            Call::ReduceScatter(_) => Collective::ReduceScatter,
            Call::AllGather => Collective::AllGather,
            Call::Broadcast { root } => Collective::Broadcast { root },
            Call::Reduce { root, .. } => Collective::Reduce { root },
            Call::AllToAll => Collective::AllToAll,
            Call::SendRecv { shift } => Collective::SendRecv { shift },
            Call::Barrier => Collective::Barrier,
            Call::Gather { root } => Collective::Gather { root },
            Call::Scatter { root } => Collective::Scatter { root },
            Call::Send { .. } | Call::Recv { .. } | Call::Exchange { .. } => return None,
        })
    }

    /// The reduction op, for reducing calls.
    pub fn op(&self) -> Option<ReduceOp> {
        match *self {
            Call::AllReduce(op) | Call::ReduceScatter(op) | Call::Reduce { op, .. } => Some(op),
            _ => None,
        }
    }
}

/// Per-call options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// Overrides the communicator's timeout for this call.
    pub timeout: Option<Duration>,
    /// Forces an algorithm (otherwise: the communicator's, then the tuner's).
    pub algorithm: Option<Algorithm>,
}

/// Options of [`crate::Communicator::in_process_with`].
#[derive(Clone, Debug, Default)]
pub struct InProcessOptions {
    /// Bound on every wait (default [`DEFAULT_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// Forced algorithm.
    pub algorithm: Option<Algorithm>,
    /// Faults to inject: `(rank, peer, fault)` wraps rank's link to peer.
    pub faults: Vec<(usize, usize, crate::Fault)>,
}

type LastPlan = ((Problem, Option<Algorithm>), Arc<Plan>, Algorithm, bool);

pub(crate) struct State {
    pub links: Vec<Option<Box<dyn Link>>>,
    plans: HashMap<(Problem, Algorithm), (Arc<Plan>, bool)>,
    tuned: HashMap<Problem, Algorithm>,
    /// The last collective's plan, keyed by (problem, per-call algorithm).
    last: Option<LastPlan>,
    /// The last few hand-made plans of calls without blocks of any size,
    /// keyed by (call, send length, receive length), the latest first: a
    /// loop of sends and receives compiles each plan once.
    last_hand: Vec<(HandKey, HandPlan)>,
    exec: ExecState,
    arena: Option<Arc<Segment>>,
    seq: u64,
}

pub(crate) struct Inner {
    pub rank: usize,
    pub world: usize,
    /// Ranks per node as the schedules see it (ranks numbered node by node).
    pub ranks_per_node: usize,
    patience: engine::Patience,
    pub state: Mutex<State>,
    pub abort: AtomicBool,
    broken: Mutex<Option<String>>,
    is_broken: AtomicBool,
    pub region: Option<Region>,
    pub kinds: Vec<Option<TransportKind>>,
    timeout_ms: AtomicU64,
    pub algorithm: Option<Algorithm>,
    /// Segments peers may read in place (shm): allocations and the arena.
    segments: Mutex<Vec<Weak<Segment>>>,
    pub sockets: Vec<socket2::Socket>,
    /// How this communicator was made (its groups are made the same way).
    pub origin: Option<crate::split::Origin>,
    /// Rank 0 of a job made by `Communicator::new` hosts the store until the
    /// end.
    pub _server: Option<crate::store::StoreServer>,
    /// The namespace of this communicator's keys in the store (empty for a
    /// job's own; `split<N>.<color>/` appended for each split).
    pub id: String,
    /// Splits so far (every rank counts alike: a split is collective).
    pub splits: AtomicU64,
    queue: Queue,
}

#[derive(Default)]
struct Queue {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    submitted: AtomicU64,
    completed: Mutex<u64>,
    cv: Condvar,
}

type Job = Box<dyn FnOnce(&Inner) + Send>;

pub(crate) struct InnerParts {
    pub rank: usize,
    pub world: usize,
    /// Ranks of the job on this host (this one included).
    pub local_ranks: usize,
    pub ranks_per_node: usize,
    pub links: Vec<Option<Box<dyn Link>>>,
    pub region: Option<Region>,
    pub timeout: Duration,
    pub algorithm: Option<Algorithm>,
    pub sockets: Vec<socket2::Socket>,
    pub origin: Option<crate::split::Origin>,
    pub server: Option<crate::store::StoreServer>,
    pub id: String,
}

impl Inner {
    pub(crate) fn new(p: InnerParts) -> Inner {
        let kinds = p
            .links
            .iter()
            .map(|l| l.as_ref().map(|l| l.kind()))
            .collect();
        Inner {
            rank: p.rank,
            world: p.world,
            ranks_per_node: p.ranks_per_node.clamp(1, p.world.max(1)),
            patience: engine::Patience::for_local_ranks(p.local_ranks),
            state: Mutex::new(State {
                links: p.links,
                plans: HashMap::new(),
                tuned: HashMap::new(),
                last: None,
                last_hand: Vec::new(),
                exec: ExecState::default(),
                arena: None,
                seq: 0,
            }),
            abort: AtomicBool::new(false),
            broken: Mutex::new(None),
            is_broken: AtomicBool::new(false),
            region: p.region,
            kinds,
            timeout_ms: AtomicU64::new(timeout_ms(p.timeout)),
            algorithm: p.algorithm,
            segments: Mutex::new(Vec::new()),
            sockets: p.sockets,
            origin: p.origin,
            _server: p.server,
            id: p.id,
            splits: AtomicU64::new(0),
            queue: Queue::default(),
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }

    pub fn set_timeout(&self, d: Duration) {
        self.timeout_ms.store(timeout_ms(d), Ordering::Relaxed);
    }

    pub fn register(&self, seg: &Arc<Segment>) {
        let mut v = crate::lock(&self.segments);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(seg));
    }

    fn lookup(&self, p: *const u8, bytes: usize) -> Option<ZeroCopy> {
        self.region.as_ref()?;
        let v = crate::lock(&self.segments);
        for w in v.iter() {
            if let Some(s) = w.upgrade()
                && s.contains(p, bytes)
            {
                return Some(ZeroCopy::Segment {
                    id: s.id,
                    fd: s.raw_fd(),
                    seg_len: s.len(),
                    offset: p as usize - s.ptr() as usize,
                });
            }
        }
        None
    }

    /// Marks the communicator unusable and tells peers (region state, sockets).
    fn poison(&self, why: String, state: u32) {
        let mut b = crate::lock(&self.broken);
        if b.is_none() {
            *b = Some(why);
        }
        drop(b);
        self.is_broken.store(true, Ordering::Release);
        if let Some(r) = &self.region {
            r.state().store(state, Ordering::Release);
            r.doorbell().fetch_add(1, Ordering::SeqCst);
            r.wake();
        }
        for s in &self.sockets {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn abort(&self, why: &str) {
        self.abort.store(true, Ordering::Release);
        self.poison(format!("aborted: {why}"), STATE_ABORTED);
        if let Some(r) = &self.region {
            // Wake our own engine if it sleeps on the doorbell.
            r.bump();
            r.wake_all();
        }
    }

    fn check_usable(&self) -> Result<(), Error> {
        if !self.is_broken.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(b) = crate::lock(&self.broken).as_ref() {
            return Err(Error::Broken(b.clone()));
        }
        Ok(())
    }

    /// Waits until every queued async operation has run.
    fn drain(&self) {
        let target = self.queue.submitted.load(Ordering::Acquire);
        if target == 0 {
            return; // never used async: no lock on the hot path
        }
        let mut c = crate::lock(&self.queue.completed);
        while *c < target {
            c = self
                .queue
                .cv
                .wait(c)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn submit(self: &Arc<Self>, job: Job) -> Result<(), Error> {
        let mut tx = crate::lock(&self.queue.tx);
        if tx.is_none() {
            let (t, r) = mpsc::channel::<Job>();
            let weak = Arc::downgrade(self);
            let h = std::thread::Builder::new()
                .name(format!("gpucomm-r{}", self.rank))
                .spawn(move || {
                    while let Ok(job) = r.recv() {
                        let Some(inner) = weak.upgrade() else { return };
                        job(&inner);
                        *crate::lock(&inner.queue.completed) += 1;
                        inner.queue.cv.notify_all();
                    }
                })
                .map_err(|e| Error::io("spawning the progress thread", e))?;
            *crate::lock(&self.queue.worker) = Some(h);
            *tx = Some(t);
        }
        self.queue.submitted.fetch_add(1, Ordering::AcqRel);
        tx.as_ref()
            .expect("set above")
            .send(job)
            .map_err(|_| Error::Broken("progress thread gone".into()))
    }

    pub fn shutdown_queue(&self) -> Option<JoinHandle<()>> {
        crate::lock(&self.queue.tx).take();
        crate::lock(&self.queue.worker).take()
    }

    pub fn close(&self) {
        if let Some(r) = &self.region {
            let _ =
                r.state()
                    .compare_exchange(0, STATE_CLOSED, Ordering::AcqRel, Ordering::Relaxed);
            r.wake_all();
        }
    }
}

/// A type-erased call: raw pointers and element counts.
#[derive(Clone)]
pub(crate) struct RawCall {
    pub call: Call,
    pub dtype: DataType,
    pub send: Option<(*const u8, usize)>,
    pub recv: (*mut u8, usize),
    pub opts: CallOptions,
    pub space: MemorySpace,
    /// The blocks of an all-to-all, all-gather, gather or scatter when they
    /// differ in size ([`crate::Communicator::all_to_all_v`], ...).
    pub blocks: Option<Blocks>,
}

/// Element counts of a call's blocks, by rank, packed in rank order in the
/// buffer they cut: an all-to-all's what this rank sends to each peer and
/// receives from each; an all-gather's and a gather's every rank's block
/// of the output (`recv`), a scatter's of the input (`send`), the other
/// list empty.
#[derive(Clone)]
pub(crate) struct Blocks {
    pub send: Vec<usize>,
    pub recv: Vec<usize>,
}

// SAFETY: the pointers are only dereferenced while the owner of the memory
// (a blocking call's borrow, or a Request's buffers) keeps it alive and
// untouched.
#[allow(unsafe_code)]
unsafe impl Send for RawCall {}

pub(crate) fn raw_call<T: Element>(
    call: Call,
    send: Option<&[T]>,
    recv: &mut [T],
    opts: &CallOptions,
) -> RawCall {
    RawCall {
        call,
        dtype: T::DTYPE,
        send: send.map(|s| (s.as_ptr() as *const u8, s.len())),
        recv: (recv.as_mut_ptr() as *mut u8, recv.len()),
        opts: *opts,
        space: MemorySpace::HostPageable,
        blocks: None,
    }
}

/// The cost model the tuner uses for this machine class: shared memory
/// within a node, TCP between nodes. Rough figures of a 2-core VM (one
/// ~0.5 us hop and ~8 GB/s through shared memory; ~12 us and 1.3 GB/s per
/// direction over loopback TCP); they only need to rank algorithms.
pub(crate) fn cost_model() -> gpucomm_algo::CostModel {
    let mut m = gpucomm_algo::CostModel::new(
        gpucomm_algo::LinkClass {
            latency_us: 0.5,
            bandwidth_gbps: 8.0,
        },
        gpucomm_algo::LinkClass {
            latency_us: 12.0,
            bandwidth_gbps: 1.3,
        },
    );
    m.step_overhead_us = 0.3;
    m.channel_gbps = 100.0;
    m
}

/// Local memory bandwidth the reduce and copy steps run at, GB/s (one core).
const LOCAL_GBPS: f64 = 8.0;

/// The tuner's pick among the algorithms the runtime can run (one channel,
/// no schedule-level chunking: the transports pipeline by themselves), then
/// every other algorithm as a fallback order. The algo crate's alpha-beta
/// prediction is completed with the local work of rank 0 (bytes reduced or
/// copied at [`LOCAL_GBPS`]): with zero-copy transports the reduction, not
/// the link, is what a large all-reduce costs on a CPU.
pub(crate) fn choose_algorithm(problem: &Problem) -> Vec<Algorithm> {
    let model = cost_model().with_local_gbps(LOCAL_GBPS);
    let engine = gpucomm_algo::TuneOptions {
        max_channels: 1,
        chunking: false,
        ..gpucomm_algo::TuneOptions::default()
    };
    let mut v: Vec<Algorithm> = gpucomm_algo::candidates_with(problem, &model, &engine)
        .into_iter()
        .map(|(s, _)| s.algorithm)
        .collect();
    let rest: Vec<Algorithm> = Algorithm::ALL
        .iter()
        .filter(|a| !v.contains(a))
        .copied()
        .collect();
    v.extend(rest);
    v
}

#[allow(unsafe_code)]
impl Inner {
    /// Runs one call to completion on this thread (the caller holds no lock).
    pub(crate) fn run(&self, rc: RawCall) -> Result<(), Error> {
        self.check_usable()?;
        // A panic under the lock (a bug) leaves the state half updated:
        // the communicator is broken from then on, an error, not a panic.
        let Ok(mut st) = self.state.lock() else {
            return Err(Error::Broken(
                "an earlier call on this rank panicked inside the communicator".into(),
            ));
        };
        let seq = st.seq;
        st.seq += 1;
        let r = self.run_locked(&mut st, rc, seq);
        drop(st);
        if let Err(e) = &r
            && matches!(e, Error::Op { .. })
        {
            self.poison(e.to_string(), STATE_ABORTED);
        }
        r
    }

    fn run_locked(&self, st: &mut State, rc: RawCall, seq: u64) -> Result<(), Error> {
        let (n, me) = (self.world, self.rank);
        let es = rc.dtype.size();
        let name = rc.call.name();
        let bad = |s: String| Err(Error::InvalidArgument(format!("{name}: {s}")));
        let recv_len = rc.recv.1;
        let send_len = rc.send.map(|s| s.1);
        let in_place = rc.send.is_none();
        let timeout = rc.opts.timeout.unwrap_or_else(|| self.timeout());
        let reducer = Reducer {
            dtype: rc.dtype,
            op: rc.call.op().unwrap_or(ReduceOp::Sum),
        };
        // Calls without a schedule in gpucomm-algo: steps made by hand.
        let key = (rc.call, send_len, recv_len);
        let cached = rc
            .blocks
            .is_none()
            .then(|| st.last_hand.iter().find(|(k, _)| *k == key))
            .flatten();
        let hand = match cached {
            Some((_, h)) => Some(h.clone()),
            None => match hand_made(rc.call, send_len, recv_len, rc.blocks.as_ref(), me, n)
                .map_err(|e| Error::InvalidArgument(format!("{name}: {e}")))?
            {
                Some(h) => {
                    let hp = HandPlan {
                        plan: Arc::new(Plan::from_steps(&h.steps, me, n, h.lens, h.exchange_desc)?),
                        code: h.code,
                        count_per_message: h.count_per_message,
                    };
                    if rc.blocks.is_none() {
                        st.last_hand.truncate(HAND_PLANS - 1);
                        st.last_hand.insert(0, (key, hp.clone()));
                    }
                    Some(hp)
                }
                None => None,
            },
        };
        let (plan, count, algo_code, coll) = match (&hand, rc.call) {
            (Some(h), _) => (
                h.plan.clone(),
                // Hand-made plans' descriptors count per message or not at
                // all (their blocks differ in size).
                0,
                0u8,
                None,
            ),
            (None, call) => {
                let coll = call.collective().expect("collective");
                // Element counts per the table in gpucomm_algo::Collective.
                let count = match coll {
                    Collective::AllReduce
                    | Collective::Broadcast { .. }
                    | Collective::Reduce { .. }
                    | Collective::SendRecv { .. } => {
                        if let Some(s) = send_len
                            && s != recv_len
                        {
                            return bad(format!("send has {s} elements, recv {recv_len}"));
                        }
                        recv_len
                    }
                    Collective::ReduceScatter => {
                        let count = send_len.unwrap_or(recv_len);
                        let mine = block_partition(count, n, me).1;
                        if send_len.is_some() && recv_len != mine {
                            return bad(format!(
                                "recv has {recv_len} elements, block {me} of {count} over {n} ranks has {mine}"
                            ));
                        }
                        count
                    }
                    Collective::AllGather => {
                        let mine = block_partition(recv_len, n, me).1;
                        if let Some(s) = send_len
                            && s != mine
                        {
                            return bad(format!(
                                "send has {s} elements, block {me} of {recv_len} over {n} ranks has {mine}"
                            ));
                        }
                        recv_len
                    }
                    Collective::AllToAll => {
                        if let Some(s) = send_len
                            && s != recv_len
                        {
                            return bad(format!("send has {s} elements, recv {recv_len}"));
                        }
                        if recv_len % n != 0 {
                            return bad(format!(
                                "{recv_len} elements do not divide into {n} blocks"
                            ));
                        }
                        recv_len / n
                    }
                    Collective::Gather { root } | Collective::Scatter { root } => {
                        let gather = matches!(coll, Collective::Gather { .. });
                        match rooted_block(gather, root, send_len, recv_len, me, n) {
                            Ok(c) => c,
                            Err(e) => return bad(e),
                        }
                    }
                    Collective::Barrier => 0,
                };
                if let Some(root) = coll.root()
                    && root >= n
                {
                    return bad(format!("root {root} out of range for {n} ranks"));
                }
                if n == 1 {
                    // A single rank: the result is the input.
                    if let Some((p, l)) = rc.send
                        && l > 0
                    {
                        let (dst, len) = match coll {
                            Collective::ReduceScatter => (rc.recv.0, recv_len),
                            _ => (rc.recv.0, l.min(recv_len)),
                        };
                        // SAFETY: both are live user slices of at least `len`
                        // elements; a distinct send slice cannot overlap a
                        // `&mut` recv slice.
                        unsafe { std::ptr::copy(p, dst, len * es) };
                    }
                    return Ok(());
                }
                let problem = Problem::new(coll, count, n, self.ranks_per_node).with_elem_size(es);
                // A per-call algorithm is strict; the communicator's default
                // (GPUCOMM_ALGORITHM) applies where it has a schedule and
                // the tuner picks for the other collectives (barrier, ...).
                let key = (problem, rc.opts.algorithm);
                if let Some((k, plan, a, safe)) = &st.last
                    && *k == key
                {
                    // The same call as the last one (a loop): no hashing, no allocation.
                    (plan.clone(), count, algo_code(*a), Some((coll, *safe)))
                } else {
                    let forced = rc.opts.algorithm.or(self.algorithm);
                    let algos: Vec<Algorithm> =
                        match (rc.opts.algorithm, self.algorithm, st.tuned.get(&problem)) {
                            (Some(a), _, _) => vec![a],
                            (None, Some(a), _) if Schedule::new(problem, a).is_ok() => vec![a],
                            (None, _, Some(&a)) => vec![a],
                            _ => choose_algorithm(&problem),
                        };
                    let mut last = None;
                    let mut found = None;
                    for a in algos {
                        if let Some((p, safe)) = st.plans.get(&(problem, a)) {
                            found = Some((p.clone(), a, *safe));
                            break;
                        }
                        match Schedule::new(problem, a) {
                            Ok(s) => {
                                let plan = Arc::new(Plan::compile(&s, me, true)?);
                                let safe = s.in_place_safe();
                                st.plans.insert((problem, a), (plan.clone(), safe));
                                found = Some((plan, a, safe));
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                    }
                    let Some((plan, a, safe)) = found else {
                        return Err(Error::Algo(last.expect("at least one algorithm tried")));
                    };
                    if forced != Some(a) {
                        st.tuned.insert(problem, a);
                    }
                    st.last = Some((key, plan.clone(), a, safe));
                    (plan, count, algo_code(a), Some((coll, safe)))
                }
            }
        };
        let (ccode, arg) = match (&hand, coll) {
            (Some(h), _) => h.code,
            (None, c) => OpDesc::coll_code(&c.expect("a scheduled call has its collective").0),
        };
        let desc = OpDesc {
            coll: ccode,
            dtype: rc.dtype.code(),
            op: rc.call.op().map(OpDesc::op_code).unwrap_or(0),
            algo: algo_code,
            arg,
            count: count as u64,
        };
        // Buffers.
        let [in_len, out_len, scratch_len] = plan.lens;
        let mut input = rc.send.map(|s| s.0 as *mut u8).unwrap_or(rc.recv.0);
        let mut output = rc.recv.0;
        if let Some((coll, _)) = coll {
            if in_place {
                match coll {
                    Collective::AllGather => {
                        input = unsafe_add(rc.recv.0, block_partition(count, n, me).0 * es);
                    }
                    Collective::ReduceScatter => {
                        output = unsafe_add(rc.recv.0, block_partition(count, n, me).0 * es);
                    }
                    Collective::Gather { .. } => input = unsafe_add(rc.recv.0, me * count * es),
                    Collective::Scatter { .. } => output = unsafe_add(rc.recv.0, me * count * es),
                    _ => {}
                }
            }
            // Lengths the user gave must cover the plan's buffers.
            let user_in = send_len.unwrap_or(recv_len);
            if (coll != Collective::AllGather || !in_place) && in_len > user_in && rc.send.is_some()
            {
                return bad(format!(
                    "send buffer has {user_in} elements, {in_len} needed"
                ));
            }
            if out_len > recv_len && !(in_place && coll == Collective::ReduceScatter) {
                return bad(format!(
                    "recv buffer has {recv_len} elements, {out_len} needed"
                ));
            }
        }
        // Scratch and staging in the arena (shared memory, so peers can read it in place).
        let in_place_safe = coll.is_none_or(|(_, safe)| safe);
        // Floating-point avg divides every input by n before the sum (as
        // NCCL's PreMulSum): a sum of f16 gradients overflows where their
        // average does not. The divided input is staged.
        let premul = reducer.op == ReduceOp::Avg && !rc.dtype.is_integer() && coll.is_some();
        let stage = (premul || (in_place && !in_place_safe)) && in_len > 0;
        let scratch_bytes = (scratch_len * es).next_multiple_of(64);
        let need = scratch_bytes + if stage { in_len * es } else { 0 };
        if st.arena.as_ref().is_none_or(|a| a.len() < need) && need > 0 {
            let seg = Segment::create(need.next_power_of_two(), "gpucomm-arena")?;
            self.register(&seg);
            st.arena = Some(seg);
        }
        let arena = st
            .arena
            .as_ref()
            .map(|a| a.ptr())
            .unwrap_or(std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8);
        if stage {
            let staged = unsafe_add(arena, scratch_bytes);
            // SAFETY: `input` is the user's buffer of >= in_len elements, the
            // arena holds need >= scratch_bytes + in_len * es bytes.
            unsafe { std::ptr::copy_nonoverlapping(input, staged, in_len * es) };
            if premul {
                // SAFETY: `staged` holds in_len elements, aligned (the
                // arena is page aligned, scratch_bytes a multiple of 64).
                unsafe { reducer.divide(staged, in_len * es, n) };
            }
            input = staged;
        }
        let lookup = |p: *const u8, b: usize| -> Option<ZeroCopy> {
            match self.kinds.iter().flatten().next() {
                Some(TransportKind::InProcess) => Some(ZeroCopy::Addr(p as usize)),
                _ => self.lookup(p, b).or(Some(ZeroCopy::Remote(p as usize))),
            }
        };
        rc.space.check_supported()?;
        for &p in &plan.peers {
            if let Some(l) = st.links[p].as_ref()
                && !l.can_access(rc.space)
            {
                return Err(Error::Unsupported(format!(
                    "{} cannot reach {} memory",
                    l.kind(),
                    rc.space
                )));
            }
        }
        let State { links, exec, .. } = st;
        let mut ex = Exec {
            ctx: OpContext {
                op: name,
                seq,
                rank: me,
                peer: None,
                transport: None,
            },
            desc,
            // Point-to-point messages each say their own length, so every
            // half of an exchange matches a send or receive of its size.
            count_per_message: hand.as_ref().is_some_and(|h| h.count_per_message),
            elem: es,
            reducer,
            bases: [input, output, arena],
            links,
            timeout,
            abort: &self.abort,
            region: self.region.as_ref(),
            patience: self.patience,
            zero_copy: &lookup,
        };
        engine::execute(&plan, &mut ex, exec)?;
        // Integer avg: divide the elements the collective defines as
        // results (the sum wraps, as NCCL's SumPostDiv).
        if reducer.op == ReduceOp::Avg
            && !premul
            && let Some((c, _)) = coll
        {
            let bytes = match c {
                Collective::AllReduce => count * es,
                Collective::ReduceScatter => block_partition(count, n, me).1 * es,
                Collective::Reduce { root } if root == me => count * es,
                _ => 0,
            };
            if bytes > 0 {
                // SAFETY: the output holds at least `bytes` bytes (checked above).
                unsafe { reducer.divide(output, bytes, n) };
            }
        }
        Ok(())
    }
}

/// The block (elements per rank) of a gather (`gather`) or scatter rooted
/// at `root`: this rank's send (gather) or receive (scatter) length; the
/// root's whole, a gather's output or a scatter's input, must be `n` of
/// them. In place (`send_len` `None`, as nccl-tests runs them) every
/// rank's buffer is the whole, its own block at its place.
pub(crate) fn rooted_block(
    gather: bool,
    root: usize,
    send_len: Option<usize>,
    recv_len: usize,
    me: usize,
    n: usize,
) -> Result<usize, String> {
    if root >= n {
        return Err(format!("root {root} out of range for {n} ranks"));
    }
    let Some(s) = send_len else {
        return if recv_len % n == 0 {
            Ok(recv_len / n)
        } else {
            Err(format!(
                "in place, the buffer's {recv_len} elements do not divide into {n} blocks"
            ))
        };
    };
    let (c, what, whole) = if gather {
        (s, "recv", recv_len)
    } else {
        (recv_len, "send", s)
    };
    if me == root && c.checked_mul(n) != Some(whole) {
        return Err(format!(
            "the root's {what} has {whole} elements, {n} blocks of {c} need {}",
            c.saturating_mul(n)
        ));
    }
    Ok(c)
}

/// A hand-made plan's key: (call, send length, receive length).
type HandKey = (Call, Option<usize>, usize);

/// Hand-made plans kept ([`State::last_hand`]): a send and a receive, an
/// exchange, with room to spare.
const HAND_PLANS: usize = 4;

/// A hand-made call's compiled plan and what its descriptor says.
#[derive(Clone)]
pub(crate) struct HandPlan {
    plan: Arc<Plan>,
    code: (u8, u32),
    count_per_message: bool,
}

/// A call whose steps are made here, not by a gpucomm-algo schedule.
pub(crate) struct HandMade {
    steps: Vec<Step>,
    /// Input, output and scratch lengths, in elements.
    lens: [usize; 3],
    /// The descriptor's collective code and argument.
    code: (u8, u32),
    /// Each message's descriptor counts that message's elements instead.
    count_per_message: bool,
    /// Peers this rank only sends to or only receives from exchange
    /// descriptors first (gather_v, scatter_v): both sides see a mismatch,
    /// and a sender does not finish before its receiver has started the
    /// call (as on a schedule's one-way steps).
    exchange_desc: bool,
}

fn step(kind: StepKind) -> Step {
    Step {
        kind,
        channel: 0,
        deps: vec![],
    }
}

fn input(offset: usize, len: usize) -> Slice {
    Slice::new(gpucomm_algo::Buf::Input, offset, len)
}

fn output(offset: usize, len: usize) -> Slice {
    Slice::new(gpucomm_algo::Buf::Output, offset, len)
}

/// The steps of the calls gpucomm-algo has no schedule for (`None` for the
/// others): point-to-point calls (each message's descriptor counting its
/// own elements, so an exchange's halves match sends and receives), and
/// all-to-alls, all-gathers, gathers and scatters whose blocks differ in
/// size. Every send and
/// receive of a call may run at once. A receive checks the incoming length
/// against its own, so counts that do not pair up end in an error.
pub(crate) fn hand_made(
    call: Call,
    send_len: Option<usize>,
    recv_len: usize,
    blocks: Option<&Blocks>,
    me: usize,
    n: usize,
) -> Result<Option<HandMade>, String> {
    let peer_ok = |p: usize| {
        if p >= n || p == me {
            Err(format!("peer {p} invalid on rank {me} of {n}"))
        } else {
            Ok(())
        }
    };
    let p2p = |steps: Vec<Step>, lens| HandMade {
        steps,
        lens,
        code: (9, 0),
        count_per_message: true,
        exchange_desc: false,
    };
    if let Some(b) = blocks {
        let send_len = send_len.ok_or("blocks of any size need a send buffer (not in place)")?;
        return match call {
            Call::AllToAll => blocks_of_any_size(b, me, n, send_len, recv_len),
            Call::AllGather | Call::Gather { .. } | Call::Scatter { .. } => {
                counted_blocks(call, b, me, n, send_len, recv_len)
            }
            _ => Err(format!("{} takes no blocks of any size", call.name())),
        }
        .map(Some);
    }
    Ok(Some(match call {
        Call::Send { peer } => {
            peer_ok(peer)?;
            let len = send_len.ok_or("send needs a send buffer")?;
            p2p(
                vec![step(StepKind::Send {
                    peer,
                    src: input(0, len),
                })],
                [len, 0, 0],
            )
        }
        Call::Recv { peer } => {
            peer_ok(peer)?;
            p2p(
                vec![step(StepKind::Recv {
                    peer,
                    dst: output(0, recv_len),
                })],
                [0, recv_len, 0],
            )
        }
        Call::Exchange { to, from } => {
            peer_ok(to)?;
            peer_ok(from)?;
            let len = send_len.ok_or("exchange needs a send buffer")?;
            p2p(
                vec![
                    step(StepKind::Send {
                        peer: to,
                        src: input(0, len),
                    }),
                    step(StepKind::Recv {
                        peer: from,
                        dst: output(0, recv_len),
                    }),
                ],
                [len, recv_len, 0],
            )
        }
        _ => return Ok(None),
    }))
}

/// An all-to-all whose blocks differ in size: block p of the input
/// (`b.send[p]` elements, blocks packed in rank order) to rank p, and
/// block q of the output from rank q; this rank's own block is a copy.
fn blocks_of_any_size(
    b: &Blocks,
    me: usize,
    n: usize,
    send_len: usize,
    recv_len: usize,
) -> Result<HandMade, String> {
    if b.send.len() != n || b.recv.len() != n {
        return Err(format!(
            "{} send counts and {} receive counts for {n} ranks",
            b.send.len(),
            b.recv.len()
        ));
    }
    let so = offsets(&b.send, send_len, "send")?;
    let ro = offsets(&b.recv, recv_len, "receive")?;
    if b.send[me] != b.recv[me] {
        return Err(format!(
            "rank {me} sends itself {} elements and receives {}",
            b.send[me], b.recv[me]
        ));
    }
    let mut steps = Vec::with_capacity(2 * n);
    for p in (0..n).filter(|&p| p != me) {
        steps.push(step(StepKind::Send {
            peer: p,
            src: input(so[p], b.send[p]),
        }));
        steps.push(step(StepKind::Recv {
            peer: p,
            dst: output(ro[p], b.recv[p]),
        }));
    }
    if b.send[me] > 0 {
        steps.push(step(StepKind::Copy {
            src: input(so[me], b.send[me]),
            dst: output(ro[me], b.recv[me]),
        }));
    }
    // All-to-all (6), of blocks of any size (1).
    Ok(HandMade {
        steps,
        lens: [send_len, recv_len, 0],
        code: (6, 1),
        // Every pair talks both ways (empty blocks too), so each side
        // checks the other's descriptor on its data.
        count_per_message: false,
        exchange_desc: false,
    })
}

/// Where each block of `counts` (packed in rank order) starts in a buffer
/// of `len` elements, which the counts must fill exactly.
fn offsets(counts: &[usize], len: usize, what: &str) -> Result<Vec<usize>, String> {
    let mut off = Vec::with_capacity(counts.len());
    let mut at = 0usize;
    for &c in counts {
        off.push(at);
        at = at
            .checked_add(c)
            .ok_or_else(|| format!("{what} counts overflow"))?;
    }
    if at != len {
        return Err(format!(
            "{what} counts add up to {at} elements, the {what} buffer has {len}"
        ));
    }
    Ok(off)
}

/// An all-gather, gather or scatter whose blocks differ in size
/// (`MPI_Allgatherv`, `MPI_Gatherv`, `MPI_Scatterv`): rank q's block has
/// `counts[q]` elements, the blocks packed in rank order in the whole (an
/// all-gather's output on every rank, a gather's on the root: `b.recv`; a
/// scatter's input on the root: `b.send`). Ranks other than the root of a
/// gather or scatter need no counts (their own block is their buffer).
fn counted_blocks(
    call: Call,
    b: &Blocks,
    me: usize,
    n: usize,
    send_len: usize,
    recv_len: usize,
) -> Result<HandMade, String> {
    let root = match call {
        Call::Gather { root } | Call::Scatter { root } => {
            if root >= n {
                return Err(format!("root {root} out of range for {n} ranks"));
            }
            Some(root)
        }
        _ => None,
    };
    // The whole and this rank's block, on the ranks that hold the whole.
    let scatter = matches!(call, Call::Scatter { .. });
    let (counts, whole_len, block_len, what, buf) = if scatter {
        (
            &b.send,
            send_len,
            recv_len,
            "send",
            gpucomm_algo::Buf::Input,
        )
    } else {
        (
            &b.recv,
            recv_len,
            send_len,
            "receive",
            gpucomm_algo::Buf::Output,
        )
    };
    let holds_whole = root.is_none_or(|r| r == me);
    let mut steps = Vec::with_capacity(2 * n);
    let lens;
    if holds_whole {
        if counts.len() != n {
            return Err(format!("{} {what} counts for {n} ranks", counts.len()));
        }
        let off = offsets(counts, whole_len, what)?;
        if counts[me] != block_len {
            return Err(format!(
                "rank {me}'s count is {} elements, its own block has {block_len}",
                counts[me]
            ));
        }
        let whole = |q: usize| Slice::new(buf, off[q], counts[q]);
        for p in (0..n).filter(|&p| p != me) {
            match call {
                Call::AllGather => {
                    steps.push(step(StepKind::Send {
                        peer: p,
                        src: input(0, send_len),
                    }));
                    steps.push(step(StepKind::Recv {
                        peer: p,
                        dst: whole(p),
                    }));
                }
                Call::Gather { .. } => steps.push(step(StepKind::Recv {
                    peer: p,
                    dst: whole(p),
                })),
                _ => steps.push(step(StepKind::Send {
                    peer: p,
                    src: whole(p),
                })),
            }
        }
        if block_len > 0 {
            let (src, dst) = match call {
                Call::Scatter { .. } => (whole(me), output(0, block_len)),
                _ => (input(0, block_len), whole(me)),
            };
            steps.push(step(StepKind::Copy { src, dst }));
        }
        lens = [send_len, recv_len, 0];
    } else {
        let root = root.expect("only a rooted call has ranks without the whole");
        if matches!(call, Call::Gather { .. }) {
            steps.push(step(StepKind::Send {
                peer: root,
                src: input(0, send_len),
            }));
            lens = [send_len, 0, 0];
        } else {
            steps.push(step(StepKind::Recv {
                peer: root,
                dst: output(0, recv_len),
            }));
            lens = [0, recv_len, 0];
        }
    }
    let code = match call {
        // All-gather (3) of blocks of any size (1).
        Call::AllGather => (3, 1),
        Call::Gather { root } => (10, root as u32),
        _ => (11, root.unwrap_or(0) as u32),
    };
    Ok(HandMade {
        steps,
        lens,
        code,
        // An all-gather's pairs talk both ways, each receive checking the
        // incoming length; a gather's or scatter's messages carry their
        // own length in their descriptor, checked before any data moves.
        count_per_message: root.is_some(),
        exchange_desc: root.is_some(),
    })
}

fn unsafe_add(p: *mut u8, off: usize) -> *mut u8 {
    p.wrapping_add(off)
}

fn algo_code(a: Algorithm) -> u8 {
    Algorithm::ALL
        .iter()
        .position(|x| *x == a)
        .map(|i| i as u8 + 1)
        .unwrap_or(0)
}

/// A non-blocking operation in flight, from [`crate::Communicator::start`].
/// Operations complete in issue order; [`Request::wait`] returns the buffers.
pub struct Request<T: Element> {
    slot: Arc<ReqSlot<T>>,
}

type Done<T> = Result<(Option<Buffer<T>>, Buffer<T>), Error>;

struct ReqSlot<T: Element> {
    result: Mutex<Option<Done<T>>>,
    cv: Condvar,
}

impl<T: Element> Request<T> {
    /// True once the operation has finished (successfully or not).
    pub fn test(&self) -> bool {
        crate::lock(&self.slot.result).is_some()
    }

    /// Waits for completion and returns the receive buffer. The wait is
    /// bounded: the operation itself ends within its timeout.
    pub fn wait(self) -> Result<Buffer<T>, Error> {
        self.wait_both().map(|(_, r)| r)
    }

    /// Waits and returns `(send buffer, receive buffer)`.
    pub fn wait_both(self) -> Result<(Option<Buffer<T>>, Buffer<T>), Error> {
        let mut g = crate::lock(&self.slot.result);
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = self.slot.cv.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl<T: Element> std::fmt::Debug for Request<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("done", &self.test())
            .finish()
    }
}

pub(crate) fn start<T: Element>(
    inner: &Arc<Inner>,
    call: Call,
    send: Option<Buffer<T>>,
    mut recv: Buffer<T>,
    opts: CallOptions,
) -> Result<Request<T>, Error> {
    inner.check_usable()?;
    for b in send.iter().chain(std::iter::once(&recv)) {
        b.space().check_supported()?;
    }
    let slot = Arc::new(ReqSlot {
        result: Mutex::new(None),
        cv: Condvar::new(),
    });
    let s2 = slot.clone();
    let mut rc = raw_call(call, send.as_deref(), &mut recv, &opts);
    rc.space = recv.space();
    let job: Job = Box::new(move |inner: &Inner| {
        let rc = rc;
        // A panic must not leave the request unanswered (its wait would hang).
        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.run(rc))) {
            Ok(r) => r.map(|()| (send, recv)),
            Err(_) => {
                inner.poison("a panic in the progress thread".into(), STATE_ABORTED);
                Err(Error::Broken("a panic in the progress thread".into()))
            }
        };
        *crate::lock(&s2.result) = Some(r);
        s2.cv.notify_all();
    });
    inner.submit(job)?;
    Ok(Request { slot })
}

/// Runs a blocking call after every earlier async call.
pub(crate) fn run_blocking(inner: &Inner, rc: RawCall) -> Result<(), Error> {
    inner.drain();
    inner.run(rc)
}

/// Allocates a buffer peers can read in place.
pub(crate) fn alloc<T: Element>(
    inner: &Inner,
    n: usize,
    space: MemorySpace,
) -> Result<Buffer<T>, Error> {
    let (b, seg) = Buffer::<T>::new_shared(n, space)?;
    inner.register(&seg);
    Ok(b)
}

#[cfg(test)]
mod tests {
    use crate::{Communicator, Error, ReduceOp};

    /// A panic while the call state is locked (a bug) leaves the
    /// communicator broken: later calls are errors, not panics.
    #[test]
    fn a_panic_under_the_state_lock_breaks_the_communicator_without_panics() {
        let c = Communicator::in_process(1).unwrap().pop().unwrap();
        let inner = c.inner.clone();
        let r = std::thread::spawn(move || {
            let _st = inner.state.lock().unwrap();
            panic!("a bug");
        })
        .join();
        assert!(r.is_err());
        let mut x = [1u32; 4];
        let e = c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap_err();
        assert!(matches!(e, Error::Broken(_)), "{e}");
        assert!(e.to_string().contains("panicked"), "{e}");
    }
}
