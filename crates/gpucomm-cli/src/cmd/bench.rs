//! `gpucomm bench COLLECTIVE`: nccl-tests for gpucomm.
//!
//! The command is a coordinator: it starts `--ranks` worker processes (this
//! same binary, re-executed as `gpucomm bench --worker ...`) through the
//! launch machinery of `gpucomm launch` (`gpucomm::launch`). Every worker
//! joins the job through the environment the launcher sets, runs the sweep,
//! and prints one machine-readable record per size on its stdout (lines
//! starting with [`RECORD`]); the coordinator collects the records of all
//! ranks and prints the table (or JSON), so the numbers are aggregated in
//! one place and worker output that is not a record is forwarded with its
//! rank in front, like `gpucomm launch` does.
//!
//! Definitions follow nccl-tests (`src/common.cu`, `doc/PERFORMANCE.md`):
//! `size` is the larger of a rank's input and output in bytes; `count` the
//! element count nccl-tests passes to the collective; `time` the average over
//! the timed iterations (after warm-up) of one call, taken as the maximum over
//! ranks (`--average` changes that); `algbw = size / time`;
//! `busbw = algbw * factor` with [`Collective::busbw_factor`]; `#wrong` the
//! number of wrong elements of a separate checked run, summed over ranks.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use gpucomm::device::GpuPath;
use gpucomm::env::TransportChoice;
use gpucomm::launch::{LaunchConfig, LaunchError, LineSink, Stream, launch_with, prefix_sink};
use gpucomm_algo::{Algorithm, Collective, ReduceOp};
use serde::{Deserialize, Serialize};

use super::common::{parse_dtype, parse_size, size_sweep, usage};
use super::launch::{AlgorithmChoice, parse_algorithm_or_auto, parse_secs, parse_transport};

mod check;
mod device;
mod table;
mod worker;

use table::Printer;

/// Prefix of the lines a worker prints for the coordinator.
pub const RECORD: &str = "@gpucomm-bench ";

/// Arguments of `gpucomm bench`. Short options are nccl-tests' (`-b -e -f -n
/// -w -d -o -r -c -a`).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The collective: all_reduce, all_gather, reduce_scatter, broadcast,
    /// reduce, all_to_all, sendrecv, barrier, gather or scatter (rooted ones
    /// at `--root`, sendrecv shifting by one as nccl-tests' sendrecv_perf).
    #[arg(default_value = "all_reduce", value_parser = parse_collective_name)]
    pub collective: Collective,
    /// Number of ranks (separate processes on this host).
    #[arg(long, default_value_t = 2)]
    pub ranks: usize,
    /// Smallest size, in bytes (K, M, G suffixes: powers of 1024).
    #[arg(short = 'b', long, default_value = "8", value_parser = parse_size_arg)]
    pub min_bytes: u64,
    /// Largest size, in bytes.
    #[arg(short = 'e', long, default_value = "64M", value_parser = parse_size_arg)]
    pub max_bytes: u64,
    /// Multiply the size by this from one row to the next.
    #[arg(short = 'f', long, default_value_t = 2)]
    pub step_factor: u64,
    /// Element type: f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64
    /// (nccl-tests' names float, double, half, bfloat16, int8, ... work too).
    #[arg(short = 'd', long, default_value = "f32", value_parser = parse_dtype)]
    pub dtype: gpucomm::DataType,
    /// Reduction op: sum, prod, min, max, avg.
    #[arg(short = 'o', long, default_value = "sum", value_parser = parse_op)]
    pub op: ReduceOp,
    /// Root rank of broadcast, reduce, gather and scatter.
    #[arg(short = 'r', long, default_value_t = 0)]
    pub root: usize,
    /// Timed iterations per size (default: from 1000 for small sizes down
    /// to 5, about 256 MiB of data per size).
    #[arg(short = 'n', long)]
    pub iters: Option<usize>,
    /// Untimed iterations before the timed ones (default: 5, 2 for large sizes).
    #[arg(short = 'w', long)]
    pub warmup: Option<usize>,
    /// Transport between the ranks (not with `--threads`: threads use the
    /// in-process transport).
    #[arg(long, default_value = "shm", value_parser = parse_transport, conflicts_with = "threads")]
    pub transport: TransportChoice,
    /// Algorithm: auto (the tuner chooses per size), ring, tree,
    /// halving_doubling, recursive_doubling, direct, hierarchical, bruck.
    #[arg(long, default_value = "auto", value_parser = parse_algorithm_or_auto)]
    pub algorithm: AlgorithmChoice,
    /// Verify every result against a reference (the default).
    #[arg(long, overrides_with = "no_check")]
    pub check: bool,
    /// Do not verify results (`#wrong` shows N/A).
    #[arg(long)]
    pub no_check: bool,
    /// How the per-rank times combine: max (default), avg, min, rank0.
    #[arg(short = 'a', long, default_value = "max", value_parser = parse_average)]
    pub average: Average,
    /// Print one JSON object per size instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run the ranks as threads of this process (the in-process transport)
    /// instead of separate processes.
    #[arg(long)]
    pub threads: bool,
    /// Where the buffers live: `host` (shared pageable memory, the
    /// default), `pinned` (page-locked; registered with the GPU when there
    /// is one) or `device` (GPU memory: needs a GPU, exit status 3 without
    /// one).
    #[arg(long, default_value = "host", value_parser = parse_memory)]
    pub memory: Memory,
    /// With `--memory device`: the GPU every rank uses (several ranks may
    /// share one).
    #[arg(long, default_value_t = 0)]
    pub device: u32,
    /// With `--memory device`: how device data moves, `auto`, `ipc` or
    /// `staged` (default: `GPUCOMM_GPU_PATH`, else auto).
    #[arg(long, value_parser = parse_gpu_path)]
    pub gpu_path: Option<GpuPath>,
    /// (internal, tests) Host memory stands in for the GPU (`FakeDevice`).
    #[arg(long, hide = true)]
    pub fake_gpu: bool,
    /// Each rank's bound on every wait, in seconds.
    #[arg(long, value_parser = parse_secs, default_value = "60")]
    pub rank_timeout: Duration,
    /// Bound on the whole run, in seconds (exit status 124 past it; with
    /// `--threads` the process exits, as threads cannot be stopped).
    #[arg(long, value_parser = parse_secs, default_value = "600")]
    pub timeout: Duration,

    /// (internal) Run as one rank of a bench started by the coordinator.
    #[arg(long, hide = true)]
    pub worker: bool,
    /// (internal, tests) Inject a fault: kill, exit, abort, mismatch, hang, garbage-store, bad-token, corrupt.
    /// Needs separate processes (not with `--threads`).
    #[arg(long, hide = true, value_parser = parse_fault, conflicts_with = "threads")]
    pub fault: Option<Fault>,
    /// (internal, tests) The rank that injects the fault.
    #[arg(long, hide = true, default_value_t = 1)]
    pub fault_rank: usize,
    /// (internal, tests) The size index (row) at which the fault happens.
    #[arg(long, hide = true, default_value_t = 0)]
    pub fault_row: usize,
}

