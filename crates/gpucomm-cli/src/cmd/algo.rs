//! `gpucomm algo`: inspect, check and tune collective schedules.
//!
//! * `gpucomm algo show all_reduce --algorithm ring --ranks 4 --bytes 1024`
//!   prints the schedule as a table (one column per rank, one row per step
//!   index), then the checker's report and the cost model's prediction.
//! * `gpucomm algo check COLLECTIVE ...` checks one algorithm, or every
//!   algorithm that implements the collective when `--algorithm` is left out.
//! * `gpucomm algo tune COLLECTIVE --ranks N --bytes B` ranks the candidates
//!   of the tuner under an alpha-beta model given on the command line.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use comfy_table::Table;
use gpucomm_algo::{
    Algorithm, Buf, CheckReport, Collective, CostModel, LinkClass, Prediction, Problem, Schedule,
    Slice, Step, StepKind, TuneOptions, candidates_with, check, critical_path, predict,
};

use super::common::{OrUsage, format_bytes, parse_size, usage};

/// Arguments of `gpucomm algo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print a schedule as a table of steps, then the checker's report.
    Show(Box<ShowArgs>),
    /// Check a schedule (every algorithm for the collective if none given).
    Check(Box<ShowArgs>),
    /// Rank algorithm, channel and chunk choices under the cost model.
    Tune(Box<TuneArgs>),
}

/// What to build: the collective, its size and the rank layout.
#[derive(clap::Args, Debug)]
struct ProblemArgs {
    /// all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, sendrecv, barrier,
    /// gather, scatter.
    collective: String,
    /// ring, tree, halving_doubling, recursive_doubling, direct, hierarchical, bruck
    /// (show: ring if not given, or the first of these that implements the
    /// collective; check: every algorithm that implements the collective;
    /// tune: ranks only this one).
    #[arg(long, short = 'a')]
    algorithm: Option<String>,
    /// Number of ranks.
    #[arg(long, short = 'n', default_value_t = 4)]
    ranks: usize,
    /// Bytes per rank, as nccl-tests counts them (K, M, G suffixes).
    #[arg(long, short = 'b', default_value = "1024")]
    bytes: String,
    /// Bytes per element.
    #[arg(long, default_value_t = 4)]
    elem_size: usize,
    /// Parallel channels, 1 to 65535; 0 is refused (show, check: 1 if not
    /// given; tune: ranks only this count, at most --max-channels, instead
    /// of trying 1, 2, 4 ... up to --max-channels).
    #[arg(long, short = 'c', value_parser = clap::value_parser!(u16).range(1..))]
    channels: Option<u16>,
    /// Largest piece a step moves, in bytes; 0: no chunking (show, check:
    /// 0 if not given; tune: ranks only this chunk, instead of trying none
    /// and 64K to 16M).
    #[arg(long)]
    chunk: Option<String>,
    /// Parts a ring broadcast's or reduce's hop inside a node cuts each
    /// piece in (hops between nodes move whole pieces; NCCL's LL protocol
    /// streams lines through a node, its network proxy whole steps).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    intra_slices: u32,
    /// Ranks per node (defaults to all ranks on one node).
    #[arg(long)]
    ranks_per_node: Option<usize>,
    /// Root of broadcast, reduce, gather and scatter [default: 0].
    #[arg(long)]
    root: Option<usize>,
    /// Distance of sendrecv's destination [default: 1].
    #[arg(long)]
    shift: Option<usize>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// `show` and `check`: the problem, and how `show` prints it.
#[derive(clap::Args, Debug)]
struct ShowArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// Show at most this many ranks as columns, at least 1 (show; default 16).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_ranks: Option<usize>,
    /// Show each step's dependencies (show).
    #[arg(long)]
    deps: bool,
}

#[derive(clap::Args, Debug)]
struct TuneArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// Intra-node latency per hop, microseconds (0 to 1e12).
    #[arg(long)]
    intra_latency_us: Option<f64>,
    /// Intra-node bandwidth per direction, GB/s (1e-9 to 1e9).
    #[arg(long)]
    intra_gbps: Option<f64>,
    /// Inter-node latency per hop, microseconds (0 to 1e12).
    #[arg(long)]
    inter_latency_us: Option<f64>,
    /// Inter-node bandwidth per direction, GB/s (1e-9 to 1e9).
    #[arg(long)]
    inter_gbps: Option<f64>,
    /// Software overhead per step, microseconds (0 to 1e12).
    #[arg(long)]
    overhead_us: Option<f64>,
    /// Bandwidth one channel drives, GB/s (1e-9 to 1e9).
    #[arg(long)]
    channel_gbps: Option<f64>,
    /// Candidates to list, the best first (at least 1: 0 is refused).
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    top: usize,
    /// The most channels the engine can run.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    max_channels: u16,
}

