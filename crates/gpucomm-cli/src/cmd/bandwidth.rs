//! `gpucomm bandwidth`: copy bandwidth and latency of the GPUs of this
//! machine, in the spirit of nvbandwidth and CUDA's bandwidthTest.
//!
//! Host-to-device and device-to-host with pinned and pageable memory,
//! device-to-device on a copy engine and with a copy kernel, peer-to-peer
//! matrices (copy engine and kernel) when there are several GPUs, the
//! host-staged path, and the latency of small copies. Exit codes: 0 done,
//! 1 error, 2 bad command line (clap's), 3 no GPU (nothing measured; the
//! reason is printed).

use std::process::ExitCode;

use anyhow::Context;
use gpucomm_cuda::bench::{CopyKind, Measurement, Timing, measure, measure_with};
use gpucomm_cuda::{Device, Error, Gpu, ProbeConfig};
use serde_json::json;

use super::common::{OrUsage, format_bytes, parse_size, size_sweep, usage};

/// Exit code when no GPU is present (2 is clap's for a bad command line).
pub const EXIT_NO_GPU: u8 = 3;

/// Arguments of `gpucomm bandwidth`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 measured, 1 error, 2 bad command line, 3 no GPU present (reason printed)."
)]
pub struct Args {
    /// Tests to run, comma-separated (default: all): h2d_pinned, h2d_pageable,
    /// d2h_pinned, d2h_pageable, d2d_ce, d2d_kernel, p2p_ce, p2p_kernel, host_staged.
    #[arg(short = 't', long, value_delimiter = ',', value_parser = parse_kind)]
    pub tests: Vec<CopyKind>,
    /// Smallest size, in bytes (K, M, G suffixes: powers of 1024).
    #[arg(short = 'b', long, default_value = "64K", value_parser = parse_size_arg)]
    pub min_bytes: u64,
    /// Largest size, in bytes (also the size of the P2P matrices).
    #[arg(short = 'e', long, default_value = "256M", value_parser = parse_size_arg)]
    pub max_bytes: u64,
    /// Multiply the size by this from one row to the next.
    #[arg(short = 'f', long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..))]
    pub step_factor: u64,
    /// Timed copies per size (default: about 1 GiB per size, 5 to 1000).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: Option<u32>,
    /// Untimed copies before the timed ones.
    #[arg(short = 'w', long, default_value_t = 3)]
    pub warmup: u32,
    /// Size of the small-copy latency test: one copy issued and waited for
    /// at a time (0 skips it).
    #[arg(long, default_value = "8", value_parser = parse_size_arg)]
    pub latency_bytes: u64,
    /// Timed copies of the latency test.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub latency_iters: u32,
    /// Device of the single-device tests.
    #[arg(long, default_value_t = 0)]
    pub device: u32,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Load the CUDA driver from this library instead of libcuda.so.1.
    #[arg(long, value_name = "LIBRARY")]
    pub cuda_driver: Option<String>,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| format!("{e:#}"))
}

fn parse_kind(s: &str) -> Result<CopyKind, String> {
    CopyKind::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = CopyKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown test {s:?} (one of {})", names.join(", "))
    })
}

/// A test that could not run here, and why (no NVRTC, no P2P, one GPU).
#[derive(Debug, Clone, PartialEq)]
struct Skipped {
    kind: CopyKind,
    reason: String,
}

/// Errors that mean "this test cannot run on this machine" rather than
/// failure: no NVRTC, a kernel copy without P2P (an invalid argument of
/// `measure`). A transfer that broke while running ([`Error::Transfer`]),
/// a timeout or a driver error fails the command.
fn skippable(e: &Error) -> bool {
    matches!(e, Error::Nvrtc { .. } | Error::InvalidArgument(_))
}

/// About 1 GiB per size, 5 to 1000 copies: below 1 MiB a copy takes a few
/// microseconds, and 200 of them (the old cap) made a timing window of
/// about a millisecond, which swung by 10-20% from run to run on the H100.
fn default_iters(bytes: u64) -> u32 {
    ((1u64 << 30) / bytes.max(1)).clamp(5, 1000) as u32
}

