//! One rank of `gpucomm bench`: joins the job from the environment the
//! coordinator's launcher set, runs the sweep, prints [`Record`]s.
//!
//! Buffers come from [`Communicator::alloc`] (memory peers on this host map),
//! the runtime's zero-copy path: over shared memory, large sends travel as
//! references and receivers reduce straight from the peer's buffer. They are
//! allocated once at the largest size; each size uses their first elements.
//! `--memory pinned` page-locks them (registered with the GPU when there is
//! one); `--memory device` runs the sweep of `device.rs` instead.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use std::sync::Arc;

use gpucomm::device::{DeviceBackend, DeviceComm, DeviceOptions};
use gpucomm::{BootstrapConfig, Buffer, Call, CallOptions, Communicator, Element, MemorySpace};
use gpucomm_algo::Collective;

use super::check::{self, Elem, Layout, Pattern};
use super::{Args, Fault, Memory, Plan, RECORD, Record};

/// Runs one rank.
pub fn run(args: &Args, plan: &Plan) -> anyhow::Result<ExitCode> {
    let mut cfg = BootstrapConfig::from_env().context(
        "the bench worker runs under the bench coordinator (`gpucomm bench`), not directly",
    )?;
    if cfg.world_size != args.ranks {
        bail!(
            "the launcher started {} ranks but the bench was asked for {}",
            cfg.world_size,
            args.ranks
        );
    }
    let faulty = args.fault.is_some() && cfg.rank == args.fault_rank;
    if faulty && args.fault == Some(Fault::GarbageStore) {
        send_garbage(&cfg.store_addr);
    }
    if faulty && args.fault == Some(Fault::BadToken) {
        cfg.token = "not-the-job-token".into();
    }
    let comm = Communicator::new(&cfg)
        .with_context(|| format!("rank {} cannot join the job", cfg.rank))?;
    let gpu = super::backend(args)?;
    run_rank(comm, gpu, args, plan, &emit)?;
    Ok(ExitCode::SUCCESS)
}