/// Runs `gpucomm algo`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        Cmd::Show(a) => show(&a),
        Cmd::Check(a) => {
            // `show`'s printing options would be ignored (exit 0, unsaid).
            if a.deps {
                usage!("--deps applies to algo show (check prints no steps)");
            }
            if let Some(m) = a.max_ranks {
                usage!("--max-ranks {m} applies to algo show (check prints no steps)");
            }
            check_cmd(&a.problem)
        }
        Cmd::Tune(a) => tune_cmd(&a),
    }
}

fn parse_collective(a: &ProblemArgs) -> anyhow::Result<Collective> {
    let c = Collective::from_name(&a.collective);
    // An option the collective does not take is refused, not ignored.
    if let Some(c) = c {
        if a.root.is_some() && c.root().is_none() {
            usage!("--root: {} has no root", c.name());
        }
        if a.shift.is_some() && !matches!(c, Collective::SendRecv { .. }) {
            usage!("--shift is sendrecv's; {} takes none", c.name());
        }
        if a.intra_slices > 1
            && !matches!(c, Collective::Broadcast { .. } | Collective::Reduce { .. })
        {
            return Err(no_hops_to_cut(c.name()));
        }
    }
    Ok(match c {
        Some(Collective::SendRecv { .. }) => Collective::SendRecv {
            shift: a.shift.unwrap_or(1),
        },
        Some(c) => c.with_root(a.root.unwrap_or(0)),
        None => {
            let names: Vec<_> = Collective::ALL.iter().map(|c| c.name()).collect();
            usage!(
                "unknown collective {:?} ({})",
                a.collective,
                names.join(", ")
            )
        }
    })
}

fn parse_algorithm(s: &str) -> anyhow::Result<Algorithm> {
    Algorithm::from_name(s)
        .with_context(|| {
            let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!("unknown algorithm {s:?} ({})", names.join(", "))
        })
        .or_usage()
}

fn problem(a: &ProblemArgs) -> anyhow::Result<Problem> {
    let collective = parse_collective(a)?;
    if a.ranks == 0 {
        usage!("--ranks must be at least 1");
    }
    if a.elem_size == 0 {
        usage!("--elem-size must be at least 1");
    }
    let bytes = usize::try_from(parse_size(&a.bytes)?)
        .context("--bytes too large")
        .or_usage()?;
    // A size is one rank's block of these times the rank count, as
    // nccl-tests counts it.
    let blocked = collective.count_is_a_block();
    let per = if blocked {
        a.elem_size
            .checked_mul(a.ranks)
            .with_context(|| {
                format!(
                    "--ranks {} and --elem-size {}: {}'s block of one element from each \
                     rank is more bytes than a size holds",
                    a.ranks,
                    a.elem_size,
                    collective.name()
                )
            })
            .or_usage()?
    } else {
        a.elem_size
    };
    let count = match collective {
        Collective::Barrier => 0,
        _ if bytes % per != 0 => usage!(
            "--bytes {bytes} is not a multiple of {per} ({} bytes per element{})",
            a.elem_size,
            if blocked { " times the rank count" } else { "" }
        ),
        _ => bytes / per,
    };
    let rpn = a.ranks_per_node.unwrap_or(a.ranks);
    if rpn > a.ranks {
        usage!("--ranks-per-node {rpn} is more than the {} ranks", a.ranks);
    }
    if let Some(root) = collective.root().filter(|&r| r >= a.ranks) {
        usage!(
            "--root {root}: out of range for {} ranks (0 to {})",
            a.ranks,
            a.ranks - 1
        );
    }
    // The most a problem addresses (Problem::MAX_BYTES) is count x ranks x
    // element size: --bytes itself where a size is every rank's block,
    // else --bytes on each rank.
    let most = if blocked {
        Problem::MAX_BYTES
    } else {
        Problem::MAX_BYTES / a.ranks
    };
    if bytes > most && collective != Collective::Barrier {
        if most < per {
            usage!(
                "--ranks {}: too many for {} (a problem holds at most {} bytes)",
                a.ranks,
                collective.name(),
                Problem::MAX_BYTES
            );
        }
        usage!(
            "--bytes {bytes} is too large for {} on {} ranks (at most {})",
            collective.name(),
            a.ranks,
            most - most % per
        );
    }
    let p = Problem::new(collective, count, a.ranks, rpn).with_elem_size(a.elem_size);
    // Whatever the algorithm (a root past the ranks, say): said once, here.
    p.validate().or_usage()?;
    Ok(p)
}