/// `--memory`: where the bench's buffers live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Shared pageable host memory (`Communicator::alloc`).
    Host,
    /// Page-locked host memory.
    Pinned,
    /// GPU memory.
    Device,
}

impl Memory {
    /// The command-line name.
    pub fn name(&self) -> &'static str {
        match self {
            Memory::Host => "host",
            Memory::Pinned => "pinned",
            Memory::Device => "device",
        }
    }
}

fn parse_memory(s: &str) -> Result<Memory, String> {
    match s.to_ascii_lowercase().as_str() {
        "host" | "pageable" => Ok(Memory::Host),
        "pinned" => Ok(Memory::Pinned),
        "device" | "gpu" => Ok(Memory::Device),
        _ => Err(format!(
            "unknown memory {s:?} (expected host, pinned or device)"
        )),
    }
}

/// `--gpu-path`. `GpuPath::parse`'s error names `GPUCOMM_GPU_PATH` (right
/// where the value comes from the environment): the flag's says its own.
fn parse_gpu_path(s: &str) -> Result<GpuPath, String> {
    GpuPath::parse(s).map_err(|_| format!("unknown GPU path {s:?} (expected auto, ipc or staged)"))
}

/// An environment variable that stands for a flag, parsed as the flag is:
/// the value and how to name it in errors (`VAR="value" (environment)`).
fn env_flag<T>(
    var: &str,
    parse: fn(&str) -> Result<T, String>,
) -> anyhow::Result<Option<(T, String)>> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    let value = v.to_string_lossy();
    let what = format!("{var}={value:?} (environment)");
    match parse(&value) {
        Ok(t) => Ok(Some((t, what))),
        Err(e) => bail!("{what}: {e}"),
    }
}

fn parse_collective_name(s: &str) -> Result<Collective, String> {
    Collective::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Collective::ALL.iter().map(|c| c.name()).collect();
        format!(
            "unknown collective {s:?} (expected one of {})",
            names.join(", ")
        )
    })
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| format!("{e:#}"))
}

fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::ALL
        .into_iter()
        .find(|o| o.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown op {s:?} (expected sum, prod, min, max or avg)"))
}

/// How per-rank times combine into the reported time (nccl-tests' `-a`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Average {
    /// Rank 0's time.
    Rank0,
    /// The mean over ranks (nccl-tests' default).
    Avg,
    /// The fastest rank.
    Min,
    /// The slowest rank (our default: a collective is done when the last rank is).
    Max,
}

fn parse_average(s: &str) -> Result<Average, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "0" | "rank0" => Average::Rank0,
        "1" | "avg" => Average::Avg,
        "2" | "min" => Average::Min,
        "3" | "max" => Average::Max,
        _ => {
            return Err(format!(
                "unknown average {s:?} (expected max, avg, min or rank0)"
            ));
        }
    })
}

impl Average {
    fn name(&self) -> &'static str {
        match self {
            Average::Rank0 => "rank0",
            Average::Avg => "avg",
            Average::Min => "min",
            Average::Max => "max",
        }
    }

    fn combine(&self, per_rank: &[f64]) -> f64 {
        match self {
            Average::Rank0 => per_rank.first().copied().unwrap_or(0.0),
            Average::Avg => per_rank.iter().sum::<f64>() / per_rank.len().max(1) as f64,
            Average::Min => per_rank.iter().copied().fold(f64::INFINITY, f64::min),
            Average::Max => per_rank.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// Faults a worker can inject (for the failure tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The rank kills itself with SIGKILL in the middle of the timed loop.
    Kill,
    /// The rank exits with code 3 in the middle of the timed loop.
    Exit,
    /// Another thread of the rank calls `abort()` while it waits in a collective.
    Abort,
    /// The rank calls the collective with another count.
    Mismatch,
    /// The rank stops calling collectives (sleeps): the others must time out.
    Hang,
    /// Before joining, the rank connects to the store and sends garbage.
    GarbageStore,
    /// The rank presents a wrong token to the store.
    BadToken,
    /// The rank changes one element of its checked out-of-place result, as
    /// a transport that corrupts data would: the check counts it, the
    /// table says `FAILED` and the run exits 1.
    Corrupt,
}

fn parse_fault(s: &str) -> Result<Fault, String> {
    Ok(match s {
        "kill" => Fault::Kill,
        "exit" => Fault::Exit,
        "abort" => Fault::Abort,
        "mismatch" => Fault::Mismatch,
        "hang" => Fault::Hang,
        "garbage-store" => Fault::GarbageStore,
        "bad-token" => Fault::BadToken,
        "corrupt" => Fault::Corrupt,
        _ => return Err(format!("unknown fault {s:?}")),
    })
}

impl Fault {
    fn name(&self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Exit => "exit",
            Fault::Abort => "abort",
            Fault::Mismatch => "mismatch",
            Fault::Hang => "hang",
            Fault::GarbageStore => "garbage-store",
            Fault::BadToken => "bad-token",
            Fault::Corrupt => "corrupt",
        }
    }
}

/// Everything both the coordinator and the workers derive from the arguments.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The collective, with its root.
    pub collective: Collective,
    /// The sweep's sizes (sweep bytes, before the per-collective layout).
    pub sizes: Vec<u64>,
    /// Verify results.
    pub check: bool,
}

/// Refuses a sweep whose buffers would not fit in the memory left (`avail`
/// bytes of `place`, "host memory" or a GPU's; `None`: unknown, not
/// checked), so that a 1 TiB sweep fails here, not by the kernel's
/// out-of-memory killer (or the GPU's allocator) rows later. Each rank holds
/// a send and a receive buffer at the largest size, and with `in_place` an
/// in-place one too (host memory: `worker.rs`; the checker computes expected
/// values on the fly).
fn check_memory(
    place: &str,
    collective: Collective,
    largest: u64,
    elem: usize,
    ranks: usize,
    in_place: bool,
    avail: Option<u64>,
) -> anyhow::Result<()> {
    let l = check::Layout::new(collective, largest, elem, ranks);
    let in_place = if in_place { l.in_place_len() } else { 0 };
    let per_rank = (l.send as u128 + l.recv as u128 + in_place as u128) * elem as u128;
    let need = per_rank * ranks as u128;
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    match avail {
        Some(avail) if need > u128::from(avail) => usage!(
            "{} of {} on {ranks} ranks needs about {:.1} GiB of {place} for its buffers \
             ({:.1} GiB per rank), {:.1} GiB available: lower -e/--maxbytes or --ranks",
            collective.name(),
            super::common::format_bytes(largest),
            gib(need),
            gib(per_rank),
            gib(u128::from(avail))
        ),
        _ => Ok(()),
    }
}