/// Runs `gpucomm bandwidth`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sizes = size_sweep(args.min_bytes, args.max_bytes, args.step_factor)?;
    // A library the command line names that is not there is a typo, not a
    // machine without a GPU (exit 3 told a script "no GPU"). A bare name
    // (`libcuda.so.1`) is the loader's to find.
    if let Some(lib) = &args.cuda_driver {
        if lib.is_empty() {
            usage!("--cuda-driver: empty library name");
        }
        if lib.contains('/') && !std::path::Path::new(lib).exists() {
            usage!("--cuda-driver {lib}: no such file");
        }
    }
    let gpu = match &args.cuda_driver {
        Some(lib) => Gpu::probe_with(&ProbeConfig {
            driver_libraries: vec![lib.clone()],
        }),
        None => Gpu::probe(),
    };
    let gpu = match gpu {
        Ok(g) => g,
        Err(e) if e.is_no_gpu() => {
            if args.json {
                println!("{}", json!({ "gpu": false, "reason": e.to_string() }));
            }
            eprintln!("gpucomm bandwidth: {e}; nothing to measure (exit status {EXIT_NO_GPU})");
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
        Err(e) => return Err(e).context("probing the GPU"),
    };
    let devices = gpu.devices().context("opening the devices")?;
    let dev = devices
        .get(args.device as usize)
        .with_context(|| {
            format!(
                "--device {}: this machine has {} GPU(s)",
                args.device,
                devices.len()
            )
        })
        .or_usage()?;
    let tests = if args.tests.is_empty() {
        CopyKind::ALL.to_vec()
    } else {
        args.tests.clone()
    };

    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let mut matrices = Vec::new();
    for &kind in &tests {
        if kind.is_pairwise() && kind != CopyKind::HostStaged {
            if devices.len() < 2 {
                skipped.push(Skipped {
                    kind,
                    reason: "needs two GPUs".into(),
                });
                continue;
            }
            matrices.push((
                kind,
                p2p_matrix(kind, &devices, args.max_bytes as usize, &args)?,
            ));
            continue;
        }
        for &bytes in &sizes {
            let iters = args.iters.unwrap_or_else(|| default_iters(bytes));
            match measure(kind, dev, dev, bytes as usize, args.warmup, iters) {
                Ok(m) => rows.push(m),
                Err(e) if skippable(&e) => {
                    skipped.push(Skipped {
                        kind,
                        reason: e.to_string(),
                    });
                    break;
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("{} at {bytes} bytes", kind.name()));
                }
            }
        }
        if kind == CopyKind::HostStaged && devices.len() >= 2 {
            matrices.push((
                kind,
                p2p_matrix(kind, &devices, args.max_bytes as usize, &args)?,
            ));
        }
    }
    let mut latency = Vec::new();
    if args.latency_bytes > 0 {
        for &kind in tests.iter().filter(|k| !k.is_pairwise()) {
            if skipped.iter().any(|s| s.kind == kind) {
                continue;
            }
            match measure_with(
                kind,
                dev,
                dev,
                args.latency_bytes as usize,
                args.warmup.max(10),
                args.latency_iters,
                Timing::RoundTrip,
            ) {
                Ok(m) => latency.push(m),
                Err(e) if skippable(&e) => skipped.push(Skipped {
                    kind,
                    reason: e.to_string(),
                }),
                Err(e) => return Err(e).with_context(|| format!("{} latency", kind.name())),
            }
        }
    }

    if args.json {
        let rec = |m: &Measurement| {
            json!({ "test": m.kind.name(), "src": m.src, "dst": m.dst, "bytes": m.bytes,
                    "iters": m.iters, "time_us": m.seconds * 1e6, "gbps": m.gbps() })
        };
        let devs: Vec<_> = devices
            .iter()
            .map(|d| {
                let i = d.info();
                json!({ "ordinal": i.ordinal, "name": i.name, "pci_bus_id": i.pci_bus_id,
                        "total_memory": i.total_memory,
                        "compute_capability": format!("{}.{}", i.compute_capability.0, i.compute_capability.1),
                        "multiprocessors": i.multiprocessors, "copy_engines": i.copy_engines })
            })
            .collect();
        let mats: Vec<_> = matrices
            .iter()
            .map(|(k, m)| json!({ "test": k.name(), "bytes": args.max_bytes,
                                  "gbps": m.iter().map(|r| r.iter().map(|c| c.as_ref().map(|m| m.gbps())).collect::<Vec<_>>()).collect::<Vec<_>>() }))
            .collect();
        let (maj, min) = gpu.driver_version();
        println!(
            "{}",
            json!({
                "gpu": true,
                "driver_cuda_version": format!("{maj}.{min}"),
                "devices": devs,
                "results": rows.iter().map(rec).collect::<Vec<_>>(),
                "latency": latency.iter().map(rec).collect::<Vec<_>>(),
                "p2p_matrices": mats,
                "pinned_over_pageable": pinned_ratios(&rows).iter().map(|r| json!({
                    "direction": r.direction, "bytes": r.bytes, "ratio": r.ratio })).collect::<Vec<_>>(),
                "skipped": skipped.iter().map(|s| json!({"test": s.kind.name(), "reason": s.reason})).collect::<Vec<_>>(),
            })
        );
    } else {
        print!("{}", header(&gpu, &devices));
        print!("{}", table(&rows));
        print!("{}", ratio_text(&pinned_ratios(&rows)));
        for (k, m) in &matrices {
            print!("{}", matrix_text(*k, args.max_bytes, m));
        }
        if !latency.is_empty() {
            print!("{}", latency_text(&latency));
        }
        for s in &skipped {
            println!("# skipped {}: {}", s.kind.name(), s.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

type Matrix = Vec<Vec<Option<Measurement>>>;

/// Every ordered pair of devices (`None` on the diagonal, and where the
/// pair cannot do it, e.g. a kernel copy without P2P).
fn p2p_matrix(
    kind: CopyKind,
    devices: &[Device],
    bytes: usize,
    args: &Args,
) -> anyhow::Result<Matrix> {
    let iters = args.iters.unwrap_or_else(|| default_iters(bytes as u64));
    let mut m = Vec::new();
    for s in devices {
        let mut row = Vec::new();
        for d in devices {
            if s.ordinal() == d.ordinal() {
                row.push(None);
                continue;
            }
            match measure(kind, s, d, bytes, args.warmup, iters) {
                Ok(x) => row.push(Some(x)),
                Err(e) if skippable(&e) => row.push(None),
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("{} {} -> {}", kind.name(), s.ordinal(), d.ordinal())
                    });
                }
            }
        }
        m.push(row);
    }
    Ok(m)
}