/// `--chunk` in elements of `p` (`None` when not given).
fn chunk_elems(a: &ProblemArgs, p: &Problem) -> anyhow::Result<Option<usize>> {
    let Some(chunk) = &a.chunk else {
        return Ok(None);
    };
    let chunk_bytes = usize::try_from(parse_size(chunk)?)
        .context("--chunk too large")
        .or_usage()?;
    Ok(Some(chunk_bytes.div_ceil(p.elem_size)))
}

/// `--intra-slices` given where `what` (a collective or an algorithm) has
/// no hops for it to cut.
fn no_hops_to_cut(what: &str) -> anyhow::Error {
    anyhow::Error::new(super::common::Usage(format!(
        "--intra-slices cuts the hops of a ring broadcast or reduce; {what} has none"
    )))
}

/// The schedule `--algorithm` names (`alg`), with the channels, chunk and
/// intra-node parts given; fails when `alg` does not implement the problem.
fn schedule(a: &ProblemArgs, p: Problem, alg: Algorithm) -> anyhow::Result<Schedule> {
    // Asked of an algorithm it does not apply to (with every algorithm,
    // as check and tune take them, it applies to the ring's).
    if a.intra_slices > 1 && a.algorithm.is_some() && alg != Algorithm::Ring {
        return Err(no_hops_to_cut(alg.name()));
    }
    // An algorithm that does not implement the problem was asked for.
    Ok(Schedule::new(p, alg)
        .or_usage()?
        .with_channels(a.channels.unwrap_or(1))
        .with_chunk_elems(chunk_elems(a, &p)?.unwrap_or(0))
        .with_intra_slices(a.intra_slices as usize))
}

/// Refuses schedules whose steps (over all ranks) would exceed `limit`,
/// estimated from the model's critical path (per channel: the channels
/// run side by side, each with its steps), before generating anything.
fn guard(s: &Schedule, limit: u64, what: &str) -> anyhow::Result<()> {
    let n = s.problem.nranks as u64;
    let fan = if s.algorithm == Algorithm::Direct {
        n
    } else {
        1
    };
    let channels = (s.channels.max(1) as u64).min(s.problem.count.max(1) as u64);
    // Saturating throughout: 2 x n x n wrapped to 0 for a direct barrier
    // of 2^32 ranks, which then passed and ran out of memory.
    let est = (critical_path(s) as u64 + 1)
        .saturating_mul(2)
        .saturating_mul(fan)
        .saturating_mul(n)
        .saturating_mul(channels);
    if est > limit {
        // A barrier moves no data: a larger --chunk changes nothing.
        let advice = if s.problem.collective == Collective::Barrier {
            "use fewer ranks"
        } else {
            "raise --chunk, or use fewer ranks"
        };
        let about = if est == u64::MAX {
            format!("more than {est}")
        } else {
            format!("about {est}")
        };
        usage!(
            "{} {} on {n} ranks has {about} steps, too many to {what} here ({advice})",
            s.algorithm.name(),
            s.problem.collective.name()
        );
    }
    // A barrier's check follows, for every step, which of the n ranks it
    // has heard from: steps x n bits of work. 65535 ranks (1.5e11) took
    // 22 s, 131072 (6.2e11) 118 s, 262144 more than 300 s; 2^20 ranks
    // would have run for hours.
    if s.problem.collective == Collective::Barrier {
        let work = est.saturating_mul(n);
        if work > BARRIER_CHECK_LIMIT {
            usage!(
                "{} barrier on {n} ranks is too large to check here: its steps x its ranks come to about {} (at most {}; use fewer ranks)",
                s.algorithm.name(),
                readable_count(work),
                readable_count(BARRIER_CHECK_LIMIT)
            );
        }
    }
    // Both commands run the checker, whose memory grows as n^2 where the
    // steps do not: a bruck all_gather of 65536 ranks (16 steps each)
    // was killed for memory, and a halving-doubling reduce_scatter of
    // 131072 ranks took 24 GB.
    let bytes = gpucomm_algo::check_state_bytes(s, est);
    if bytes > CHECK_STATE_LIMIT {
        usage!(
            "{} {} on {n} ranks needs about {} to check, more than the {} allowed here (use fewer ranks)",
            s.algorithm.name(),
            s.problem.collective.name(),
            format_bytes(bytes),
            format_bytes(CHECK_STATE_LIMIT)
        );
    }
    Ok(())
}