impl Args {
    /// The sizes and settings every rank uses.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        if self.ranks == 0 {
            usage!("--ranks must be at least 1");
        }
        if self.ranks > gpucomm::launch::MAX_LOCAL_RANKS {
            usage!(
                "--ranks {} is more than gpucomm starts on one host ({})",
                self.ranks,
                gpucomm::launch::MAX_LOCAL_RANKS
            );
        }
        if self.memory == Memory::Host {
            // GPU options without GPU memory would be ignored.
            if let Some(p) = self.gpu_path {
                usage!(
                    "--gpu-path {p} needs --memory device or pinned: host buffers take no GPU path"
                );
            }
            if self.device != 0 {
                usage!(
                    "--device {} needs --memory device or pinned: host buffers use no GPU",
                    self.device
                );
            }
        }
        let collective = self.collective.with_root(self.root);
        if let Some(root) = collective.root() {
            if root >= self.ranks {
                usage!("--root {root} is not a rank of a {}-rank job", self.ranks);
            }
        }
        let mut sizes = if collective == Collective::Barrier {
            vec![0]
        } else {
            size_sweep(self.min_bytes, self.max_bytes, self.step_factor)?
        };
        // Sweep sizes that round to one size (0, 1 and 2 bytes of floats
        // are all 0 elements) run and print once: the first of them.
        let elem = self.dtype.size();
        sizes
            .dedup_by_key(|&mut s| check::Layout::new(collective, s, elem, self.ranks).bytes(elem));
        if self.iters == Some(0) {
            usage!("--iters must be at least 1");
        }

        if let Some(a) = self.algorithm.0 {
            // Refused here, once, rather than by every rank's first call.
            let implements = |a| {
                let p = gpucomm_algo::Problem::new(collective, self.ranks, self.ranks, self.ranks);
                gpucomm_algo::Schedule::new(p, a).is_ok()
            };
            if !implements(a) {
                let those: Vec<_> = Algorithm::ALL
                    .into_iter()
                    .filter(|&b| implements(b))
                    .map(|b| b.name())
                    .collect();
                usage!(
                    "--algorithm {} does not implement {} (on {} ranks: {})",
                    a.name(),
                    collective.name(),
                    self.ranks,
                    those.join(", ")
                );
            }
        }
        Ok(Plan {
            collective,
            sizes,
            check: !self.no_check,
        })
    }

    /// The transport as reported: `in-process` with `--threads`.
    pub fn transport_label(&self) -> &'static str {
        if self.threads {
            "in-process"
        } else {
            self.transport.name()
        }
    }

    /// Timed iterations for a size.
    pub fn iters_for(&self, bytes: u64) -> usize {
        self.iters
            .unwrap_or_else(|| ((256u64 << 20) / bytes.max(1)).clamp(5, 1000) as usize)
    }

    /// Warm-up iterations for a size.
    pub fn warmup_for(&self, bytes: u64) -> usize {
        self.warmup.unwrap_or(if bytes >= 16 << 20 { 2 } else { 5 })
    }

    /// The arguments a worker gets (the coordinator's, plus `--worker`).
    fn worker_argv(&self) -> Vec<String> {
        let mut v = vec![
            "bench".to_string(),
            self.collective.name().to_string(),
            "--worker".into(),
            "--ranks".into(),
            self.ranks.to_string(),
            "-b".into(),
            self.min_bytes.to_string(),
            "-e".into(),
            self.max_bytes.to_string(),
            "-f".into(),
            self.step_factor.to_string(),
            "-d".into(),
            self.dtype.name().into(),
            "-o".into(),
            self.op.name().into(),
            "-r".into(),
            self.root.to_string(),
            "--transport".into(),
            self.transport.name().into(),
        ];
        if let Some(n) = self.iters {
            v.extend(["-n".into(), n.to_string()]);
        }
        if let Some(n) = self.warmup {
            v.extend(["-w".into(), n.to_string()]);
        }
        if let Some(a) = self.algorithm.0 {
            v.extend(["--algorithm".into(), a.name().into()]);
        }
        if self.no_check {
            v.push("--no-check".into());
        }
        v.extend([
            "--memory".into(),
            self.memory.name().into(),
            "--device".into(),
            self.device.to_string(),
        ]);
        if let Some(p) = self.gpu_path {
            v.extend(["--gpu-path".into(), p.name().into()]);
        }
        if self.fake_gpu {
            v.push("--fake-gpu".into());
        }
        if let Some(f) = self.fault {
            v.extend([
                "--fault".into(),
                f.name().into(),
                "--fault-rank".into(),
                self.fault_rank.to_string(),
                "--fault-row".into(),
                self.fault_row.to_string(),
            ]);
        }
        v
    }
}