fn header(gpu: &Gpu, devices: &[Device]) -> String {
    let (maj, min) = gpu.driver_version();
    let mut s = format!(
        "# gpucomm bandwidth: driver CUDA {maj}.{min} ({})\n",
        gpu.library()
    );
    match gpucomm_cuda::nvrtc_version() {
        Ok((a, b)) => s.push_str(&format!(
            "# NVRTC {a}.{b} ({})\n",
            gpucomm_cuda::nvrtc_library().unwrap_or_default()
        )),
        Err(e) => s.push_str(&format!("# {e} (kernel tests skipped)\n")),
    }
    for d in devices {
        let i = d.info();
        s.push_str(&format!(
            "# device {}: {} ({}), compute {}.{}, {} SMs, {}, {} copy engine(s)\n",
            i.ordinal,
            i.name,
            i.pci_bus_id,
            i.compute_capability.0,
            i.compute_capability.1,
            i.multiprocessors,
            format_bytes(i.total_memory),
            i.copy_engines
        ));
    }
    s
}

fn table(rows: &[Measurement]) -> String {
    let mut s = format!(
        "#\n# {:<13} {:>3} {:>3} {:>12} {:>7} {:>12} {:>9}\n",
        "test", "src", "dst", "size", "iters", "time(us)", "GB/s"
    );
    for m in rows {
        s.push_str(&format!(
            "  {:<13} {:>3} {:>3} {:>12} {:>7} {:>12.2} {:>9.2}\n",
            m.kind.name(),
            m.src,
            m.dst,
            format_bytes(m.bytes as u64),
            m.iters,
            m.seconds * 1e6,
            m.gbps()
        ));
    }
    s
}

/// Pinned bandwidth over pageable bandwidth at one size and direction.
#[derive(Debug, Clone, PartialEq)]
struct Ratio {
    direction: &'static str,
    bytes: usize,
    ratio: f64,
}

/// For every size measured both pinned and pageable, in each direction.
fn pinned_ratios(rows: &[Measurement]) -> Vec<Ratio> {
    let pairs = [
        (
            "h2d",
            CopyKind::HostToDevicePinned,
            CopyKind::HostToDevicePageable,
        ),
        (
            "d2h",
            CopyKind::DeviceToHostPinned,
            CopyKind::DeviceToHostPageable,
        ),
    ];
    let mut out = Vec::new();
    for (direction, pinned, pageable) in pairs {
        for p in rows.iter().filter(|m| m.kind == pinned) {
            if let Some(q) = rows
                .iter()
                .find(|m| m.kind == pageable && m.bytes == p.bytes)
                && q.gbps() > 0.0
            {
                out.push(Ratio {
                    direction,
                    bytes: p.bytes,
                    ratio: p.gbps() / q.gbps(),
                });
            }
        }
    }
    out
}

fn ratio_text(r: &[Ratio]) -> String {
    if r.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "#\n# pinned / pageable bandwidth\n# {:<9} {:>12} {:>9}\n",
        "direction", "size", "ratio"
    );
    for x in r {
        s.push_str(&format!(
            "  {:<9} {:>12} {:>9.2}\n",
            x.direction,
            format_bytes(x.bytes as u64),
            x.ratio
        ));
    }
    s
}