/// The most steps x ranks a barrier's check may take (about two minutes
/// on a 2-core machine).
const BARRIER_CHECK_LIMIT: u64 = 700_000_000_000;

/// `6.2e11`: a large count, short.
fn readable_count(v: u64) -> String {
    format!("{:.1e}", v as f64)
}

/// The most memory the checker's state may be estimated to need: where
/// `check_state_bytes` counts exactly rather than from its bound.
const CHECK_STATE_LIMIT: u64 = gpucomm_algo::CHECK_STATE_COUNTED;

/// `in:b2` for block 2 of the n-way partition, else `in[3..7]`.
fn slice_label(p: &Problem, rank: usize, s: &Slice) -> String {
    let buf = match s.buf {
        Buf::Input => "in",
        Buf::Output => "out",
        Buf::Scratch => "tmp",
    };
    // Offsets of block b in this buffer's layout.
    let n = p.nranks;
    let block_at = |b: usize| -> Option<(usize, usize)> {
        let (o, l) = p.block(b);
        match (p.collective, s.buf) {
            (Collective::AllGather, Buf::Input) => (b == rank).then_some((0, l)),
            (Collective::ReduceScatter, Buf::Output) => (b == rank).then_some((0, l)),
            (Collective::AllToAll, Buf::Input | Buf::Output)
            | (Collective::Gather { .. }, Buf::Output)
            | (Collective::Scatter { .. }, Buf::Input) => Some((b * p.count, p.count)),
            (Collective::Gather { .. }, Buf::Input) | (Collective::Scatter { .. }, Buf::Output) => {
                (b == rank).then_some((0, p.count))
            }
            (_, Buf::Scratch) => None,
            _ => Some((o, l)),
        }
    };
    if s.len > 0 {
        for b in 0..n {
            if block_at(b) == Some((s.offset, s.len)) {
                return format!("{buf}:b{b}");
            }
        }
    }
    format!("{buf}[{}..{}]", s.offset, s.end())
}

fn cell(p: &Problem, rank: usize, st: &Step, channels: bool, deps: bool) -> String {
    let l = |s: &Slice| slice_label(p, rank, s);
    let mut c = match st.kind {
        StepKind::Send { peer, src } => format!("send {} ->{peer}", l(&src)),
        StepKind::Recv { peer, dst } => format!("recv {} <-{peer}", l(&dst)),
        StepKind::RecvReduce { peer, src, dst } => {
            if src == dst {
                format!("recv+ {} <-{peer}", l(&dst))
            } else {
                format!("recv+ {}={}+ <-{peer}", l(&dst), l(&src))
            }
        }
        StepKind::Copy { src, dst } => format!("copy {}={}", l(&dst), l(&src)),
        StepKind::Reduce { src, dst } => format!("reduce {}+={}", l(&dst), l(&src)),
    };
    if channels {
        c.push_str(&format!(" @{}", st.channel));
    }
    if deps && !st.deps.is_empty() {
        let d: Vec<String> = st.deps.iter().map(|d| d.to_string()).collect();
        c.push_str(&format!(" after {}", d.join(",")));
    }
    c
}

fn report_table(p: &Problem, rep: &CheckReport) -> Table {
    let mut t = Table::new();
    t.set_header(vec![
        "rank",
        "steps",
        "sends",
        "recvs",
        "bytes sent",
        "bytes recv",
        "comm steps",
    ]);
    for (r, rr) in rep.ranks.iter().enumerate() {
        let _ = p;
        t.add_row(vec![
            r.to_string(),
            rr.steps.to_string(),
            rr.sends.to_string(),
            rr.recvs.to_string(),
            rr.bytes_sent.to_string(),
            rr.bytes_recv.to_string(),
            rr.comm_steps.to_string(),
        ]);
    }
    t
}

