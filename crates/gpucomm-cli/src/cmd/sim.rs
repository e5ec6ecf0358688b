//! `gpucomm sim`: predict collectives, transfers and training steps on
//! modeled fabrics (see `docs/sim.md`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;
use gpucomm_algo::Collective;
use gpucomm_sim::collective::{
    AlgoChoice, Average, CollOptions, CollResult, Select, Tuner, simulate,
};
use gpucomm_sim::exec::{ExecResult, Symmetry};
use gpucomm_sim::fabric::Fabric;
use gpucomm_sim::machine::{ClusterFabric, NetLayout};
use gpucomm_sim::model::Protocol;
use gpucomm_sim::train::{
    CommTimes, MODEL_PRESETS, ModelSpec, Sharding, TrainConfig, prefill, step,
};
use gpucomm_sim::transfer::{Endpoint, copy, p2p, rdma_between};
use gpucomm_sim::{Engine, Machine, SimError, calibration, trace};
use serde_json::json;

use super::common::{
    format_bytes, nccl_type_name, parse_dtype, parse_size, size_sweep, usage, usage_error,
};

/// Arguments of `gpucomm sim`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: SimCmd,
}

/// `gpucomm sim COLLECTIVE` takes a collective spelled as `gpucomm bench`
/// and `gpucomm algo` take it ([`Collective::from_name`]: `allreduce`,
/// `AllGather`, `all-to-all`, `all_reduce_perf`, `bcast`): the command
/// line with that word written as the subcommand's name. Anything else is
/// left for clap to parse (and refuse).
pub fn collective_spelled(mut argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    // `gpucomm sim X`, `gpucomm sim help X` and `gpucomm help sim X`.
    let mut at = match (argv.get(1), argv.get(2)) {
        (Some(a), _) if a == "sim" => 2,
        (Some(a), Some(b)) if a == "help" && b == "sim" => 3,
        _ => return argv,
    };
    if argv.get(at).is_some_and(|w| w == "help") {
        at += 1;
    }
    if let Some(word) = argv.get_mut(at) {
        let name = word
            .to_str()
            .filter(|w| !w.starts_with('-'))
            .and_then(Collective::from_name)
            .map(|c| c.name());
        if let Some(name) = name {
            *word = name.into();
        }
    }
    argv
}

#[derive(Subcommand, Debug)]
enum SimCmd {
    /// AllReduce sweep, nccl-tests style.
    #[command(name = "all_reduce")]
    AllReduce(CollArgs),
    /// AllGather sweep.
    #[command(name = "all_gather")]
    AllGather(CollArgs),
    /// ReduceScatter sweep.
    #[command(name = "reduce_scatter")]
    ReduceScatter(CollArgs),
    /// Broadcast sweep (root: `--root`, 0 by default).
    Broadcast(CollArgs),
    /// Reduce sweep (root: `--root`, 0 by default).
    Reduce(CollArgs),
    /// AllToAll sweep.
    #[command(name = "all_to_all")]
    AllToAll(CollArgs),
    /// SendRecv ring shift by one.
    Sendrecv(CollArgs),
    /// Gather sweep (root: `--root`, 0 by default), as nccl-tests'
    /// gather_perf: every rank sends the root one block.
    Gather(CollArgs),
    /// Scatter sweep (root: `--root`, 0 by default), as nccl-tests'
    /// scatter_perf: the root sends every rank its block.
    Scatter(CollArgs),
    /// GPU-GPU bandwidth and latency, as p2pBandwidthLatencyTest measures them.
    P2p(P2pArgs),
    /// Host/device/storage copy bandwidth, as bandwidthTest measures it.
    Copy(CopyArgs),
    /// GPU-GPU between two nodes: GPUDirect RDMA vs staged through host memory.
    Rdma(RdmaArgs),
    /// A data-parallel training step: DDP gradient buckets, or FSDP/ZeRO sharding.
    Train(TrainArgs),
    /// Predict every case of a calibration file and compare. Exits 0 when
    /// every case is within 10%, 1 when one is not or cannot be predicted
    /// (as `bench` does for wrong results), saying which on stderr.
    Calibrate(CalibrateArgs),
}

#[derive(clap::Args, Debug, Clone)]
struct Machine_ {
    /// Machine: a gpucomm-topo preset (dgx1-v100, dgx2, dgx-a100, dgx-h100, hgx-h200,
    /// gb200-nvl72, pcie-8gpu, dgx-b200, workstation-rtx4090, dgx1-p100, hgx-a800,
    /// hgx-h800, gh200, quad-gh200; see `gpucomm topo --list`), `local`, or a
    /// topology file.
    #[arg(long, short = 't', default_value = "dgx-h100")]
    topology: String,
    /// Number of nodes (default: as many as the topology holds; a preset is one node).
    #[arg(long)]
    nodes: Option<usize>,
    /// Use only the first N GPUs of each node.
    #[arg(long)]
    gpus: Option<usize>,
    /// NICs per node: replaces the node's NICs with this many, spread over
    /// the GPUs' PCIe attachment points (as `gpucomm topo --nics`).
    #[arg(long)]
    nics: Option<usize>,
    /// NIC port speed: edr, hdr, hdr100, ndr, ndr200, xdr, roce400, eth100...
    /// (as `gpucomm topo --nic-speed`).
    #[arg(long)]
    nic_speed: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Inter-node network: rail (default), single, leaf-spine (as `gpucomm topo`).
    #[arg(long)]
    fabric: Option<String>,
    /// Leaf-to-spine oversubscription (1 = non-blocking; leaf-spine fabric).
    #[arg(long, value_parser = super::topo::parse_oversubscription)]
    oversubscription: Option<f64>,
    /// Nodes per leaf switch (leaf-spine fabric; default 4).
    #[arg(long)]
    nodes_per_leaf: Option<usize>,
    /// The network switches reduce in the network (InfiniBand SHARP):
    /// enables `--algorithm collnet` (`collnet_chain`) and `nvls` across nodes.
    #[arg(long)]
    sharp: bool,
}

fn parse_p2p_level(s: &str) -> Result<gpucomm_sim::machine::P2pLevel, String> {
    gpucomm_sim::machine::P2pLevel::parse(s)
        .ok_or_else(|| format!("{s:?}: not one of loc, nvl, nvb, pix, pxb, phb, sys"))
}

#[derive(clap::Args, Debug)]
struct CollArgs {
    #[command(flatten)]
    m: Machine_,
    #[command(flatten)]
    p2p: P2pLevelArg,
    /// Smallest size (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "8")]
    min: String,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "128M")]
    max: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    factor: u64,
    #[command(flatten)]
    tuner: TunerArgs,
    /// Channels (default: one per NIC across nodes, one inside a node, NCCL's own where NCCL reads over NVLink, fewer for a small ring or tree operation as NCCL runs it, NCCL's per peer for sendrecv, all_to_all, gather and scatter across nodes; a count given runs as given)
    #[arg(long)]
    channels: Option<u16>,
    /// Write a Chrome trace (one track per rank and per busy link) of the largest size.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print the simulator's own speed (wall time, flows and events per second).
    #[arg(long)]
    timing: bool,
    /// Disable the node-symmetry reduction (simulate every rank).
    #[arg(long)]
    no_symmetry: bool,
    /// Which rank's time the table reports, as nccl-tests' `-a`: `avg`
    /// (the mean over ranks), `max` (the last rank's: the collective's
    /// completion; what a `-g 8` run in one process times), `min` or
    /// `rank0`. Default: nccl-tests' default as it comes out, `avg` for
    /// broadcast and reduce (whose ranks finish one after another along
    /// the chain), `max` for the others (whose ranks finish together in
    /// NCCL; the simulator's whole ring steps would spread them).
    #[arg(long)]
    average: Option<String>,
    /// Back-to-back iterations each size's time is taken over, as
    /// nccl-tests' `-n` (its default is 20): every rank starts its next
    /// operation when it has finished its own previous one, so a chain's
    /// early ranks overlap the next iteration. Default 1: one operation
    /// (measured chains overlap less than the loop model at mid sizes;
    /// docs/sim.md, "Back-to-back iterations").
    #[arg(short = 'n', long, default_value_t = 1)]
    iters: u32,
    /// Root rank of broadcast, reduce, gather and scatter, as nccl-tests' `-r` (ranks are
    /// numbered node by node: rank r is GPU r % GPUs-per-node of node
    /// r / GPUs-per-node).
    #[arg(short = 'r', long, default_value_t = 0)]
    root: usize,
    /// Data type, as nccl-tests' `-d` (float, half, bfloat16, double,
    /// int8, int32, ... or gpucomm's f32, f16, bf16...): sizes run as a
    /// whole number of elements, as nccl-tests runs them; the time depends
    /// on the bytes alone.
    #[arg(short = 'd', long, alias = "dtype", default_value = "float", value_parser = parse_dtype)]
    datatype: gpucomm::DataType,
}

#[derive(clap::Args, Debug)]
struct P2pArgs {
    #[command(flatten)]
    m: Machine_,
    /// Write a Chrome trace of the run (phases; compute and communication for train).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// The two GPUs, `A,B`.
    #[arg(long, default_value = "0,1")]
    pair: String,
    /// Copy both ways at once and report the sum.
    #[arg(long)]
    bidirectional: bool,
    /// Disable peer access: the driver stages the copy through host memory.
    #[arg(long)]
    no_p2p: bool,
    /// Bytes per copy.
    #[arg(long, default_value = "40000000")]
    size: String,
}