fn latency_text(rows: &[Measurement]) -> String {
    let mut s = format!(
        "#\n# small-copy latency (issue one copy, wait for it; host clock)\n# {:<13} {:>12} {:>7} {:>12}\n",
        "test", "size", "iters", "time(us)"
    );
    for m in rows {
        s.push_str(&format!(
            "  {:<13} {:>12} {:>7} {:>12.2}\n",
            m.kind.name(),
            format_bytes(m.bytes as u64),
            m.iters,
            m.seconds * 1e6
        ));
    }
    s
}

fn matrix_text(kind: CopyKind, bytes: u64, m: &Matrix) -> String {
    let mut s = format!(
        "#\n# {} GB/s at {} (row: source, column: destination)\n#     ",
        kind.name(),
        format_bytes(bytes)
    );
    for j in 0..m.len() {
        s.push_str(&format!("{j:>9}"));
    }
    s.push('\n');
    for (i, row) in m.iter().enumerate() {
        s.push_str(&format!("  {i:>3}"));
        for c in row {
            match c {
                Some(x) => s.push_str(&format!("{:>9.2}", x.gbps())),
                None => s.push_str(&format!("{:>9}", "-")),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: CopyKind, bytes: usize, seconds: f64) -> Measurement {
        Measurement {
            kind,
            src: 0,
            dst: 1,
            bytes,
            iters: 10,
            seconds,
        }
    }

    #[test]
    fn pinned_over_pageable_pairs_sizes_and_directions() {
        let rows = [
            m(CopyKind::HostToDevicePinned, 1024, 1e-6),
            m(CopyKind::HostToDevicePageable, 1024, 4e-6),
            m(CopyKind::HostToDevicePinned, 2048, 1e-6), // no pageable partner
            m(CopyKind::DeviceToHostPageable, 1024, 3e-6),
            m(CopyKind::DeviceToHostPinned, 1024, 2e-6),
        ];
        let r = pinned_ratios(&rows);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].direction, r[0].bytes), ("h2d", 1024));
        assert!((r[0].ratio - 4.0).abs() < 1e-9);
        assert_eq!(r[1].direction, "d2h");
        assert!((r[1].ratio - 1.5).abs() < 1e-9);
        assert!(ratio_text(&r).contains("4.00"));
        assert_eq!(ratio_text(&[]), "");
    }

    /// The staged path reported its runtime failures ("staged transfer
    /// aborted", "staging sender panicked") as invalid arguments, which
    /// this command skipped ("# skipped host_staged: ...", exit 0).
    #[test]
    fn a_failed_transfer_is_an_error_not_a_skip() {
        assert!(!skippable(&Error::Transfer(
            "the staging sender panicked".into()
        )));
        assert!(!skippable(&Error::Timeout {
            what: "a filled staging slot".into(),
            millis: 30_000,
        }));
        assert!(skippable(&Error::InvalidArgument(
            "device 1 cannot access device 0 directly (no P2P): no kernel copy".into()
        )));
        assert!(skippable(&Error::Nvrtc {
            message: "cannot load NVRTC".into(),
            log: String::new(),
        }));
    }

    #[test]
    fn kinds_parse_and_unknown_ones_are_named() {
        assert_eq!(
            parse_kind("d2d_ce").unwrap(),
            CopyKind::DeviceToDeviceCopyEngine
        );
        let e = parse_kind("h2d").unwrap_err();
        assert!(e.contains("h2d_pinned"), "{e}");
    }

    #[test]
    fn iterations_scale_with_size() {
        assert_eq!(default_iters(8), 1000);
        assert_eq!(default_iters(1 << 20), 1000);
        assert_eq!(default_iters(4 << 20), 256);
        assert_eq!(default_iters(256 << 20), 5);
        assert_eq!(default_iters(64 << 20), 16);
    }

    #[test]
    fn tables_show_size_time_and_bandwidth() {
        // Formatting only: 1 MiB in 100 us is 10.49 GB/s.
        let t = table(&[m(CopyKind::HostToDevicePinned, 1 << 20, 100e-6)]);
        assert!(t.contains("h2d_pinned"), "{t}");
        assert!(t.contains("1 MiB"), "{t}");
        assert!(t.contains("100.00"), "{t}");
        assert!(t.contains("10.49"), "{t}");
        let l = latency_text(&[m(CopyKind::DeviceToHostPinned, 8, 2.5e-6)]);
        assert!(l.contains("8 B") && l.contains("2.50"), "{l}");
        let mx = matrix_text(
            CopyKind::PeerCopyEngine,
            1 << 20,
            &vec![
                vec![None, Some(m(CopyKind::PeerCopyEngine, 1 << 20, 1e-3))],
                vec![None, None],
            ],
        );
        assert!(mx.contains("p2p_ce GB/s at 1 MiB"), "{mx}");
        assert!(mx.contains("1.05"), "{mx}");
    }
}