/// What a worker tells the coordinator.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The rank joined the job.
    Hello {
        /// Its rank.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// Its host name.
        host: String,
        /// The transports its links use (`shm`, `tcp`, ...), deduplicated.
        transports: Vec<String>,
        /// Where its buffers live (`device 0 (NVIDIA H100 ...), path ipc`).
        #[serde(default)]
        memory: String,
    },
    /// One size done on one rank.
    Row {
        /// The rank.
        rank: usize,
        /// Index into the sweep.
        index: usize,
        /// Timed iterations.
        iters: usize,
        /// Warm-up iterations.
        warmup: usize,
        /// Mean time of one out-of-place call, in microseconds.
        oop_us: f64,
        /// Mean time of one in-place call.
        ip_us: f64,
        /// Wrong elements out of place (None: not checked).
        oop_wrong: Option<u64>,
        /// Wrong elements in place.
        ip_wrong: Option<u64>,
    },
}

/// Runs `gpucomm bench`.
pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    // GPUCOMM_ALGORITHM picks the algorithm where --algorithm is auto, as
    // NCCL_ALGO does for nccl-tests; GPUCOMM_GPU_PATH the device path where
    // --gpu-path is not given (device and pinned memory). Read once, here, by the flags' parsers (a
    // bad value is one error, not one per rank); the workers get them as
    // flags.
    let mut from_env = None;
    if !args.worker {
        if args.algorithm.0.is_none() {
            if let Some((a, what)) = env_flag("GPUCOMM_ALGORITHM", parse_algorithm_or_auto)? {
                args.algorithm = a;
                from_env = Some(what);
            }
        }
        // Pinned memory makes a device communicator too (registration).
        if args.memory != Memory::Host && args.gpu_path.is_none() {
            args.gpu_path = env_flag(gpucomm::device::GPU_PATH_ENV, parse_gpu_path)?.map(|p| p.0);
        }
    }
    let plan = match (args.plan(), from_env) {
        // The environment's value, not the command line, is refused: a
        // failed run (exit 1), as an unparsable GPUCOMM_ALGORITHM is.
        (Err(e), Some(v)) => {
            return Err(anyhow::anyhow!(super::common::chain_message(&e)).context(v));
        }
        (plan, _) => plan?,
    };
    if args.worker {
        return worker::run(&args, &plan);
    }
    // Checked once, here: a worker would see the memory its peers took.
    // With --memory device a rank stages each size's send and receive data
    // in host vectors and holds them in device buffers (`device.rs`).
    let device = args.memory == Memory::Device;
    let largest = plan.sizes.iter().copied().max().unwrap_or(0);
    let fits = |place: &str, in_place: bool, avail: Option<u64>| {
        let elem = args.dtype.size();
        check_memory(
            place,
            plan.collective,
            largest,
            elem,
            args.ranks,
            in_place,
            avail,
        )
    };
    fits(
        "host memory",
        !device,
        gpucomm_topo::discover::available_memory(),
    )?;
    if device && !args.fake_gpu {
        // Every rank on GPU --device: its total memory bounds them all.
        let total = gpucomm_cuda::Gpu::probe()
            .and_then(|g| g.device(args.device))
            .map(|d| d.info().total_memory)
            .ok();
        fits(&format!("memory of GPU {}", args.device), false, total)?;
    }
    if args.memory == Memory::Device {
        if args.fault.is_some() {
            usage!("fault injection works with --memory host or pinned only");
        }
        if !args.fake_gpu
            && let Err(e) = gpucomm::device::open_cuda()
        {
            let code = super::bandwidth::EXIT_NO_GPU;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "gpu": false, "reason": e.to_string() })
                );
            }
            eprintln!(
                "gpucomm bench: {e}; --memory device needs one, nothing to measure (exit status {code})"
            );
            return Ok(ExitCode::from(code));
        }
    }
    coordinate(&args, &plan)
}