#[derive(clap::Args, Debug)]
struct CopyArgs {
    #[command(flatten)]
    m: Machine_,
    /// Write a Chrome trace of the run (phases; compute and communication for train).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Source: host, gpuN, storage.
    #[arg(long, default_value = "host")]
    from: String,
    /// Destination: host, gpuN.
    #[arg(long, default_value = "gpu0")]
    to: String,
    /// Host memory is pageable (staged through a pinned bounce buffer):
    /// a copy between host memory and a GPU only.
    #[arg(long)]
    pageable: bool,
    /// Storage reads go through a host bounce buffer instead of GPUDirect
    /// Storage: a read from storage into a GPU only.
    #[arg(long)]
    no_gds: bool,
    /// Bytes per copy.
    #[arg(long, default_value = "32M")]
    size: String,
}

#[derive(clap::Args, Debug)]
struct RdmaArgs {
    #[command(flatten)]
    m: Machine_,
    /// Write a Chrome trace of the run (phases; compute and communication for train).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Local GPU index (the same GPU on the peer node).
    #[arg(long, default_value_t = 0)]
    gpu: usize,
    /// The two nodes, `A,B`: GPU `--gpu` of node A sends to the same GPU
    /// of node B. Nodes of the machine: a one-node topology runs on
    /// `--nodes` (2 if left out), a multi-node topology file on its own.
    #[arg(long, default_value = "0,1")]
    node_pair: String,
    /// Stage through host memory instead of GPUDirect RDMA.
    #[arg(long)]
    no_gdr: bool,
    /// Bytes.
    #[arg(long, default_value = "1G")]
    size: String,
}

/// `--nccl-p2p-level` (`sim` collectives and `sim train`).
#[derive(clap::Args, Debug)]
struct P2pLevelArg {
    /// NCCL_P2P_LEVEL the collectives run under: loc, nvl, nvb, pix, pxb,
    /// phb, sys (default: NCCL's own, P2P over NVLink or a common PCIe
    /// switch, and between an AMD host's two GPUs). It decides which GPUs
    /// the header notes as joined through host memory (NCCL's SHM
    /// transport, which the simulator does not model); the simulated times
    /// do not change.
    #[arg(long, value_parser = parse_p2p_level)]
    nccl_p2p_level: Option<gpucomm_sim::machine::P2pLevel>,
}

impl P2pLevelArg {
    /// Sets `mach`'s level (NCCL's own rule where none is given).
    fn apply(&self, mach: &mut Machine) {
        mach.nccl_p2p_level = self.nccl_p2p_level;
    }
}

/// What the tuner picks from, and how (`sim` collectives and `sim train`).
#[derive(clap::Args, Debug)]
struct TunerArgs {
    /// Algorithm (ring, tree, direct, halving_doubling, recursive_doubling,
    /// hierarchical, bruck, pat, nvls, nvls_tree, collnet, collnet_chain), or those the tuner picks
    /// from in NCCL_ALGO's syntax: `ring,tree` (those only), `^nvls,nvls_tree`
    /// (all but those); default: the tuner picks among NCCL's.
    #[arg(long, short = 'a')]
    algorithm: Option<String>,
    /// NCCL protocol (LL, LL128, Simple), or a list in NCCL_PROTO's
    /// syntax (`^LL128`: all but LL128); default: the tuner picks among
    /// those NCCL enables on the machine.
    #[arg(long, short = 'p')]
    protocol: Option<String>,
    /// How the tuner picks: `nccl` (what NCCL's cost model picks, then
    /// simulated: what NCCL would run) or `fastest` (the fastest simulated
    /// candidate: what NCCL_ALGO/NCCL_PROTO could get).
    #[arg(long, default_value = "nccl")]
    tuner: String,
}

impl TunerArgs {
    /// The options as given, for `--json` output (`null` where not given).
    fn json(&self) -> serde_json::Value {
        json!({"algorithm": self.algorithm, "protocol": self.protocol, "tuner": self.tuner})
    }