fn show(sa: &ShowArgs) -> anyhow::Result<ExitCode> {
    let a = &sa.problem;
    let p = problem(a)?;
    // Without --algorithm: the ring, or the first algorithm that
    // implements the collective where the ring does not (all_to_all, ...).
    let alg = match &a.algorithm {
        Some(name) => parse_algorithm(name)?,
        None => Algorithm::ALL
            .into_iter()
            .find(|&alg| Schedule::new(p, alg).is_ok())
            .unwrap_or(Algorithm::Ring),
    };
    let s = schedule(a, p, alg)?;
    if p.nranks > 4096 {
        usage!(
            "show prints every rank's steps; {} ranks is too many (check and tune scale further)",
            p.nranks
        );
    }
    // Every step is printed (and held): a 16 MiB ring cut in 64-byte
    // chunks ran out of memory.
    guard(&s, 2_000_000, "show")?;
    let steps: Vec<Vec<Step>> = (0..p.nranks).map(|r| s.rank_steps(r)).collect();
    let rep = check(&s);
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = serde_json::json!({
            "schedule": s,
            "in_place_safe": s.in_place_safe(),
            "scratch": (0..p.nranks).map(|r| s.buffer_len(r, Buf::Scratch)).collect::<Vec<_>>(),
            "steps": steps,
            "check": match &rep { Ok(r) => serde_json::to_value(r)?, Err(e) => serde_json::json!({"error": e.to_string()}) },
            "prediction": predict(&s, &CostModel::default()),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(if rep.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let shown = p.nranks.min(sa.max_ranks.unwrap_or(16));
    writeln!(
        out,
        "{} {} on {} ranks ({} per node), {} elements of {} bytes, {} channel(s), {}{}{}",
        alg.name(),
        p.collective.name(),
        p.nranks,
        p.ranks_per_node,
        p.count,
        p.elem_size,
        s.channels,
        chunk_text(s.chunk_elems),
        if s.intra_slices > 1 {
            format!(", {} parts per piece inside a node", s.intra_slices)
        } else {
            String::new()
        },
        if shown < p.nranks {
            format!(" (first {shown} ranks shown)")
        } else {
            String::new()
        }
    )?;
    let mut t = Table::new();
    let mut header = vec!["step".to_string()];
    header.extend((0..shown).map(|r| format!("rank {r}")));
    t.set_header(header);
    let rows = steps[..shown].iter().map(|v| v.len()).max().unwrap_or(0);
    let multi = s.channels > 1;
    for i in 0..rows {
        let mut row = vec![i.to_string()];
        for (r, list) in steps.iter().enumerate().take(shown) {
            row.push(
                list.get(i)
                    .map(|st| cell(&p, r, st, multi, sa.deps))
                    .unwrap_or_default(),
            );
        }
        t.add_row(row);
    }
    writeln!(out, "{t}")?;
    writeln!(
        out,
        "legend: in/out/tmp = input/output/scratch, b<i> = block i of the {}-way partition, recv+ = receive and reduce{}",
        p.nranks,
        if multi { ", @c = channel" } else { "" }
    )?;
    check_result(&mut out, &p, &s, rep)
}

fn check_result(
    out: &mut impl Write,
    p: &Problem,
    s: &Schedule,
    rep: Result<CheckReport, gpucomm_algo::CheckError>,
) -> anyhow::Result<ExitCode> {
    match rep {
        Ok(rep) => {
            writeln!(out, "{}", report_table(p, &rep))?;
            let pred = predict(s, &CostModel::default());
            writeln!(
                out,
                "check: ok ({} {}); critical path {} steps; max sent {}; in-place {}",
                s.algorithm.name(),
                p.collective.name(),
                rep.critical_path,
                format_bytes(rep.max_bytes_sent()),
                if rep.in_place_verified {
                    "verified"
                } else {
                    "not safe (engines stage the input)"
                }
            )?;
            writeln!(
                out,
                "model (CostModel::default): {} steps, {:.1} us",
                pred.steps, pred.time_us
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            writeln!(
                out,
                "check: FAILED ({} {}): {e}",
                s.algorithm.name(),
                p.collective.name()
            )?;
            Ok(ExitCode::FAILURE)
        }
    }
}

fn check_cmd(a: &ProblemArgs) -> anyhow::Result<ExitCode> {
    let p = problem(a)?;
    let algs: Vec<Algorithm> = match &a.algorithm {
        Some(name) => vec![parse_algorithm(name)?],
        None => Algorithm::ALL
            .into_iter()
            .filter(|&alg| Schedule::new(p, alg).is_ok())
            .collect(),
    };
    if algs.is_empty() {
        usage!(
            "no algorithm implements {} for this problem",
            p.collective.name()
        );
    }
    // Every schedule is sized up before any is checked: the one asked for
    // with --algorithm is refused at once when too large; among every
    // algorithm, those too large are left out, said, and the others
    // checked (a direct all_gather of 4096 ranks kept the ring's from
    // being checked), unless none is left.
    let mut sized = Vec::new();
    for alg in algs {
        let s = schedule(a, p, alg)?;
        let fits = guard(&s, 50_000_000, "check");
        sized.push((alg, fits.map(|()| s)));
    }
    if sized.iter().all(|(_, s)| s.is_err()) {
        if sized.len() == 1 {
            return Err(sized.remove(0).1.unwrap_err());
        }
        for (_, e) in &sized {
            if let Err(e) = e {
                eprintln!("note: {e}");
            }
        }
        usage!(
            "no algorithm's {} on {} ranks is small enough to check here (each is said above)",
            p.collective.name(),
            p.nranks
        );
    }
    let mut out = std::io::stdout().lock();
    let mut code = ExitCode::SUCCESS;
    let mut results = Vec::new();
    for (alg, s) in sized {
        let s = match s {
            Ok(s) => s,
            Err(e) if a.json => {
                results.push(serde_json::json!({
                    "algorithm": alg.name(),
                    "ok": null,
                    "skipped": e.to_string(),
                }));
                continue;
            }
            Err(e) => {
                eprintln!("note: not checked: {e}");
                continue;
            }
        };
        let rep = check(&s);
        if a.json {
            results.push(serde_json::json!({
                "algorithm": alg.name(),
                "ok": rep.is_ok(),
                "report": rep.as_ref().ok(),
                "error": rep.as_ref().err().map(|e| e.to_string()),
            }));
            if rep.is_err() {
                code = ExitCode::FAILURE;
            }
            continue;
        }
        if check_result(&mut out, &p, &s, rep)? != ExitCode::SUCCESS {
            code = ExitCode::FAILURE;
        }
    }
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&results)?)?;
    }
    Ok(code)
}

/// The model figures' ranges (`model_figure`).
const MIN_GBPS: f64 = 1e-9;
const MAX_GBPS: f64 = 1e9;
const MAX_US: f64 = 1e12;

/// A model figure: `given`, else the default model's `default`; finite,
/// and above 0 (`positive`, a bandwidth) or at least 0 (a latency or an
/// overhead).
fn model_figure(
    option: &str,
    given: Option<f64>,
    default: f64,
    positive: bool,
) -> anyhow::Result<f64> {
    // Ranges the model computes in: below 1 B/s the model takes 1 B/s
    // (1e-300 was echoed but 1e-9 used), and a latency near f64's largest
    // made every time inf.
    let v = given.unwrap_or(default);
    let (lo, hi, range) = if positive {
        (MIN_GBPS, MAX_GBPS, "from 1e-9 (1 B/s) to 1e9 GB/s")
    } else {
        (0.0, MAX_US, "from 0 to 1e12 us")
    };
    if !(v.is_finite() && (lo..=hi).contains(&v)) {
        usage!("--{option} must be a number {range} (got {v})");
    }
    Ok(v)
}

/// The model `tune` ranks under: the default one, with the figures given.
fn tune_model(a: &TuneArgs) -> anyhow::Result<CostModel> {
    let d = CostModel::default();
    let mut m = CostModel::new(
        LinkClass {
            latency_us: model_figure(
                "intra-latency-us",
                a.intra_latency_us,
                d.intra.latency_us,
                false,
            )?,
            bandwidth_gbps: model_figure("intra-gbps", a.intra_gbps, d.intra.bandwidth_gbps, true)?,
        },
        LinkClass {
            latency_us: model_figure(
                "inter-latency-us",
                a.inter_latency_us,
                d.inter.latency_us,
                false,
            )?,
            bandwidth_gbps: model_figure("inter-gbps", a.inter_gbps, d.inter.bandwidth_gbps, true)?,
        },
    );
    m.step_overhead_us = model_figure("overhead-us", a.overhead_us, d.step_overhead_us, false)?;
    m.channel_gbps = model_figure("channel-gbps", a.channel_gbps, d.channel_gbps, true)?;
    Ok(m)
}

/// The most ranks `tune` ranks candidates for: the model asks every rank's
/// traffic of every candidate (about 5 s at this size on a 2-core machine).
const TUNE_MAX_RANKS: usize = 1 << 16;
/// The most ranks x ranks per node `tune` takes where the tree all_reduce is
/// a candidate: its model walks a node's chain for every rank of every
/// channel (quadratic on one node: 10000 ranks took 6 s, 100000 ran past 60 s).
const TUNE_MAX_TREE_PAIRS: usize = 1 << 24;

/// Refuses problems the tuner would take too long to rank (`show` and
/// `check` bound the steps they generate; the tuner generates none, but
/// its model's work grows with the ranks).
fn tune_guard(p: &Problem, algorithms: &[Algorithm]) -> anyhow::Result<()> {
    let (n, rpn) = (p.nranks, p.ranks_per_node);
    if n > TUNE_MAX_RANKS {
        usage!(
            "{} on {n} ranks: too many to tune here (at most {TUNE_MAX_RANKS} ranks)",
            p.collective.name()
        );
    }
    let tree = p.collective == Collective::AllReduce
        && (algorithms.is_empty() || algorithms.contains(&Algorithm::Tree));
    if tree && n.saturating_mul(rpn) > TUNE_MAX_TREE_PAIRS {
        usage!(
            "tree all_reduce on {n} ranks, {rpn} per node: too many to tune here \
             (ranks x ranks per node at most {TUNE_MAX_TREE_PAIRS}; give --ranks-per-node, \
             fewer ranks, or another --algorithm)"
        );
    }
    Ok(())
}

/// The tuner's candidates for `p`, fastest first, within what the options
/// allow: `--algorithm`, `--channels` and `--chunk` fix that choice
/// (validated as `show` and `check` validate them), `--intra-slices` applies
/// to every candidate.
fn tune_candidates(
    a: &TuneArgs,
    p: &Problem,
    m: &CostModel,
) -> anyhow::Result<Vec<(Schedule, Prediction)>> {
    let pa = &a.problem;
    let algorithms = match &pa.algorithm {
        // Refused, as `show` and `check` refuse it, when it does not
        // implement the problem.
        Some(name) => vec![schedule(pa, *p, parse_algorithm(name)?)?.algorithm],
        None => Vec::new(),
    };
    tune_guard(p, &algorithms)?;
    if let Some(c) = pa.channels
        && c > a.max_channels
    {
        usage!(
            "--channels {c} is more than --max-channels {}",
            a.max_channels
        );
    }
    let opts = TuneOptions {
        max_channels: a.max_channels,
        algorithms,
        channels: pa.channels,
        chunk_elems: chunk_elems(pa, p)?,
        intra_slices: pa.intra_slices as usize,
        ..TuneOptions::default()
    };
    Ok(candidates_with(p, m, &opts))
}

fn tune_cmd(a: &TuneArgs) -> anyhow::Result<ExitCode> {
    let p = problem(&a.problem)?;
    let m = tune_model(a)?;
    let all = tune_candidates(a, &p, &m)?;
    let Some((best, _)) = all.first() else {
        usage!(
            "no algorithm implements {} for this problem",
            p.collective.name()
        );
    };
    let mut out = std::io::stdout().lock();
    if a.problem.json {
        let top: Vec<_> = all.iter().take(a.top).map(|(_, pr)| pr).collect();
        let v = serde_json::json!({ "problem": p, "model": m, "best": best, "candidates": top });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{} of {} on {} ranks ({} per node); model {}",
        p.collective.name(),
        format_bytes(p.bytes() as u64),
        p.nranks,
        p.ranks_per_node,
        serde_json::to_string(&m)?
    )?;
    let mut t = Table::new();
    t.set_header(vec![
        "algorithm",
        "channels",
        "chunk",
        "steps",
        "max sent",
        "time (us)",
    ]);
    for (s, pr) in all.iter().take(a.top) {
        t.add_row(vec![
            s.algorithm.name().to_string(),
            s.channels.to_string(),
            if s.chunk_elems == 0 {
                "-".into()
            } else {
                format_bytes(s.chunk_elems.saturating_mul(p.elem_size) as u64)
            },
            pr.steps.to_string(),
            format_bytes(pr.max_bytes_sent),
            format!("{:.2}", pr.time_us),
        ]);
    }
    writeln!(out, "{t}")?;
    writeln!(
        out,
        "best: {} with {} channel(s), {}",
        best.algorithm.name(),
        best.channels,
        chunk_text(best.chunk_elems)
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A schedule's chunk as the headers say it (`chunk_elems` 0: each step
/// moves its whole piece).
fn chunk_text(chunk_elems: usize) -> String {
    if chunk_elems == 0 {
        "no chunking".to_string()
    } else {
        format!("chunk {chunk_elems} elements")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(coll: &str) -> ProblemArgs {
        ProblemArgs {
            collective: coll.into(),
            algorithm: None,
            ranks: 4,
            bytes: "1024".into(),
            elem_size: 4,
            channels: None,
            chunk: None,
            intra_slices: 1,
            ranks_per_node: None,
            root: None,
            shift: None,
            json: false,
        }
    }

    fn show_args(a: ProblemArgs) -> ShowArgs {
        ShowArgs {
            problem: a,
            max_ranks: None,
            deps: false,
        }
    }

    #[test]
    fn sizes_become_counts() {
        assert_eq!(problem(&args("all_reduce")).unwrap().count, 256);
        assert_eq!(problem(&args("all-to-all")).unwrap().count, 64);
        assert_eq!(problem(&args("barrier")).unwrap().count, 0);
        let mut a = args("all_reduce");
        a.bytes = "1023".into();
        assert!(
            problem(&a)
                .unwrap_err()
                .to_string()
                .contains("not a multiple of 4")
        );
        assert!(problem(&args("allgatherv")).is_err());
    }

    #[test]
    fn cells_name_blocks() {
        let p = Problem::new(Collective::AllReduce, 256, 4, 4);
        let s = Schedule::new(p, Algorithm::Ring).unwrap();
        let st = &s.rank_steps(0)[0];
        assert_eq!(cell(&p, 0, st, false, false), "send in:b3 ->1");
        let st = &s.rank_steps(0)[1];
        assert_eq!(cell(&p, 0, st, false, false), "recv+ out:b2=in:b2+ <-3");
    }

    #[test]
    fn intra_slices_cut_a_chains_hops_inside_a_node() {
        // 4 ranks, 2 per node, 64 elements in pieces of 16, 4 parts inside
        // a node: the root sends 16 parts to rank 1, rank 1 sends 4 whole
        // pieces to rank 2 on the next node.
        let mut a = args("broadcast");
        a.bytes = "256".into();
        a.chunk = Some("64".into());
        a.ranks_per_node = Some(2);
        a.intra_slices = 4;
        let p = problem(&a).unwrap();
        let s = schedule(&a, p, Algorithm::Ring).unwrap();
        assert_eq!(s.intra_slices, 4);
        let sends = |r| {
            s.rank_steps(r)
                .iter()
                .filter(|st| st.kind.is_send())
                .count()
        };
        assert_eq!((sends(0), sends(1), sends(2), sends(3)), (16, 4, 16, 0));
        gpucomm_algo::check(&s).unwrap();
    }

    #[test]
    fn zero_channels_are_refused_not_run_as_one() {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: TuneArgs,
        }
        use clap::Parser;
        for bad in ["--channels", "--max-channels"] {
            let e = T::try_parse_from(["t", "all_reduce", bad, "0"]).err();
            assert!(
                e.is_some_and(|e| e.to_string().contains("0 is not in 1..")),
                "{bad}"
            );
        }
        assert!(T::try_parse_from(["t", "all_reduce", "--channels", "2"]).is_ok());
    }

    #[test]
    fn show_refuses_more_steps_than_it_can_print() {
        // A 16 MiB ring cut in 64-byte chunks: about 15.7 M steps, which
        // `show` held and printed until it ran out of memory.
        let mut a = args("all_reduce");
        a.ranks = 16;
        a.bytes = "16M".into();
        a.chunk = Some("64".into());
        let e = show(&show_args(a)).unwrap_err().to_string();
        assert!(e.contains("too many to show here"), "{e}");
        // A problem no algorithm takes says why.
        let mut b = args("broadcast");
        b.root = Some(9);
        let e = check_cmd(&b).unwrap_err().to_string();
        assert!(
            e.contains("--root 9: out of range for 4 ranks (0 to 3)"),
            "{e}"
        );
        let mut a = args("all_reduce");
        a.ranks = 16;
        a.bytes = "1M".into();
        a.chunk = Some("0".into());
        assert!(show(&show_args(a)).is_ok());
    }
}