/// The device backend of a bench with `--memory device` (or `pinned` with
/// a GPU present): `None` for host memory.
pub fn backend(args: &Args) -> anyhow::Result<Option<Arc<dyn gpucomm::device::DeviceBackend>>> {
    if args.fake_gpu {
        return Ok(Some(Arc::new(gpucomm::device::FakeDevice::new(
            args.device + 1,
        ))));
    }
    match args.memory {
        Memory::Host => Ok(None),
        Memory::Pinned => Ok(gpucomm::device::open_cuda()
            .ok()
            .map(|g| g as Arc<dyn gpucomm::device::DeviceBackend>)),
        Memory::Device => Ok(Some(gpucomm::device::open_cuda()?)),
    }
}

fn new_printer(args: &Args, plan: &Plan) -> Arc<Mutex<Printer>> {
    Arc::new(Mutex::new(Printer::new(
        args.clone(),
        plan.clone(),
        Box::new(std::io::stdout()),
    )))
}

/// The footer and the exit code once every rank is done.
fn finish(printer: &Mutex<Printer>, plan: &Plan) -> anyhow::Result<ExitCode> {
    let mut p = printer
        .lock()
        .map_err(|_| anyhow::anyhow!("output lock poisoned"))?;
    if p.next_row != plan.sizes.len() {
        bail!(
            "the ranks ended after {} of {} sizes without an error",
            p.next_row,
            plan.sizes.len()
        );
    }
    p.footer();
    if let Some(e) = &p.failed {
        if e.contains("Broken pipe") {
            return Ok(ExitCode::SUCCESS);
        }
        bail!("writing the results: {e}");
    }
    if p.wrong_rows > 0 {
        eprintln!(
            "gpucomm bench: {} result(s) had wrong elements",
            p.wrong_rows
        );
        // A check that found wrong results fails the run, as nccl-tests
        // exits EXIT_FAILURE; 2 is for a bad command line.
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--threads`: every rank a thread of this process, joined by the runtime's
/// in-process transport.
fn run_threads(args: &Args, plan: &Plan) -> anyhow::Result<ExitCode> {
    // Refused by clap (conflicts_with); kept for callers that build Args.
    if args.fault.is_some() {
        usage!("fault injection needs separate processes (drop --threads)");
    }
    let opts = gpucomm::InProcessOptions {
        timeout: Some(args.rank_timeout),
        ..Default::default()
    };
    let comms = gpucomm::Communicator::in_process_with(args.ranks, &opts)
        .context("creating in-process ranks")?;
    // Ranks of one process share one device backend.
    let gpu = backend(args)?;
    let printer = new_printer(args, plan);
    let deadline = std::time::Instant::now() + args.timeout;
    let errors: Vec<anyhow::Error> = std::thread::scope(|s| {
        // Each rank says when it ends (a panic included), so the run's
        // bound holds even though a thread cannot be stopped.
        let (done, ended) = std::sync::mpsc::channel::<usize>();
        let handles: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                let printer = printer.clone();
                let gpu = gpu.clone();
                let done = done.clone();
                s.spawn(move || {
                    let rank = comm.rank();
                    let _ended = Ended(rank, done);
                    let sink = move |rec: &Record| -> anyhow::Result<()> {
                        printer
                            .lock()
                            .map_err(|_| anyhow::anyhow!("output lock poisoned"))?
                            .take(rec.clone());
                        Ok(())
                    };
                    worker::run_rank(comm, gpu, args, plan, &sink)
                        .with_context(|| format!("rank {rank} (thread)"))
                })
            })
            .collect();
        drop(done);
        let mut running = vec![true; handles.len()];
        while running.iter().any(|&r| r) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match ended.recv_timeout(left) {
                Ok(rank) => running[rank] = false,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let still: Vec<usize> = (0..running.len()).filter(|&r| running[r]).collect();
                    timed_out(args.timeout, &still)
                }
            }
        }
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(anyhow::anyhow!("a rank thread panicked")),
            })
            .collect()
    });
    if let Some(first) = errors.into_iter().next() {
        return Err(first);
    }
    finish(&printer, plan)
}

/// Tells the `--threads` coordinator that a rank's thread ended, however
/// it ended (dropped on return and on a panic's unwinding).
struct Ended(usize, std::sync::mpsc::Sender<usize>);

impl Drop for Ended {
    fn drop(&mut self) {
        // The coordinator may have stopped listening (it is exiting).
        let _ = self.1.send(self.0);
    }
}

/// `--threads` past `--timeout`: a thread cannot be stopped, so the
/// process ends, with the status a timed-out launch has (124) and the
/// ranks still running named, as separate processes' timeout names them.
fn timed_out(after: Duration, running: &[usize]) -> ! {
    let ranks: Vec<String> = running.iter().map(usize::to_string).collect();
    // Rows already printed stay (the printer writes whole lines). No flush
    // here: a rank stuck writing to a full pipe holds stdout's lock.
    eprintln!(
        "gpucomm bench: bench failed: timed out after {:.1} s with rank(s) {} still running (threads cannot be stopped; exiting)",
        after.as_secs_f64(),
        ranks.join(", ")
    );
    std::process::exit(124)
}

fn coordinate(args: &Args, plan: &Plan) -> anyhow::Result<ExitCode> {
    if args.threads {
        return run_threads(args, plan);
    }
    let exe =
        std::env::current_exe().context("cannot find the gpucomm executable to start ranks")?;
    let printer = new_printer(args, plan);
    let forward = prefix_sink();
    let p2 = printer.clone();
    let sink: LineSink = Arc::new(move |rank, stream, line| {
        if stream == Stream::Stdout {
            if let Some(rest) = line.strip_prefix(RECORD.as_bytes()) {
                match serde_json::from_slice::<Record>(rest) {
                    Ok(rec) => {
                        if let Ok(mut p) = p2.lock() {
                            p.take(rec);
                        }
                    }
                    Err(e) => forward(
                        rank,
                        Stream::Stderr,
                        format!("bad record ({e}): {}", String::from_utf8_lossy(line)).as_bytes(),
                    ),
                }
                return;
            }
        }
        forward(rank, stream, line)
    });
    let cfg = LaunchConfig {
        transport: Some(args.transport),
        rank_timeout: Some(args.rank_timeout),
        timeout: Some(args.timeout),
        // Let the surviving ranks print their own errors before they are stopped.
        term_delay: Duration::from_secs(2),
        grace: Duration::from_secs(2),
        ..LaunchConfig::new(args.ranks, exe.into_os_string()).args(args.worker_argv())
    };
    match launch_with(&cfg, sink) {
        Ok(_) => finish(&printer, plan),
        Err(e) => {
            let code = e.exit_code().clamp(1, 255) as u8;
            let what = match &e {
                LaunchError::RankFailed { .. } | LaunchError::Timeout { .. } => "bench failed",
                LaunchError::Interrupted { .. } => "bench stopped",
                _ => "cannot start the ranks",
            };
            eprintln!("gpucomm bench: {what}: {e}");
            Ok(ExitCode::from(code))
        }
    }
}

/// Parses `gpucomm bench` arguments (for the tests).
#[cfg(test)]
pub(crate) fn parse_args(argv: &[&str]) -> Result<Args, clap::Error> {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }
    Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).map(|c| c.args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parse_args as parse;

    #[test]
    fn a_sweep_beyond_host_memory_is_refused_before_any_rank_starts() {
        let host = |c, bytes, ranks, in_place, avail| {
            check_memory("host memory", c, bytes, 4, ranks, in_place, avail)
        };
        // all_reduce: send, receive and in-place buffers of the size each.
        let gib = 1u64 << 30;
        assert!(host(Collective::AllReduce, gib, 2, true, Some(6 * gib)).is_ok());
        let e = host(Collective::AllReduce, gib, 2, true, Some(6 * gib - 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs about 6.0 GiB of host memory"), "{e}");
        assert!(e.contains("3.0 GiB per rank"), "{e}");
        // all_gather: a rank's input is a block, its output the whole size.
        let g = host(Collective::AllGather, 4 * gib, 4, true, Some(0)).unwrap_err();
        assert!(g.to_string().contains("needs about 36.0 GiB"), "{g}");
        // Device buffers: send and receive (each size's own, freed after).
        let d = check_memory(
            "memory of GPU 0",
            Collective::AllReduce,
            40 * gib,
            1,
            2,
            false,
            Some(80 * gib),
        )
        .unwrap_err()
        .to_string();
        assert!(
            d.contains("needs about 160.0 GiB of memory of GPU 0"),
            "{d}"
        );
        // Unknown memory: not checked.
        assert!(host(Collective::AllReduce, u64::MAX, 1024, true, None).is_ok());
    }

    #[test]
    fn defaults_are_the_readme_command() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.collective, Collective::AllReduce);
        assert_eq!(
            (a.ranks, a.min_bytes, a.max_bytes, a.step_factor),
            (2, 8, 64 << 20, 2)
        );
        assert_eq!(a.transport, TransportChoice::Shm);
        assert_eq!(a.dtype, gpucomm::DataType::F32);
        assert_eq!(a.op, ReduceOp::Sum);
        assert!(!a.no_check && !a.json);
        let plan = a.plan().unwrap();
        assert!(plan.check);
        assert_eq!(plan.sizes.len(), 24);
        assert_eq!(plan.sizes[0], 8);
        assert_eq!(*plan.sizes.last().unwrap(), 64 << 20);
    }

    #[test]
    fn options_parse() {
        let a = parse(&[
            "allgather",
            "--ranks",
            "4",
            "-b",
            "1K",
            "-e",
            "1M",
            "-f",
            "4",
            "-d",
            "bfloat16",
            "-o",
            "max",
            "-n",
            "7",
            "-w",
            "1",
            "--transport",
            "tcp",
            "--algorithm",
            "ring",
            "--no-check",
            "--json",
            "-a",
            "avg",
        ])
        .unwrap();
        assert_eq!(a.collective, Collective::AllGather);
        assert_eq!(
            (a.ranks, a.min_bytes, a.max_bytes, a.step_factor),
            (4, 1024, 1 << 20, 4)
        );
        assert_eq!(a.dtype, gpucomm::DataType::Bf16);
        assert_eq!(a.op, ReduceOp::Max);
        assert_eq!((a.iters, a.warmup), (Some(7), Some(1)));
        assert_eq!(a.algorithm, AlgorithmChoice(Some(Algorithm::Ring)));
        assert_eq!(a.average, Average::Avg);
        assert!(a.no_check && a.json);
        assert!(!a.plan().unwrap().check);
        // The worker gets the same settings back.
        let w = a.worker_argv();
        let b = parse(&w[1..].iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert!(b.worker);
        assert_eq!(
            (
                b.collective,
                b.ranks,
                b.min_bytes,
                b.max_bytes,
                b.step_factor
            ),
            (a.collective, 4, 1024, 1 << 20, 4)
        );
        assert_eq!(
            (b.dtype, b.op, b.iters, b.warmup, b.algorithm, b.no_check),
            (a.dtype, a.op, a.iters, a.warmup, a.algorithm, true)
        );
        assert_eq!(b.transport, TransportChoice::Tcp);
        for name in [
            "all_reduce",
            "all-to-all",
            "alltoall",
            "reduce_scatter_perf",
            "SendRecv",
            "barrier",
            "broadcast",
            "reduce",
        ] {
            assert!(parse(&[name]).is_ok(), "{name}");
        }
    }

    #[test]
    fn bad_options_are_clear_errors() {
        for (argv, needle) in [
            (&["scan"][..], "unknown collective"),
            (&["-b", "8X"][..], "invalid size"),
            (&["-d", "f8"][..], "unknown type"),
            (&["-o", "xor"][..], "unknown op"),
            (&["--transport", "ib"][..], "auto, shm or tcp"),
            (&["--algorithm", "magic"][..], "unknown algorithm"),
            (&["-a", "median"][..], "unknown average"),
            (&["--gpu-path", "nvlink"][..], "unknown GPU path \"nvlink\""),
        ] {
            let e = parse(argv)
                .err()
                .unwrap_or_else(|| panic!("{argv:?} parsed"));
            assert!(e.to_string().contains(needle), "{argv:?}: {e}");
        }
        for (argv, needle) in [
            (&["-b", "64", "-e", "8"][..], "larger than max"),
            (&["-f", "1"][..], "step factor"),
            (&["--ranks", "0"][..], "at least 1"),
            (&["--ranks", "100000"][..], "more than gpucomm starts"),
            (
                &["broadcast", "--root", "2"][..],
                "--root 2 is not a rank of a 2-rank job",
            ),
            (&["-n", "0"][..], "--iters"),
            (
                &["all_reduce", "--algorithm", "bruck"][..],
                "--algorithm bruck does not implement all_reduce (on 2 ranks: ring, tree,",
            ),
            (
                &["all_gather", "--algorithm", "tree"][..],
                "--algorithm tree does not implement all_gather",
            ),
        ] {
            let e = parse(argv).unwrap().plan().unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{argv:?}: {e:#}");
        }
    }

    #[test]
    fn barrier_has_one_row() {
        let a = parse(&["barrier", "-b", "8", "-e", "1M"]).unwrap();
        assert_eq!(a.plan().unwrap().sizes, vec![0]);
    }

    #[test]
    fn iteration_counts_adapt_to_size() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.iters_for(8), 1000);
        assert_eq!(a.iters_for(1 << 20), 256);
        assert_eq!(a.iters_for(64 << 20), 5);
        assert_eq!((a.warmup_for(8), a.warmup_for(64 << 20)), (5, 2));
        let a = parse(&["-n", "3", "-w", "0"]).unwrap();
        assert_eq!((a.iters_for(8), a.warmup_for(8)), (3, 0));
    }
}