/// Where the host buffers of a sweep come from.
pub enum Alloc<'a> {
    /// Shared pageable memory.
    Host(&'a Communicator),
    /// Shared memory page-locked with `mlock` (no GPU).
    Locked(&'a Communicator),
    /// Shared memory page-locked and registered with the GPU.
    Registered(&'a DeviceComm),
}

impl Alloc<'_> {
    fn get<T: Element>(&self, n: usize) -> Result<Buffer<T>, gpucomm::Error> {
        match self {
            Alloc::Host(c) => c.alloc(n),
            Alloc::Locked(c) => c.alloc_in(n, MemorySpace::HostPinned),
            Alloc::Registered(d) => d.alloc_host(n),
        }
    }
}

/// Where a rank's records go: stdout lines for the coordinator (processes),
/// or straight to the printer (`--threads`).
pub type Emit<'a> = dyn Fn(&Record) -> anyhow::Result<()> + 'a;

/// Runs the sweep on one rank of `comm`, handing every record to `emit`;
/// `gpu` is the device backend (`--memory device`, or `pinned` with a GPU).
pub fn run_rank(
    comm: Communicator,
    gpu: Option<Arc<dyn DeviceBackend>>,
    args: &Args,
    plan: &Plan,
    emit: &Emit<'_>,
) -> anyhow::Result<()> {
    let mut transports: Vec<String> = (0..comm.world_size())
        .filter_map(|p| comm.transport_to(p))
        .map(|t| t.name().to_string())
        .collect();
    transports.sort();
    transports.dedup();
    let (rank, pid, host) = (comm.rank(), std::process::id(), hostname());
    let hello = |memory: String| Record::Hello {
        rank,
        pid,
        host: host.clone(),
        transports: transports.clone(),
        memory,
    };
    let dc = match gpu {
        Some(g) if args.memory != Memory::Host => {
            let name = g.device_name(args.device).unwrap_or_default();
            let dc = DeviceComm::new(
                comm,
                g,
                args.device,
                &DeviceOptions {
                    path: args.gpu_path,
                },
            )
            .with_context(|| format!("rank {rank}: attaching device {}", args.device))?;
            let memory = if args.memory == Memory::Device {
                format!(
                    "device {} ({name}), path {} ({})",
                    args.device,
                    dc.path(),
                    dc.path_reason()
                )
            } else {
                format!("pinned, registered with device {} ({name})", args.device)
            };
            emit(&hello(memory))?;
            if args.memory == Memory::Device {
                return super::device::sweep(&dc, args, plan, emit);
            }
            Some(dc)
        }
        Some(_) | None => {
            let memory = match args.memory {
                Memory::Pinned => "pinned (mlock), no GPU to register with".to_string(),
                _ => String::new(),
            };
            emit(&hello(memory))?;
            // `comm` is moved into a DeviceComm only in the arm above.
            return host_sweep(&comm, args, plan, emit);
        }
    };
    let dc = dc.expect("pinned with a GPU");
    dispatch(&Alloc::Registered(&dc), dc.comm(), args, plan, emit)
}

fn host_sweep(
    comm: &Communicator,
    args: &Args,
    plan: &Plan,
    emit: &Emit<'_>,
) -> anyhow::Result<()> {
    let alloc = if args.memory == Memory::Pinned {
        Alloc::Locked(comm)
    } else {
        Alloc::Host(comm)
    };
    dispatch(&alloc, comm, args, plan, emit)
}

fn dispatch(
    alloc: &Alloc<'_>,
    comm: &Communicator,
    args: &Args,
    plan: &Plan,
    emit: &Emit<'_>,
) -> anyhow::Result<()> {
    use gpucomm::DataType as D;
    match args.dtype {
        D::F32 => sweep::<f32>(alloc, comm, args, plan, emit),
        D::F64 => sweep::<f64>(alloc, comm, args, plan, emit),
        D::F16 => sweep::<gpucomm::f16>(alloc, comm, args, plan, emit),
        D::Bf16 => sweep::<gpucomm::bf16>(alloc, comm, args, plan, emit),
        D::I8 => sweep::<i8>(alloc, comm, args, plan, emit),
        D::U8 => sweep::<u8>(alloc, comm, args, plan, emit),
        D::I32 => sweep::<i32>(alloc, comm, args, plan, emit),
        D::U32 => sweep::<u32>(alloc, comm, args, plan, emit),
        D::I64 => sweep::<i64>(alloc, comm, args, plan, emit),
        D::U64 => sweep::<u64>(alloc, comm, args, plan, emit),
    }
}

fn emit(rec: &Record) -> anyhow::Result<()> {
    let line = format!("{RECORD}{}\n", serde_json::to_string(rec)?);
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.flush()?;
    Ok(())
}

pub(super) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A stray connection to the store that sends garbage (the store must drop
/// it without disturbing the job).
fn send_garbage(store: &str) {
    if let Ok(mut s) = std::net::TcpStream::connect(store) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ =
            s.write_all(b"\xde\xad\xbe\xef GET / HTTP/1.0\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff");
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
    }
}

/// The runtime call for a collective.
pub(super) fn call_for(c: Collective, op: gpucomm_algo::ReduceOp) -> Call {
    match c {
        Collective::AllReduce => Call::AllReduce(op),
        Collective::ReduceScatter => Call::ReduceScatter(op),
        Collective::AllGather => Call::AllGather,
        Collective::Broadcast { root } => Call::Broadcast { root },
        Collective::Reduce { root } => Call::Reduce { op, root },
        Collective::AllToAll => Call::AllToAll,
        Collective::SendRecv { shift } => Call::SendRecv { shift },
        Collective::Barrier => Call::Barrier,
        Collective::Gather { root } => Call::Gather { root },
        Collective::Scatter { root } => Call::Scatter { root },
    }
}

struct Bufs<T: Element> {
    send: Buffer<T>,
    recv: Buffer<T>,
    inplace: Buffer<T>,
}

fn sweep<T: Elem + Element>(
    alloc: &Alloc<'_>,
    comm: &Communicator,
    args: &Args,
    plan: &Plan,
    emit: &Emit<'_>,
) -> anyhow::Result<()> {
    let n = comm.world_size();
    let rank = comm.rank();
    let elt = std::mem::size_of::<T>();
    let coll = plan.collective;
    let layouts: Vec<Layout> = plan
        .sizes
        .iter()
        .map(|&b| Layout::new(coll, b, elt, n))
        .collect();
    // One spare element per buffer: the mismatch fault calls with count + 1.
    let max = |f: fn(&Layout) -> usize| layouts.iter().map(f).max().unwrap_or(0) + n;
    let mut bufs = Bufs::<T> {
        send: alloc
            .get(max(|l| l.send))
            .context("allocating the send buffer")?,
        recv: alloc
            .get(max(|l| l.recv))
            .context("allocating the receive buffer")?,
        inplace: alloc
            .get(max(|l| l.in_place_len()))
            .context("allocating the in-place buffer")?,
    };
    let call = call_for(coll, args.op);
    // A forced algorithm applies to the measured collective only (the
    // barrier before each timed loop keeps the tuner's choice).
    let opts = CallOptions {
        algorithm: args.algorithm.0,
        ..CallOptions::default()
    };
    // nccl-tests warms up every size before timing any (`TimeTest`): the
    // first calls of a job pay for connection setup, page faults on fresh
    // buffers and the peers' start-up, which must not land in the first row.
    for (&nbytes, layout) in plan.sizes.iter().zip(&layouts) {
        for _ in 0..args.warmup_for(nbytes) {
            let Bufs { send, recv, .. } = &mut bufs;
            comm.run(
                call,
                Some(&send[..layout.send]),
                &mut recv[..layout.recv],
                &opts,
            )
            .with_context(|| format!("{} warm-up, {nbytes} bytes", coll.name()))?;
        }
    }
    for (index, (&nbytes, layout)) in plan.sizes.iter().zip(&layouts).enumerate() {
        let iters = args.iters_for(nbytes);
        let warmup = args.warmup_for(nbytes);
        let fault = args
            .fault
            .filter(|_| rank == args.fault_rank && index == args.fault_row);
        let delayed =
            args.fault == Some(Fault::Abort) && rank != args.fault_rank && index == args.fault_row;
        let seed = |k: u64| index as u64 * 4 + k;

        // Out of place: timed, then checked.
        let p = Pattern::new::<T>(coll, args.op, n, seed(0));
        check::fill_input(&p, rank, &mut bufs.send[..layout.send]);
        let mut extra = 0;
        match fault {
            Some(Fault::Mismatch) => extra = 1,
            Some(Fault::Hang) => {
                eprintln!("fault injected: rank {rank} stops calling collectives");
                std::thread::sleep(Duration::from_secs(3600));
            }
            Some(Fault::Abort) => {
                let h = comm.abort_handle();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(300));
                    eprintln!("fault injected: calling abort() from another thread");
                    h.abort();
                });
            }
            _ => {}
        }
        if delayed {
            // The aborting rank waits in its call meanwhile.
            std::thread::sleep(Duration::from_millis(1500));
        }
        let (s, r) = (layout.send + extra, layout.recv + extra);
        let oop_us = time(comm, warmup, iters, fault, || {
            let Bufs { send, recv, .. } = &mut bufs;
            comm.run(call, Some(&send[..s]), &mut recv[..r], &opts)
        })
        .with_context(|| format!("{} out of place, {nbytes} bytes", coll.name()))?;
        let oop_wrong = if plan.check && coll != Collective::Barrier {
            let p = Pattern::new::<T>(coll, args.op, n, seed(1));
            check::fill_input(&p, rank, &mut bufs.send[..layout.send]);
            bufs.recv[..layout.recv].fill(T::from_i128(-99));
            let Bufs { send, recv, .. } = &mut bufs;
            comm.run(
                call,
                Some(&send[..layout.send]),
                &mut recv[..layout.recv],
                &opts,
            )
            .with_context(|| {
                format!("{} out of place (checked run), {nbytes} bytes", coll.name())
            })?;
            if let (Some(Fault::Corrupt), Some(first)) =
                (fault, bufs.recv[..layout.recv].first_mut())
            {
                eprintln!("fault injected: rank {rank} changes one element of its result");
                let bad = T::from_i128(-77);
                *first = if *first == bad {
                    T::from_i128(-78)
                } else {
                    bad
                };
            }
            Some(check::count_wrong(
                &p,
                layout,
                rank,
                &bufs.recv[..layout.recv],
            ))
        } else {
            plan.check.then_some(0)
        };

        // In place: the input sits where NCCL puts it in the one buffer.
        let len = layout.in_place_len();
        let (in_off, out_off) = (
            layout.in_place_input(coll, rank),
            layout.in_place_output(coll, rank),
        );
        let p = Pattern::new::<T>(coll, args.op, n, seed(2));
        check::fill_input(&p, rank, &mut bufs.inplace[in_off..in_off + layout.send]);
        let ip_us = time(comm, warmup, iters, None, || {
            comm.run(call, None, &mut bufs.inplace[..len], &opts)
        })
        .with_context(|| format!("{} in place, {nbytes} bytes", coll.name()))?;
        let ip_wrong = if plan.check && coll != Collective::Barrier {
            let p = Pattern::new::<T>(coll, args.op, n, seed(3));
            bufs.inplace[..len].fill(T::from_i128(-99));
            check::fill_input(&p, rank, &mut bufs.inplace[in_off..in_off + layout.send]);
            comm.run(call, None, &mut bufs.inplace[..len], &opts)
                .with_context(|| {
                    format!("{} in place (checked run), {nbytes} bytes", coll.name())
                })?;
            Some(check::count_wrong(
                &p,
                layout,
                rank,
                &bufs.inplace[out_off..out_off + layout.recv],
            ))
        } else {
            plan.check.then_some(0)
        };

        emit(&Record::Row {
            rank,
            index,
            iters,
            warmup,
            oop_us,
            ip_us,
            oop_wrong,
            ip_wrong,
        })?;
    }
    // Leave together, so that no rank drops its communicator while a peer
    // still reads its buffers.
    comm.barrier().context("final barrier")?;
    Ok(())
}

/// nccl-tests' timing: `warmup` calls, a barrier, then the mean of `iters`
/// back-to-back calls, in microseconds.
pub(super) fn time(
    comm: &Communicator,
    warmup: usize,
    iters: usize,
    fault: Option<Fault>,
    mut f: impl FnMut() -> Result<(), gpucomm::Error>,
) -> Result<f64, gpucomm::Error> {
    for _ in 0..warmup {
        f()?;
    }
    comm.barrier()?;
    let t0 = Instant::now();
    for i in 0..iters {
        if i == iters / 2 {
            match fault {
                Some(Fault::Kill) => {
                    eprintln!("fault injected: this rank kills itself (SIGABRT)");
                    std::process::abort();
                }
                Some(Fault::Exit) => {
                    eprintln!("fault injected: this rank exits with code 3");
                    std::process::exit(3);
                }
                _ => {}
            }
        }
        f()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / iters.max(1) as f64)
}