    /// What the options restrict, as given (None: NCCL's tuner, unrestricted).
    fn restriction(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(x) = &self.algorithm {
            parts.push(format!("--algorithm {x}"));
        }
        if let Some(x) = &self.protocol {
            parts.push(format!("--protocol {x}"));
        }
        if !self.tuner.eq_ignore_ascii_case("nccl") {
            parts.push(format!("--tuner {}", self.tuner));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// The collective options these set (the rest default).
    fn options(&self) -> anyhow::Result<CollOptions> {
        let algorithm = match &self.algorithm {
            None => Select::Any,
            Some(s) => match Select::parse(s, AlgoChoice::parse) {
                Ok(x) => x,
                Err(e) => usage!(
                    "--algorithm: {e} ({}; a list, or ^ and a list to exclude)",
                    AlgoChoice::names()
                ),
            },
        };
        let protocol = match &self.protocol {
            None => Select::Any,
            Some(s) => match Select::parse(s, Protocol::parse) {
                Ok(x) => x,
                Err(e) => usage!(
                    "--protocol: {e} (LL, LL128, Simple; a list, or ^ and a list to exclude)"
                ),
            },
        };
        let Some(tuner) = Tuner::parse(&self.tuner) else {
            usage!("unknown tuner {:?} (nccl, fastest)", self.tuner);
        };
        Ok(CollOptions {
            algorithm,
            protocol,
            tuner,
            ..Default::default()
        })
    }
}

#[derive(clap::Args, Debug)]
struct TrainArgs {
    #[command(flatten)]
    m: Machine_,
    #[command(flatten)]
    p2p: P2pLevelArg,
    /// Write a Chrome trace of the run (phases; compute and communication for train).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Model: a preset (resnet50, bert-large, gpt2-xl; any case) or a file
    /// (TOML, or JSON when it ends in .json). A preset name is the preset
    /// even where a file of that name exists, as with --topology: ./NAME
    /// reads the file.
    #[arg(long, default_value = "bert-large")]
    model: String,
    /// Node counts to sweep, e.g. 1,2,4,8,16,32,64 (default: --nodes;
    /// not both): run in increasing order; a count given twice is refused.
    #[arg(long, value_delimiter = ',', conflicts_with = "nodes")]
    sweep_nodes: Vec<usize>,
    /// DDP bucket cap in MiB (DDP's bucket_cap_mb). Left out: 25 MiB with
    /// a 1 MiB first bucket, PyTorch's default; given (even 25): every
    /// bucket, the first included, capped at it, as PyTorch does.
    #[arg(long)]
    bucket_mb: Option<f64>,
    /// How the ranks hold the model: ddp (whole model, gradients
    /// all-reduced in buckets), shard_grad_op (FSDP's, ZeRO-2: parameters
    /// all-gathered per layer in forward, gradients reduce-scattered) or
    /// full_shard (FSDP's default, ZeRO-3: parameters gathered again in
    /// backward); zero2, zero3 and fsdp are taken too.
    #[arg(long, default_value = "ddp", value_parser = parse_sharding)]
    sharding: Sharding,
    #[command(flatten)]
    tuner: TunerArgs,
}

fn parse_sharding(s: &str) -> Result<Sharding, String> {
    Sharding::parse(s).ok_or_else(|| {
        format!("unknown sharding {s:?} (ddp, shard_grad_op or zero2, full_shard or zero3 or fsdp)")
    })
}

#[derive(clap::Args, Debug)]
struct CalibrateArgs {
    /// The calibration file [default: shared/calibration/measurements.toml
    /// under the current directory, else under its parent (the checkout
    /// sits beside shared/)].
    #[arg(long)]
    file: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `gpucomm sim`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let trace = match &args.cmd {
        SimCmd::AllReduce(a)
        | SimCmd::AllGather(a)
        | SimCmd::ReduceScatter(a)
        | SimCmd::Broadcast(a)
        | SimCmd::Reduce(a)
        | SimCmd::AllToAll(a)
        | SimCmd::Sendrecv(a)
        | SimCmd::Gather(a)
        | SimCmd::Scatter(a) => a.trace.as_deref(),
        SimCmd::P2p(a) => a.trace.as_deref(),
        SimCmd::Copy(a) => a.trace.as_deref(),
        SimCmd::Rdma(a) => a.trace.as_deref(),
        SimCmd::Train(a) => a.trace.as_deref(),
        SimCmd::Calibrate(_) => None,
    };
    if let Some(p) = trace {
        super::common::check_output_path("--trace", p)?;
    }
    match args.cmd {
        SimCmd::AllReduce(a) => collective(Collective::AllReduce, a),
        SimCmd::AllGather(a) => collective(Collective::AllGather, a),
        SimCmd::ReduceScatter(a) => collective(Collective::ReduceScatter, a),
        SimCmd::Broadcast(a) => collective(Collective::Broadcast { root: 0 }, a),
        SimCmd::Reduce(a) => collective(Collective::Reduce { root: 0 }, a),
        SimCmd::AllToAll(a) => collective(Collective::AllToAll, a),
        SimCmd::Sendrecv(a) => collective(Collective::SendRecv { shift: 1 }, a),
        SimCmd::Gather(a) => collective(Collective::Gather { root: 0 }, a),
        SimCmd::Scatter(a) => collective(Collective::Scatter { root: 0 }, a),
        SimCmd::P2p(a) => p2p_cmd(a),
        SimCmd::Copy(a) => copy_cmd(a),
        SimCmd::Rdma(a) => rdma_cmd(a),
        SimCmd::Train(a) => train_cmd(a),
        SimCmd::Calibrate(a) => calibrate_cmd(a),
    }
}

/// The machine the options describe. `most_nodes`: the most nodes the
/// command runs on where it gives the node counts itself (`train
/// --sweep-nodes`, `rdma`'s two nodes); else `--nodes` (default 1). The
/// network options are checked against it.
fn machine(m: &Machine_, most_nodes: Option<usize>) -> anyhow::Result<Machine> {
    let nic_speed = m
        .nic_speed
        .as_deref()
        .map(super::topo::nic_speed)
        .transpose()?;
    let mut mach = select_machine(&m.topology, m.nics, nic_speed)?;
    if let Some(n) = m.nodes {
        if n == 0 {
            usage!("--nodes must be at least 1");
        }
        nodes_fit(m, &mach, "--nodes", n)?;
    }
    // Replicated nodes need NICs to be joined (a file of several nodes
    // without any is the file's failure, found where a route is).
    let most = most_nodes.or(m.nodes).unwrap_or(1);
    if most > 1 && mach.nodes == 1 && mach.node.nics == 0 {
        usage!(
            "{}: the nodes have no NIC to join them ({}{})",
            match most_nodes {
                Some(_) if m.nodes.is_none() => format!("{most} nodes"),
                _ => format!("--nodes {most}"),
            },
            m.topology,
            if m.nics == Some(0) {
                " with --nics 0"
            } else {
                " has none; --nics N adds them"
            }
        );
    }
    if let Some(g) = m.gpus {
        mach.use_gpus(g)
            .map_err(asked)
            .with_context(|| format!("--gpus {g}"))?;
    }
    let net_flags =
        m.sharp || m.fabric.is_some() || m.oversubscription.is_some() || m.nodes_per_leaf.is_some();
    if net_flags {
        if mach.nodes > 1 {
            usage!(
                "{} describes its own network ({}); --fabric, --oversubscription, --nodes-per-leaf \
                 and --sharp apply to a one-node topology replicated with --nodes",
                m.topology,
                mach.network.describe()
            );
        }
        // Bad command lines (exit 2), as `gpucomm topo` refuses them.
        let opts = super::topo::network_options(
            m.fabric.as_deref(),
            most_nodes.unwrap_or(m.nodes.unwrap_or(1)),
            m.nodes_per_leaf,
            m.oversubscription,
            m.sharp,
        )?;
        mach = mach
            .with_cluster_options(&opts)
            .map_err(asked)
            .context("network options")?;
    }
    mach.nodes = m.nodes.unwrap_or(mach.nodes);
    if m.sharp {
        // Switches that cannot reduce large messages (EDR's SHARPv1, a
        // network that is not InfiniBand, no NIC) would otherwise be taken
        // silently: the run fell back to point-to-point algorithms under a
        // header saying the switches reduce. CollNet runs wherever they
        // can (Direct on NVSwitch nodes, Chain elsewhere).
        gpucomm_sim::innet::sharp_usable(&mach, mach.nodes)
            .map_err(asked)
            .context("--sharp")?;
    }
    Ok(mach)
}

/// `--topology` read, with the NICs `--nics`/`--nic-speed` give it
/// ([`Machine::select_with_nics`]). A name that is neither a preset, `local`
/// nor an existing path, and NIC options the topology cannot take, are bad
/// command lines (exit 2); a file that cannot be read or is not a topology
/// is a failure (exit 1).
fn select_machine(
    spec: &str,
    nics: Option<usize>,
    nic_speed: Option<gpucomm_topo::catalog::LinkKind>,
) -> anyhow::Result<Machine> {
    let flag = || format!("--topology {spec}");
    let t = match gpucomm_topo::select(spec, &gpucomm_topo::ClusterOptions::default()) {
        Ok(t) => t,
        // Neither a preset nor a file: the command line's fault.
        Err(e @ gpucomm_topo::TopoError::UnknownTopology { .. }) => {
            return Err(usage_error(anyhow::Error::new(e).context(flag())));
        }
        // A file that cannot be read, said from its name on.
        Err(e) if e.file().is_some() => return Err(e.into()),
        // A machine that cannot be discovered.
        Err(e) => return Err(anyhow::Error::new(e).context(flag())),
    };
    // What the topology itself says fails the run; what only the NIC
    // options make fail is the command line's.
    Machine::from_topology(&t)
        .with_context(flag)?
        .with_nics(&t, nics, nic_speed)
        .map_err(asked)
        .with_context(flag)
}

/// A simulator error about what the command line asked of a machine that
/// loaded: an invalid request for this machine or these options
/// ([`SimError::Model`]: a GPU that does not exist, an algorithm the
/// machine cannot run, a size beyond its memory; [`SimError::Schedule`]: an
/// algorithm without the collective; [`SimError::TooLarge`]: beyond what
/// the simulator takes here) is a bad command line (exit 2); the run's own
/// failures (no route, deadlock, a bound reached) stay failures (exit 1).
fn asked(e: SimError) -> anyhow::Error {
    match e {
        // Said as the request's fault, without the "invalid model:" that
        // names a hardware description's (`--gpus 99: dgx-h100 has 8 GPUs
        // per node, 99 asked`).
        SimError::Model(why) => usage_error(anyhow::anyhow!(why)),
        SimError::Schedule(_) | SimError::TooLarge { .. } => usage_error(e),
        other => other.into(),
    }
}

/// A node count `flag` gave for a run on `mach` as its topology describes
/// it: any for a one-node topology (replicated); exactly its own for one
/// that describes several nodes and their network. `--nodes` and every
/// count of `train --sweep-nodes` are checked here.
fn nodes_fit(m: &Machine_, mach: &Machine, flag: &str, n: usize) -> anyhow::Result<()> {
    if mach.nodes > 1 && n != mach.nodes {
        usage!(
            "{flag} {n}: {} already describes {} nodes (leave {flag} out, or give a one-node topology)",
            m.topology,
            mach.nodes
        );
    }
    Ok(())
}

fn out() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

/// The header line saying that NCCL passes data between GPUs `pair` (and
/// maybe others) through host memory, its SHM transport, which the
/// simulator moves peer to peer.
fn write_shm_note(
    o: &mut impl Write,
    fabric: &ClusterFabric,
    pair: Option<(usize, usize)>,
) -> anyhow::Result<()> {
    if let Some((a, b)) = pair {
        writeln!(
            o,
            "# note: NCCL passes data between some of a node's GPUs (GPU{a} and GPU{b}: {}) \
             through host memory, its SHM transport, which the simulator does not model: it \
             moves that data peer to peer (through the CPU where no NVLink joins them), where \
             published SHM runs reach a fraction of the PCIe link (docs/sim.md, \"What is not \
             modeled\")",
            fabric.nccl_shm_reason()
        )?;
    }
    Ok(())
}

/// The header of `sim COLLECTIVE`'s table: what runs on what, how times
/// are taken, the network, and the column names.
fn write_collective_header(
    o: &mut impl Write,
    coll: Collective,
    mach: &Machine,
    fabric: &ClusterFabric,
    shown: Average,
    a: &CollArgs,
    shm_pair: Option<(usize, usize)>,
) -> anyhow::Result<()> {
    // A one-node topology replicated: `2 x dgx-h100`; a topology
    // that holds its nodes, once (`2 x dgx-h100x2` read as two
    // copies of a two-node machine).
    let (times, nodes) = if mach.topology_nodes > 1 {
        (String::new(), format!("{} nodes, ", mach.nodes))
    } else {
        (format!("{} x ", mach.nodes), String::new())
    };
    writeln!(
        o,
        "# gpucomm sim {}: {times}{} ({nodes}{} GPUs per node, {} ranks){}",
        coll.name(),
        mach.name,
        fabric.ranks_per_node(),
        fabric.ranks(),
        coll.root().map_or(String::new(), |r| format!(", root {r}"))
    )?;
    writeln!(
        o,
        "# engine: NCCL-style kernels and protocols (LL, LL128, Simple); busbw as nccl-tests"
    )?;
    writeln!(
        o,
        "# time: {} (--average {}){}",
        match shown {
            Average::Avg => "each rank's, averaged over ranks as nccl-tests reports it",
            Average::Max => "the last rank's (the collective's completion)",
            Average::Min => "the first rank's to finish",
            Average::Rank0 => "rank 0's",
        },
        shown.name(),
        match a.iters {
            1 => String::new(),
            n => format!(
                "; per iteration of {n} back to back, each rank's from the loop's start \
                 (--iters {n})"
            ),
        }
    )?;
    if mach.nodes > 1 {
        write_network(o, mach)?;
    }
    if let Some(line) = a.tuner.restriction() {
        writeln!(o, "# tuner: {line}")?;
    }
    write_shm_note(o, fabric, shm_pair)?;
    writeln!(o, "#")?;
    writeln!(
        o,
        "# {:>12} {:>12} {:>6} {:>18} {:>7} {:>12} {:>12} {:>12}",
        "size", "count", "type", "algorithm", "proto", "time(us)", "algbw(GB/s)", "busbw(GB/s)"
    )?;
    Ok(())
}

fn collective(coll: Collective, a: CollArgs) -> anyhow::Result<ExitCode> {
    let coll = coll.with_root(a.root);
    let mut mach = machine(&a.m, None)?;
    a.p2p.apply(&mut mach);
    let fabric = mach.fabric(Engine::Nccl, mach.nodes).map_err(asked)?;
    let shm_pair = gpucomm_sim::collective::nccl_shm_pair(&fabric, coll);
    let base = a.tuner.options()?;
    let average = match &a.average {
        None => None,
        Some(s) => match Average::parse(s) {
            Some(x) => Some(x),
            None => usage!("--average {s:?}: not one of avg, max, min, rank0 (or nccl-tests' 0-3)"),
        },
    };
    let shown = average.unwrap_or(Average::default_for(coll));
    if a.iters == 0 {
        usage!("--iters 0: a loop runs at least one iteration");
    }
    let ranks = fabric.ranks();
    let elem = a.datatype.size() as u64;
    // Each size of the sweep as nccl-tests runs and prints it.
    let mut sizes: Vec<u64> = size_sweep(parse_size(&a.min)?, parse_size(&a.max)?, a.factor)?
        .into_iter()
        .map(|b| gpucomm_sim::collective::nccl_tests_bytes(coll, b, ranks, elem))
        .collect();
    // Sweep sizes that round to one (0, 1 and 2 bytes of floats are all
    // 0) are one row: the rounding keeps the order, so they are adjacent.
    sizes.dedup();
    match coll.root() {
        Some(root) if root >= ranks => usage!(
            "--root {root}: the run has {ranks} ranks (0 to {})",
            ranks - 1
        ),
        None if a.root != 0 => {
            usage!("--root applies to broadcast, reduce, gather and scatter only")
        }
        _ => {}
    }
    // Checked before the sweep (its smaller sizes may take minutes).
    if let Some(&largest) = sizes.last() {
        mach.check_device_memory(
            gpucomm_sim::collective::buffer_bytes(coll, largest, ranks),
            &format!(
                "{} of {} (its send and receive buffers, out of place as nccl-tests allocates them)",
                coll.name(),
                format_bytes(largest)
            ),
        )
        .map_err(asked)?;
    }
    // The table's header, then each row as its size is simulated (as
    // nccl-tests prints them): a sweep's large sizes may take minutes.
    let mut o = out();
    if !a.m.json {
        write_collective_header(&mut o, coll, &mach, &fabric, shown, &a, shm_pair)?;
    }
    let mut results: Vec<CollResult> = Vec::new();
    let mut walls = Vec::new();
    let last = sizes.len().saturating_sub(1);
    let mut trace_run: Option<ExecResult> = None;
    for (i, &bytes) in sizes.iter().enumerate() {
        let tracing = a.trace.is_some() && i == last;
        let opts = CollOptions {
            channels: a.channels,
            average,
            iterations: a.iters,
            symmetry: !a.no_symmetry,
            trace_ranks: if tracing { ranks.min(64) } else { 0 },
            ..base.clone()
        };
        let t0 = Instant::now();
        let r = simulate(&fabric, coll, bytes, &opts)
            .map_err(asked)
            .with_context(|| {
                format!(
                    "{} of {} on {} ranks",
                    coll.name(),
                    format_bytes(bytes),
                    ranks
                )
            })?;
        walls.push(t0.elapsed().as_secs_f64());
        if tracing {
            trace_run = r.exec.clone();
        }
        if !a.m.json {
            writeln!(
                o,
                "  {:>12} {:>12} {:>6} {:>18} {:>7} {:>12.2} {:>12.2} {:>12.2}",
                r.bytes,
                gpucomm_sim::collective::nccl_tests_count(coll, r.bytes, ranks, elem),
                nccl_type_name(a.datatype),
                r.algorithm.name(),
                protocol_name(&r).unwrap_or("-"),
                r.time.as_us(),
                r.algbw_gbps,
                r.busbw_gbps
            )?;
        }
        results.push(r);
    }
    if a.m.json {
        let rows: Vec<_> = results
            .iter()
            .zip(&walls)
            .map(|(r, w)| {
                let mut v = json!({
                    "bytes": r.bytes, "time_us": r.time.as_us(),
                    "completion_us": r.completion.as_us(), "algbw_gbps": r.algbw_gbps,
                    "busbw_gbps": r.busbw_gbps, "algorithm": r.algorithm.name(),
                    "protocol": protocol_name(r),
                });
                if let Some(b) = r.simulated_bytes {
                    v["simulated_bytes"] = json!(b);
                }
                if let Some(ch) = r.channels {
                    v["channels"] = json!(ch);
                }
                if !r.passed_over.is_empty() {
                    let over: Vec<_> = r
                        .passed_over
                        .iter()
                        .map(|(c, p, why)| {
                            json!({"algorithm": c.name(), "protocol": p.name(), "why": why})
                        })
                        .collect();
                    v["nccl_pick_not_simulated"] = json!(over);
                }
                if a.timing {
                    v["wall_s"] = json!(w);
                    if let Some(e) = &r.exec {
                        v["flows"] = json!(e.stats.flows);
                        v["events"] = json!(e.stats.events);
                        v["simulated_ranks"] = json!(e.simulated_ranks);
                        // Multi-node runs only: one node has nothing to reduce.
                        if ranks > fabric.ranks_per_node() {
                            v["every_rank_because"] = json!(e.symmetry.why_every_rank());
                        }
                    }
                }
                v
            })
            .collect();
        let mut doc = json!({"collective": coll.name(), "topology": mach.name, "nodes": mach.nodes,
                         "ranks": ranks, "network": network_json(&mach), "tuner": a.tuner.json(), "average": shown.name(),
                         "iterations": a.iters, "datatype": nccl_type_name(a.datatype), "results": rows});
        if let Some(root) = coll.root() {
            doc["root"] = json!(root);
        }
        if let Some((x, y)) = shm_pair {
            doc["nccl_shm_pair"] = json!([x, y]);
        }
        writeln!(o, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        for r in results.iter().filter(|r| !r.passed_over.is_empty()) {
            for (c, p, why) in &r.passed_over {
                writeln!(
                    o,
                    "# {}: NCCL's model rates {} {} above the {} {} reported, but it could not \
                     be simulated ({why})",
                    format_bytes(r.bytes),
                    c.name(),
                    p.name(),
                    r.algorithm.name(),
                    protocol_name(r).unwrap_or("-"),
                )?;
            }
        }
        if a.timing {
            writeln!(o, "#\n# simulator speed (this machine):")?;
            for (r, w) in results.iter().zip(&walls) {
                match &r.exec {
                    Some(e) => writeln!(
                        o,
                        "#   {:>10}: {:.3} s wall, {} ranks simulated of {}{}{}, {} flows, {} events, {:.2e} flows/s, {:.2e} events/s ({} candidates; {} rate recomputations over {} paths; {} flows took an ended flow's place)",
                        format_bytes(r.bytes),
                        w,
                        e.simulated_ranks,
                        ranks,
                        e.symmetry
                            .why_every_rank()
                            .map(|why| format!(" ({why})"))
                            .unwrap_or_default(),
                        r.channels
                            .map(|c| format!(", {c} channel{}", if c == 1 { "" } else { "s" }))
                            .unwrap_or_default(),
                        e.stats.flows,
                        e.stats.events,
                        e.stats.flows as f64 / w.max(1e-9),
                        e.stats.events as f64 / w.max(1e-9),
                        r.candidates.len(),
                        e.stats.recomputations,
                        e.stats.paths_recomputed,
                        e.stats.handovers
                    )?,
                    None => writeln!(
                        o,
                        "#   {:>10}: {:.3} s wall ({})",
                        format_bytes(r.bytes),
                        w,
                        r.algorithm.name()
                    )?,
                }
                if let Some(b) = r.simulated_bytes {
                    writeln!(
                        o,
                        "#   {:>10}  simulated: the first {} (NCCL's chunks, as many as the budget allows); the rest at the busiest link's rate",
                        "",
                        format_bytes(b)
                    )?;
                }
                if !r.model.is_empty() {
                    let mut rated = r.model.clone();
                    rated.sort_by_key(|m| m.2);
                    let list: Vec<String> = rated
                        .iter()
                        .map(|(c, p, t)| format!("{} {} {:.1} us", c.name(), p.name(), t.as_us()))
                        .collect();
                    writeln!(
                        o,
                        "#   {:>10}  NCCL's model (the tuner runs its first): {}",
                        "",
                        list.join(", ")
                    )?;
                }
                if !r.skipped.is_empty() {
                    let list: Vec<String> = r
                        .skipped
                        .iter()
                        .map(|(c, p, b)| match b {
                            Some(b) => format!("{} {} >= {:.1} us", c.name(), p.name(), b.as_us()),
                            None => format!("{} {}", c.name(), p.name()),
                        })
                        .collect();
                    let why = if r.model.is_empty() {
                        "bound above the best time"
                    } else {
                        "rated lower; lower bound where its steps were generated"
                    };
                    writeln!(
                        o,
                        "#   {:>10}  not simulated, {why}: {}",
                        "",
                        list.join(", ")
                    )?;
                }
            }
        }
        if let Some(r) = results.last()
            && let Some(e) = &r.exec
        {
            link_summary(&mut o, e, ranks, r.simulated_bytes)?;
        }
    }
    if let (Some(path), Some(run)) = (&a.trace, &trace_run) {
        std::fs::File::create(path)
            .map(std::io::BufWriter::new)
            .and_then(|f| trace::write_chrome_trace(f, run, &|l| fabric.link_name(l), 0.0))
            .with_context(|| format!("writing {}", path.display()))?;
        if !a.m.json {
            let part = match results.last().and_then(|r| r.simulated_bytes) {
                Some(b) => format!(", of the first {} simulated", format_bytes(b)),
                None => String::new(),
            };
            writeln!(
                o,
                "# trace: {}{part} (open in https://ui.perfetto.dev)",
                path.display()
            )?;
            if mach.ranks() > mach.gpus_per_node() && !a.no_symmetry {
                writeln!(
                    o,
                    "# trace: its size ran every rank (no node-symmetry reduction), which can move its time by a few percent from a run without --trace where ranks' blocks differ by an element"
                )?;
            }
        }
    } else if a.trace.is_some() && !a.m.json {
        writeln!(
            o,
            "# trace: nothing to trace (nvls, nvls_tree, collnet and collnet_chain run no schedule; NCCL runs nothing for no elements)"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The protocol a row ran with; none where NCCL discarded the collective
/// (no elements: nothing ran).
fn protocol_name(r: &CollResult) -> Option<&'static str> {
    (r.algorithm != AlgoChoice::Discarded).then(|| r.protocol.name())
}

/// The busiest links of run `e`, over its own time (where only a
/// pipeline's first chunks ran, `part` bytes of the collective, theirs).
fn link_summary(
    o: &mut impl Write,
    e: &ExecResult,
    ranks: usize,
    part: Option<u64>,
) -> anyhow::Result<()> {
    let secs = e.time.as_secs_f64();
    if e.links.is_empty() || secs <= 0.0 {
        return Ok(());
    }
    let mut links: Vec<_> = e.links.iter().collect();
    links.sort_by(|a, b| {
        let ua = a.bytes / (a.capacity_gbps * 1e9 * secs);
        let ub = b.bytes / (b.capacity_gbps * 1e9 * secs);
        ub.total_cmp(&ua).then_with(|| a.name.cmp(&b.name))
    });
    writeln!(
        o,
        "#\n# link utilisation (largest size{}; {} links carried data{}):",
        match part {
            Some(b) => format!(", its first {} as simulated", format_bytes(b)),
            None => String::new(),
        },
        e.links.len(),
        match e.symmetry {
            _ if e.simulated_ranks >= ranks => String::new(),
            Symmetry::Reduced { period: 1 } => ", node 0 stands for every node".to_string(),
            Symmetry::Reduced { period } => {
                format!(", nodes 0-{} (leaf 0) stand for every leaf", period - 1)
            }
            _ => String::new(),
        }
    )?;
    writeln!(
        o,
        "#   {:<36} {:>10} {:>12} {:>8} {:>8}",
        "link", "GB/s", "bytes", "busy%", "util%"
    )?;
    for l in links.iter().take(12) {
        writeln!(
            o,
            "#   {:<36} {:>10.1} {:>12} {:>7.1}% {:>7.1}%",
            l.name,
            l.capacity_gbps,
            format_bytes(l.bytes as u64),
            100.0 * l.busy.as_secs_f64() / secs,
            100.0 * l.bytes / (l.capacity_gbps * 1e9 * secs)
        )?;
    }
    if links.len() > 12 {
        writeln!(o, "#   ... {} more", links.len() - 12)?;
    }
    Ok(())
}

fn p2p_cmd(a: P2pArgs) -> anyhow::Result<ExitCode> {
    one_node(
        &a.m,
        "p2p: a peer copy joins two GPUs of one node (rdma runs between nodes)",
    )?;
    let mach = machine(&a.m, None)?;
    let Some((x, y)) = index_pair(&a.pair) else {
        usage!("--pair {:?}: expected two GPU indices like 0,1", a.pair);
    };
    for g in [x, y] {
        gpu_arg(&a.m, &mach, g, "--pair")?;
    }
    let size = copy_size(&a.size)?;
    // p2pBandwidthLatencyTest holds a source and a destination buffer on
    // each GPU.
    mach.check_device_memory(
        u128::from(size) * 2,
        &format!(
            "a peer copy of {} (a source and a destination buffer on each GPU)",
            format_bytes(size)
        ),
    )
    .map_err(asked)?;
    let r = p2p(&mach, x, y, a.bidirectional, !a.no_p2p, size).map_err(asked)?;
    write_spans(&a.trace, &phase_spans(&r.path, &r.phases))?;
    let mut o = out();
    if a.m.json {
        let doc = json!({"topology": mach.name, "pair": [x, y], "bidirectional": a.bidirectional,
            "p2p": r.p2p, "path": r.path, "bandwidth_gbps": r.bandwidth_gbps, "latency_us": r.latency_us, "bytes": size});
        writeln!(o, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            o,
            "# gpucomm sim p2p: {} GPU{x} <-> GPU{y}, copy engines, {} per copy",
            mach.name,
            format_bytes(size)
        )?;
        writeln!(
            o,
            "path:       {}{}",
            r.path,
            if a.no_p2p { " (P2P disabled)" } else { "" }
        )?;
        writeln!(
            o,
            "bandwidth:  {} {}",
            bandwidth(r.bandwidth_gbps),
            if a.bidirectional {
                "(both directions together)"
            } else {
                "(one direction)"
            }
        )?;
        writeln!(o, "latency:    {:.2} us", r.latency_us)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_spans(path: &Option<PathBuf>, spans: &[(String, String, f64, f64)]) -> anyhow::Result<()> {
    if let Some(p) = path {
        std::fs::write(p, serde_json::to_vec(&trace::spans(spans))?)
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("# trace: {} (open in https://ui.perfetto.dev)", p.display());
    }
    Ok(())
}

fn phase_spans(
    track: &str,
    phases: &[(String, gpucomm_sim::SimTime, gpucomm_sim::SimTime)],
) -> Vec<(String, String, f64, f64)> {
    phases
        .iter()
        .map(|(n, a, b)| (track.to_string(), n.clone(), a.as_us(), b.as_us()))
        .collect()
}

/// `--nodes` beyond one for a command inside one node (it changed
/// nothing): refused with `why`.
fn one_node(m: &Machine_, why: &str) -> anyhow::Result<()> {
    if let Some(n) = m.nodes.filter(|&n| n > 1) {
        usage!("--nodes {n}: {why}");
    }
    // Bad command lines (exit 2) too: NICs carry nothing inside a node.
    if m.nics.is_some() || m.nic_speed.is_some() {
        usage!("--nics and --nic-speed shape the network between nodes; {why}");
    }
    Ok(())
}

/// GPU `g` that option `what` names: one of the node's (the library's
/// "GPU index out of range" did not say which option gave it) and, with
/// `--gpus N`, one of the first N (a copy ran on a GPU past them).
fn gpu_arg(m: &Machine_, mach: &Machine, g: usize, what: &str) -> anyhow::Result<()> {
    if let Some(n) = m.gpus.filter(|&n| g >= n) {
        usage!(
            "{what}: gpu{g} is not in use: --gpus {n} uses GPUs 0 to {}",
            n.saturating_sub(1)
        );
    }
    let n = mach.node.gpus;
    if g >= n {
        usage!(
            "{what}: gpu{g} does not exist: {} has {n} GPU{} per node (gpu0 to gpu{})",
            mach.name,
            if n == 1 { "" } else { "s" },
            n.saturating_sub(1)
        );
    }
    Ok(())
}

/// A transfer's bandwidth as printed: GB/s to two places, MB/s below
/// 0.01 GB/s (a 1-byte copy printed 0.00 GB/s); `--json` keeps the number.
fn bandwidth(gbps: f64) -> String {
    if gbps >= 0.01 {
        format!("{gbps:.2} GB/s")
    } else if gbps * 1e3 >= 0.01 {
        format!("{:.2} MB/s", gbps * 1e3)
    } else {
        format!("{gbps:.3e} GB/s")
    }
}

/// The bytes of one copy (`--size` of p2p, copy and rdma): at least one.
fn copy_size(s: &str) -> anyhow::Result<u64> {
    let size = parse_size(s)?;
    if size == 0 {
        usage!("--size must be positive");
    }
    Ok(size)
}

fn endpoint(s: &str) -> anyhow::Result<Endpoint> {
    match Endpoint::parse(s) {
        Some(e) => Ok(e),
        None => usage!("unknown endpoint {s:?} (host, gpuN, storage)"),
    }
}

fn copy_cmd(a: CopyArgs) -> anyhow::Result<ExitCode> {
    one_node(&a.m, "copy: a copy stays inside one node")?;
    let mach = machine(&a.m, None)?;
    let size = copy_size(&a.size)?;
    let (from, to) = (endpoint(&a.from)?, endpoint(&a.to)?);
    for (e, what) in [(from, "--from"), (to, "--to")] {
        if let Endpoint::Gpu(g) = e {
            gpu_arg(&a.m, &mach, g, what)?;
        }
    }
    // Options the copy would not use (they changed nothing).
    let host_gpu = matches!(
        (from, to),
        (Endpoint::Host, Endpoint::Gpu(_)) | (Endpoint::Gpu(_), Endpoint::Host)
    );
    if a.pageable && !host_gpu {
        usage!(
            "--pageable: applies to a copy between host memory and a GPU (bandwidthTest's \
             --memory=pageable); {} -> {} uses no pageable buffer in the model",
            a.from,
            a.to
        );
    }
    if a.no_gds && !matches!((from, to), (Endpoint::Storage, Endpoint::Gpu(_))) {
        usage!(
            "--no-gds: applies to a read from storage into a GPU (GPUDirect Storage or a host \
             bounce buffer); {} -> {} has no choice of path",
            a.from,
            a.to
        );
    }
    // The GPU end's buffer (storage to host memory holds none).
    if [from, to].iter().any(|e| matches!(e, Endpoint::Gpu(_))) {
        mach.check_device_memory(size.into(), &format!("a copy of {}", format_bytes(size)))
            .map_err(asked)?;
    }
    let r = copy(&mach, from, to, a.pageable, !a.no_gds, size).map_err(asked)?;
    write_spans(&a.trace, &phase_spans(&r.path, &r.phases))?;
    let mut o = out();
    if a.m.json {
        let doc = json!({"topology": mach.name, "from": a.from, "to": a.to, "pageable": a.pageable,
            "path": r.path, "bandwidth_gbps": r.bandwidth_gbps, "time_us": r.time_us, "bytes": size});
        writeln!(o, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            o,
            "# gpucomm sim copy: {} {} -> {}, {}",
            mach.name,
            a.from,
            a.to,
            format_bytes(size)
        )?;
        writeln!(o, "path:       {}", r.path)?;
        writeln!(o, "bandwidth:  {}", bandwidth(r.bandwidth_gbps))?;
        writeln!(o, "time:       {:.2} us", r.time_us)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn rdma_cmd(a: RdmaArgs) -> anyhow::Result<ExitCode> {
    let (from, to) = node_pair(&a.node_pair)?;
    // The transfer joins two nodes: one node has no peer.
    if let Some(n) = a.m.nodes.filter(|&n| n < 2) {
        usage!(
            "--nodes {n}: rdma runs between two nodes (--node-pair, 0,1 by default); \
             leave --nodes out (2) or give 2 or more"
        );
    }
    let mut mach = machine(&a.m, Some(a.m.nodes.unwrap_or(2)))?;
    gpu_arg(&a.m, &mach, a.gpu, "--gpu")?;
    // A one-node topology runs on --nodes, 2 if left out; a multi-node
    // file on its own nodes (machine() refused another --nodes).
    mach.nodes = mach.nodes.max(2);
    if let Some(n) = [from, to].into_iter().find(|&n| n >= mach.nodes) {
        if mach.topology_nodes > 1 {
            usage!(
                "--node-pair {}: {} holds {} nodes (0 to {}), no node {n}",
                a.node_pair,
                a.m.topology,
                mach.nodes,
                mach.nodes - 1
            );
        }
        usage!(
            "--node-pair {}: the run has {} nodes (0 to {}), no node {n}; give --nodes {} or more",
            a.node_pair,
            mach.nodes,
            mach.nodes - 1,
            from.max(to) + 1
        );
    }
    let size = copy_size(&a.size)?;
    mach.check_device_memory(
        size.into(),
        &format!("a transfer of {}", format_bytes(size)),
    )
    .map_err(asked)?;
    let r = rdma_between(&mach, (from, to), a.gpu, !a.no_gdr, size).map_err(asked)?;
    write_spans(&a.trace, &phase_spans(&r.path, &r.phases))?;
    // The pair's leaves, on a leaf/spine network: between leaves a
    // transfer crosses the spine (and, oversubscribed, the leaves' uplinks).
    let leaves = match mach.network.layout {
        NetLayout::LeafSpine { nodes_per_leaf } if nodes_per_leaf > 0 => {
            Some((from / nodes_per_leaf, to / nodes_per_leaf))
        }
        _ => None,
    };
    let mut o = out();
    if a.m.json {
        let doc = json!({"topology": mach.name, "nodes": mach.nodes, "node_pair": [from, to],
            "leaves": leaves.map(|(x, y)| [x, y]), "gpu": a.gpu, "gdr": !a.no_gdr, "path": r.path,
            "network": network_json(&mach), "bandwidth_gbps": r.bandwidth_gbps,
            "latency_us": r.latency_us, "bytes": size});
        writeln!(o, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        // The machine: as before for two nodes of a one-node topology
        // (`dgx-h100`), `8 x dgx-h100` for more, once with its count for
        // a file that holds its nodes.
        let machine = if mach.topology_nodes > 1 {
            format!("{} ({} nodes)", mach.name, mach.nodes)
        } else if mach.nodes > 2 {
            format!("{} x {}", mach.nodes, mach.name)
        } else {
            mach.name.clone()
        };
        writeln!(
            o,
            "# gpucomm sim rdma: {machine} node{from}:gpu{g} -> node{to}:gpu{g}, {}",
            format_bytes(size),
            g = a.gpu
        )?;
        if let Some((x, y)) = leaves {
            write_network(&mut o, &mach)?;
            writeln!(
                o,
                "# leaves: node{from} on leaf {x}, node{to} on leaf {y}: {}",
                if x == y {
                    "within one leaf"
                } else {
                    "across the spine"
                }
            )?;
        }
        writeln!(o, "path:       {}", r.path)?;
        writeln!(o, "bandwidth:  {}", bandwidth(r.bandwidth_gbps))?;
        writeln!(o, "latency:    {:.2} us", r.latency_us)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Two indices written `A,B` (`--pair`, `--node-pair`).
fn index_pair(s: &str) -> Option<(usize, usize)> {
    let (x, y) = s.split_once(',')?;
    Some((x.trim().parse().ok()?, y.trim().parse().ok()?))
}

/// `--node-pair A,B`: two different node indices (bad values: exit 2).
fn node_pair(s: &str) -> anyhow::Result<(usize, usize)> {
    let Some((a, b)) = index_pair(s) else {
        usage!("--node-pair {s:?}: expected two node indices like 0,1");
    };
    if a == b {
        usage!("--node-pair {s}: rdma joins two different nodes");
    }
    Ok((a, b))
}

fn train_cmd(a: TrainArgs) -> anyhow::Result<ExitCode> {
    let mut mach = machine(&a.m, a.sweep_nodes.iter().copied().max())?;
    a.p2p.apply(&mut mach);
    let sweep = if a.sweep_nodes.is_empty() {
        vec![mach.nodes]
    } else {
        // (--sweep-nodes excludes --nodes: mach.nodes is the topology's.)
        let sweep = sweep_counts(&a.sweep_nodes)?;
        for &n in &sweep {
            nodes_fit(&a.m, &mach, "--sweep-nodes", n)?;
        }
        sweep
    };
    let model = model(&a.model)?;
    // The training step's collectives are rings and trees.
    let node_fabric = mach.fabric(Engine::Nccl, 1).map_err(asked)?;
    let shm_pair = node_fabric.nccl_shm_pair();
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    if a.bucket_mb.is_some() && a.sharding != Sharding::Ddp {
        usage!(
            "--bucket-mb applies to DDP only: {} shards its gradients per layer, in no buckets",
            a.sharding.name()
        );
    }
    let cfg = match a.bucket_mb {
        Some(mb) if !(mb.is_finite() && mb > 0.0) => usage!("--bucket-mb must be positive"),
        Some(mb) => TrainConfig {
            sharding: a.sharding,
            ..TrainConfig::with_bucket_bytes((mb * 1048576.0) as u64)
        },
        None => TrainConfig {
            sharding: a.sharding,
            ..TrainConfig::default()
        },
    };
    // As given (0.1 stays 0.1), or the default's.
    let bucket_mb = a.bucket_mb.unwrap_or(mib(cfg.bucket_bytes));
    let first_bucket_mb = a.bucket_mb.unwrap_or(mib(cfg.first_bucket_bytes));
    let mut cache = CommTimes::new(a.tuner.options()?);
    prefill(&mach, &sweep, &model, &cfg, &mut cache).map_err(asked)?;
    let mut one = mach.clone();
    one.use_gpus(1)?;
    let base = step(&one, 1, &model, &cfg, &mut cache)?;
    let mut rows = vec![("1 GPU".to_string(), base.clone())];
    for &n in &sweep {
        rows.push((
            format!("{n} node{}", if n == 1 { "" } else { "s" }),
            step(&mach, n, &model, &cfg, &mut cache)?,
        ));
    }
    if a.trace.is_some() {
        // The last scale of the sweep: its compute and its collectives,
        // a track for each kind.
        let (name, r) = rows.last().expect("at least one row");
        let mut sp: Vec<_> = r
            .compute_spans
            .iter()
            .map(|c| {
                (
                    "compute".to_string(),
                    c.label.clone(),
                    c.start.as_us(),
                    c.end.as_us(),
                )
            })
            .collect();
        for o in &r.ops {
            sp.push((
                format!("{} ({name})", o.collective.name()),
                format!("{} ({})", o.label, format_bytes(o.bytes)),
                o.start.as_us(),
                o.end.as_us(),
            ));
        }
        write_spans(&a.trace, &sp)?;
    }
    // Model state beyond the GPU's memory (where its name tells it).
    let memory_gb = mach.node.gpu_memory_gb();
    // The model's compute times, used as given: another GPU's where the
    // model says so (a preset's are one A100's).
    let other_gpu = model.compute_on_other_gpu(&mach.node.gpu_name);
    let too_big = |r: &gpucomm_sim::train::StepResult| {
        memory_gb.is_some_and(|gb| r.state_bytes as f64 > gb * 1e9)
    };
    let mut o = out();
    if a.m.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(_, r)| {
                let mut row = json!({"nodes": r.nodes, "gpus": r.gpus, "step_ms": r.step.as_us() / 1e3,
                "compute_ms": r.compute.as_us() / 1e3, "comm_ms": r.comm.as_us() / 1e3,
                "exposed_comm_ms": r.exposed.as_us() / 1e3, "scaling_efficiency": r.efficiency,
                "comm_ops": r.ops.len(), "state_gb_per_gpu": r.state_bytes as f64 / 1e9,
                "state_fits": !too_big(r)});
                if cfg.sharding == Sharding::Ddp {
                    row["buckets"] = json!(r.ops.len());
                }
                row
            })
            .collect();
        let mut doc = json!({"topology": mach.name, "model": model.name, "params": model.params(),
            "sharding": cfg.sharding.name(), "bucket_mb": bucket_mb,
            "first_bucket_mb": first_bucket_mb, "model_source": model.source,
            "gpu": mach.node.gpu_name, "compute_measured_on": model.measured_on,
            "compute_gpu_differs": model.measured_on.as_ref().map(|_| other_gpu.is_some()),
            "network": network_json(&mach), "gpu_memory_gb": memory_gb,
            "tuner": a.tuner.json(), "results": v});
        if let Some((x, y)) = shm_pair {
            doc["nccl_shm_pair"] = json!([x, y]);
        }
        writeln!(o, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        let how = match cfg.sharding {
            Sharding::Ddp if a.bucket_mb.is_some() => {
                format!("DDP buckets {bucket_mb} MiB, the first too (--bucket-mb given)")
            }
            Sharding::Ddp => format!("DDP buckets {bucket_mb} MiB"),
            s => format!("FSDP {}, one unit per layer", s.name().to_ascii_uppercase()),
        };
        writeln!(
            o,
            "# gpucomm sim train: {} ({:.1} M params, {} B/grad), {how}, on {}",
            model.name,
            model.params() as f64 / 1e6,
            model.bytes_per_param,
            mach.name
        )?;
        if !model.source.is_empty() {
            writeln!(o, "# model figures: {}", model.source)?;
        }
        if let Some(gpu) = other_gpu {
            writeln!(
                o,
                "# compute times: the model's, for {gpu}, used as given on this topology's {} \
                 (the simulator has no GPU speed model)",
                mach.node.gpu_name
            )?;
        }
        if let Some(line) = a.tuner.restriction() {
            let what = match cfg.sharding {
                Sharding::Ddp => "all_reduce buckets",
                _ => "all_gathers and reduce_scatters",
            };
            writeln!(o, "# {what}: {line}")?;
        }
        write_network(&mut o, &mach)?;
        write_shm_note(&mut o, &node_fabric, shm_pair)?;
        writeln!(
            o,
            "# {:>9} {:>6} {:>10} {:>11} {:>10} {:>12} {:>11} {:>14}",
            "scale",
            "GPUs",
            "step(ms)",
            "compute(ms)",
            "comm(ms)",
            "exposed(ms)",
            "efficiency",
            "state/GPU(GB)"
        )?;
        for (name, r) in &rows {
            writeln!(
                o,
                "  {:>9} {:>6} {:>10.2} {:>11.2} {:>10.2} {:>12.2} {:>10.1}% {:>13.2}{}",
                name,
                r.gpus,
                r.step.as_us() / 1e3,
                r.compute.as_us() / 1e3,
                r.comm.as_us() / 1e3,
                r.exposed.as_us() / 1e3,
                100.0 * r.efficiency,
                r.state_bytes as f64 / 1e9,
                if too_big(r) { "*" } else { "" }
            )?;
        }
        writeln!(
            o,
            "# efficiency = compute / step: per-GPU throughput against one GPU (weak scaling, same per-GPU batch)"
        )?;
        writeln!(
            o,
            "# state/GPU = parameters, gradients and Adam's state ({} B per parameter unsharded; ZeRO paper), activations not counted",
            gpucomm_sim::train::state_bytes_per_gpu(1, model.bytes_per_param, 1, Sharding::Ddp)
        )?;
        if let Some(gb) = memory_gb.filter(|_| rows.iter().any(|(_, r)| too_big(r))) {
            writeln!(
                o,
                "# * more than the {gb:.0} GB of a {}: the model does not fit there as sharded",
                mach.node.gpu_name
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The model `--model` names, resolved as `--topology` resolves its
/// PRESET|FILE (`gpucomm_topo::select`): a preset name, in any case, is
/// the preset, whatever the working directory holds (`./resnet50` reads
/// a file of that name); else a file that exists (TOML, or JSON by its
/// extension, as topology files are); else an error, "no such file" for
/// what looks like a path.
fn model(spec: &str) -> anyhow::Result<ModelSpec> {
    let lower = spec.to_ascii_lowercase();
    if MODEL_PRESETS.contains(&lower.as_str()) {
        return Ok(ModelSpec::preset(&lower)?);
    }
    if std::path::Path::new(spec).exists() {
        let text = std::fs::read_to_string(spec).with_context(|| format!("reading {spec}"))?;
        let m = if lower.ends_with(".json") {
            ModelSpec::from_json(&text)
        } else {
            ModelSpec::from_toml(&text)
        };
        return m.with_context(|| format!("--model {spec}"));
    }
    if looks_like_path(spec) {
        // It said `unknown model "/nonexistent.toml"`.
        usage!("--model {spec}: no such file");
    }
    // Neither a preset nor a file: a bad command line, as an unknown
    // --topology is (a file that does not parse is a failure, above).
    ModelSpec::preset(spec).map_err(asked)
}

/// A `--model` that names a file rather than a preset: a path (a `/`) or
/// a file name (`.toml`, `.json`).
fn looks_like_path(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    s.contains('/')
        || s.contains(std::path::MAIN_SEPARATOR)
        || l.ends_with(".toml")
        || l.ends_with(".json")
}

/// `--sweep-nodes` in increasing order; a count given twice (which printed
/// the same row twice) or 0 is refused.
fn sweep_counts(given: &[usize]) -> anyhow::Result<Vec<usize>> {
    if given.contains(&0) {
        usage!("--sweep-nodes: node counts must be at least 1");
    }
    let mut sweep = given.to_vec();
    sweep.sort_unstable();
    if let Some(w) = sweep.windows(2).find(|w| w[0] == w[1]) {
        usage!("--sweep-nodes: {} nodes given twice", w[0]);
    }
    Ok(sweep)
}

/// One row of `sim calibrate`'s table: a case read and predicted, or why
/// it could not be (read or predicted).
struct Row<'a> {
    id: &'a str,
    /// The case's metric and measured value, where it was read.
    metric: Option<&'a str>,
    measured: Option<f64>,
    unread: Vec<&'a str>,
    /// The measured value and the prediction, or the failure in words.
    outcome: Result<(f64, calibration::Prediction), String>,
}

fn calibrate_cmd(a: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let file = match a.file {
        Some(file) if !file.exists() => usage!("--file {}: no such file", file.display()),
        Some(file) => file,
        None => {
            let here = PathBuf::from("shared/calibration/measurements.toml");
            let beside = PathBuf::from("../shared/calibration/measurements.toml");
            match [here, beside].into_iter().find(|p| p.exists()) {
                Some(file) => file,
                // Nothing to read: said as --file nosuch is (it read
                // "reading shared/...: No such file", exit 1, naming one
                // of the two places looked at).
                None => usage!(
                    "no calibration file here: neither shared/calibration/measurements.toml \
                     nor ../shared/calibration/measurements.toml exists under {}; name one \
                     with --file",
                    std::env::current_dir()
                        .map(|d| d.display().to_string())
                        .unwrap_or_else(|_| ".".into())
                ),
            }
        }
    };
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let entries = calibration::parse_each(&text).with_context(|| file.display().to_string())?;
    // Fields the simulator does not read: said, not refused (a misspelt
    // `algo` ran as the tuner's pick without a word).
    for c in entries.iter().flatten().filter(|c| !c.unread.is_empty()) {
        let names: Vec<&str> = c.unread.keys().map(String::as_str).collect();
        eprintln!(
            "warning: case {}: field(s) {} not read by the simulator (it reads id, system, \
             metric, collective, algorithm, protocol, gpus, nodes, bytes, pair, value, source, \
             tolerance_note)",
            c.id,
            names.join(", ")
        );
    }
    let mut o = out();
    // A case that cannot be read or predicted is reported in its row and
    // makes the exit status 1, like a miss; the other cases are still
    // predicted.
    let mut worst: f64 = 0.0;
    let mut rows = Vec::new();
    let mut off = Vec::new();
    for entry in &entries {
        let row = match entry {
            Ok(c) => {
                let p = calibration::predict(c).map_err(|e| format!("cannot predict: {e}"));
                let err = p.as_ref().map_or(f64::INFINITY, |p| p.error(c.value).abs());
                if err > 0.10 {
                    off.push(match &p {
                        Ok(p) => format!("{} {:+.1}%", c.id, p.error(c.value) * 100.0),
                        Err(_) => format!("{} (cannot predict)", c.id),
                    });
                }
                worst = worst.max(err);
                Row {
                    id: &c.id,
                    metric: Some(&c.metric),
                    measured: Some(c.value),
                    unread: c.unread.keys().map(String::as_str).collect(),
                    outcome: p.map(|p| (c.value, p)),
                }
            }
            Err(u) => {
                off.push(format!("{} (cannot read)", u.id));
                worst = f64::INFINITY;
                Row {
                    id: &u.id,
                    metric: None,
                    measured: None,
                    unread: Vec::new(),
                    outcome: Err(format!("cannot read: {}", u.error)),
                }
            }
        };
        rows.push(row);
    }
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| match &r.outcome {
                Ok((m, p)) => json!({"id": r.id, "metric": r.metric, "measured": m,
                    "predicted": p.value, "error": p.error(*m),
                    "scenario": p.scenario, "unread_fields": r.unread}),
                Err(e) => json!({"id": r.id, "metric": r.metric, "measured": r.measured,
                    "predicted": null, "error": null, "failure": e,
                    "unread_fields": r.unread}),
            })
            .collect();
        writeln!(o, "{}", serde_json::to_string_pretty(&json!({"cases": v}))?)?;
    } else {
        writeln!(
            o,
            "| case | metric | measured | predicted | error | simulated as |"
        )?;
        writeln!(o, "|---|---|---:|---:|---:|---|")?;
        for r in &rows {
            let metric = r.metric.unwrap_or("-");
            let measured = r.measured.map_or_else(|| "-".to_string(), figure);
            match &r.outcome {
                Ok((m, p)) => writeln!(
                    o,
                    "| {} | {metric} | {measured} | {} | {:+.1}% | `{}` |",
                    r.id,
                    figure(p.value),
                    100.0 * p.error(*m),
                    p.scenario
                )?,
                Err(e) => writeln!(o, "| {} | {metric} | {measured} | - | - | {e} |", r.id)?,
            }
        }
        writeln!(o, "\nfactors:")?;
        for (name, v, src) in calibration::factors() {
            // To four places, without trailing zeros (counts and sizes
            // print as integers).
            let v = format!("{v:.4}");
            let v = v.trim_end_matches('0').trim_end_matches('.');
            writeln!(o, "  {name:<41} {v:>8}  {src}")?;
        }
    }
    Ok(if worst <= 0.10 {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "gpucomm: {} of {} cases not within 10%: {}",
            off.len(),
            entries.len(),
            off.join(", ")
        );
        ExitCode::FAILURE
    })
}

/// A measured or predicted figure of `sim calibrate`'s table: to one
/// place, or to three significant digits below 0.1 (a 1-byte copy's
/// 0.0004 GB/s printed 0.0).
fn figure(v: f64) -> String {
    if v == 0.0 || v.abs() >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2e}")
    }
}

/// The network of a collective, RDMA or training run, for `--json`: what
/// the `# network:` line says (NICs per node, each one's GB/s per
/// direction, the fabric).
fn network_json(mach: &Machine) -> serde_json::Value {
    json!({"nics_per_node": mach.node.nics, "nics_in_use": mach.nics_in_use().len(),
           "nic_gbps": mach.node.nic_gbps, "fabric": mach.network.describe()})
}

/// The `# network:` header line of a collective or training table; when
/// `--gpus` leaves some NICs with no GPU in use next to them, how many
/// carry the traffic ([`Machine::nics_in_use`]).
fn write_network(o: &mut impl Write, mach: &Machine) -> std::io::Result<()> {
    let used = mach.nics_in_use().len();
    let in_use = if used < mach.node.nics {
        format!(
            " (the {used} next to the {} GPU(s) in use carry the traffic)",
            mach.gpus_per_node()
        )
    } else {
        String::new()
    };
    writeln!(
        o,
        "# network: {} NIC(s) of {:.1} GB/s per node{in_use}; {}",
        mach.node.nics,
        mach.node.nic_gbps,
        mach.network.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucomm_sim::machine::NetLayout;

    fn args(topology: &str, nodes: Option<usize>) -> Machine_ {
        Machine_ {
            topology: topology.into(),
            nodes,
            gpus: None,
            nics: None,
            nic_speed: None,
            json: false,
            fabric: None,
            oversubscription: None,
            nodes_per_leaf: None,
            sharp: false,
        }
    }

    #[test]
    fn network_flags_describe_the_replicated_cluster() {
        let mut a = args("dgx-h100", Some(8));
        a.fabric = Some("leaf-spine".into());
        a.oversubscription = Some(2.0);
        a.nodes_per_leaf = Some(2);
        a.sharp = true;
        let m = machine(&a, None).unwrap();
        assert_eq!(m.nodes, 8);
        assert_eq!(m.network.layout, NetLayout::LeafSpine { nodes_per_leaf: 2 });
        assert_eq!(m.network.oversubscription, 2.0);
        assert!(m.network.sharp);
        assert!(m.network.describe().contains("2:1 oversubscribed"));
        // Without flags: rails, non-blocking, no SHARP.
        let plain = machine(&args("dgx-h100", Some(8)), None).unwrap();
        assert_eq!(plain.network.layout, NetLayout::Rails);
        assert!(!plain.network.sharp);
    }

    #[test]
    fn bad_network_flags_are_clear_errors() {
        let mut a = args("dgx-h100", Some(4));
        a.oversubscription = Some(2.0);
        let e = machine(&a, None).unwrap_err().to_string();
        assert!(e.contains("--fabric leaf-spine"), "{e}");
        a.fabric = Some("leaf-spine".into());
        a.oversubscription = Some(0.5);
        assert!(format!("{:#}", machine(&a, None).unwrap_err()).contains("at least 1"));
        a.oversubscription = None;
        // Leaves without a leaf-spine fabric were taken and changed nothing.
        a.fabric = None;
        a.nodes_per_leaf = Some(0);
        let e = machine(&a, None).unwrap_err().to_string();
        assert!(
            e.contains("--nodes-per-leaf 0 needs --fabric leaf-spine"),
            "{e}"
        );
        // One node (given or not): refused, as `gpucomm topo` refuses it;
        // node counts that come later (a train sweep's): taken.
        let mut one = args("dgx-h100", Some(1));
        one.fabric = Some("leaf-spine".into());
        one.nodes_per_leaf = Some(1);
        let e = machine(&one, None).unwrap_err().to_string();
        assert!(
            e.contains("--nodes-per-leaf 1 needs more than one node"),
            "{e}"
        );
        one.nodes = None;
        assert!(machine(&one, None).is_err());
        assert!(machine(&one, Some(2)).is_ok());
        // --sharp and --fabric on one node changed nothing and said nothing.
        let mut sharp = args("dgx-h100", None);
        sharp.sharp = true;
        let e = machine(&sharp, None).unwrap_err().to_string();
        assert!(e.contains("--sharp needs more than one node"), "{e}");
        sharp.sharp = false;
        sharp.fabric = Some("single".into());
        let e = machine(&sharp, None).unwrap_err().to_string();
        assert!(
            e.contains("--fabric single needs more than one node"),
            "{e}"
        );
        sharp.nodes = Some(2);
        assert!(machine(&sharp, None).is_ok());
        // The default fabric, given, changes nothing: taken on one node.
        let mut rail = args("dgx-h100", None);
        rail.fabric = Some("rail".into());
        assert!(machine(&rail, None).is_ok());
        // A train sweep is checked against its largest node count.
        let mut sweep = args("dgx-h100", None);
        sweep.sharp = true;
        assert!(machine(&sweep, Some(1)).is_err());
        assert!(machine(&sweep, Some(2)).is_ok());
        a.nodes_per_leaf = None;
        a.fabric = Some("torus".into());
        assert!(machine(&a, None).unwrap_err().to_string().contains("torus"));
        // A multi-node topology file describes its own network.
        let dir = std::env::temp_dir().join(format!("gpucomm-sim-net-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("two.json");
        let t = gpucomm_topo::select(
            "dgx-h100",
            &gpucomm_topo::ClusterOptions {
                nodes: 2,
                sharp: true,
                ..Default::default()
            },
        )
        .unwrap();
        gpucomm_topo::format::save(&t, &file).unwrap();
        let f = file.to_str().unwrap();
        let m = machine(&args(f, None), None).unwrap();
        assert!(m.network.sharp && m.nodes == 2);
        let mut a = args(f, None);
        a.sharp = true;
        assert!(
            machine(&a, None)
                .unwrap_err()
                .to_string()
                .contains("describes its own network")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
