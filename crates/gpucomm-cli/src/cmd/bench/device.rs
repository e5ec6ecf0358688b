//! `gpucomm bench --memory device`: the sweep on device buffers.
//!
//! The same rows as the host sweep (out of place then in place, each timed
//! then checked), with [`DeviceBuffer`]s made per size at exactly the
//! layout's lengths and one stream. A timed call is the collective plus a
//! wait on the event it returns, so the time is the time to a result the
//! device can use. Every size is warmed up just before it is timed (the
//! first call on fresh buffers opens them on the peers through IPC).

use anyhow::Context;
use gpucomm::device::{DeviceBuffer, DeviceComm, Stream};
use gpucomm::{CallOptions, Element};
use gpucomm_algo::Collective;

use super::check::{self, Elem, Layout, Pattern};
use super::worker::{Emit, call_for, time};
use super::{Args, Plan, Record};

/// Runs the device sweep on one rank.
pub fn sweep(dc: &DeviceComm, args: &Args, plan: &Plan, emit: &Emit<'_>) -> anyhow::Result<()> {
    use gpucomm::DataType as D;
    match args.dtype {
        D::F32 => typed::<f32>(dc, args, plan, emit),
        D::F64 => typed::<f64>(dc, args, plan, emit),
        D::F16 => typed::<gpucomm::f16>(dc, args, plan, emit),
        D::Bf16 => typed::<gpucomm::bf16>(dc, args, plan, emit),
        D::I8 => typed::<i8>(dc, args, plan, emit),
        D::U8 => typed::<u8>(dc, args, plan, emit),
        D::I32 => typed::<i32>(dc, args, plan, emit),
        D::U32 => typed::<u32>(dc, args, plan, emit),
        D::I64 => typed::<i64>(dc, args, plan, emit),
        D::U64 => typed::<u64>(dc, args, plan, emit),
    }
}

/// A device buffer holding `host`.
fn upload<T: Element>(
    dc: &DeviceComm,
    s: &Stream,
    host: &[T],
    what: &str,
) -> anyhow::Result<DeviceBuffer<T>> {
    dc.alloc_from(host, s)
        .with_context(|| format!("allocating the {what} device buffer"))
}

fn typed<T: Elem + Element>(
    dc: &DeviceComm,
    args: &Args,
    plan: &Plan,
    emit: &Emit<'_>,
) -> anyhow::Result<()> {
    let (n, rank) = (dc.world_size(), dc.rank());
    let elt = std::mem::size_of::<T>();
    let coll = plan.collective;
    let call = call_for(coll, args.op);
    let opts = CallOptions {
        algorithm: args.algorithm.0,
        ..CallOptions::default()
    };
    let s = dc.stream().context("creating a stream")?;
    for (index, &nbytes) in plan.sizes.iter().enumerate() {
        let layout = Layout::new(coll, nbytes, elt, n);
        let iters = args.iters_for(nbytes);
        let warmup = args.warmup_for(nbytes);
        let seed = |k: u64| index as u64 * 4 + k;
        let ctx = |what: &str| format!("{} {what} on device buffers, {nbytes} bytes", coll.name());

        // Out of place.
        let p = Pattern::new::<T>(coll, args.op, n, seed(0));
        let mut host = vec![T::default(); layout.send];
        check::fill_input(&p, rank, &mut host);
        let mut send = upload(dc, &s, &host, "send")?;
        let mut recv = upload(dc, &s, &vec![T::default(); layout.recv], "receive")?;
        let oop_us = time(dc.comm(), warmup, iters, None, || {
            dc.run(call, Some(&send), &mut recv, &s, &opts)?.wait()
        })
        .with_context(|| ctx("out of place"))?;
        let oop_wrong = if plan.check && coll != Collective::Barrier {
            let p = Pattern::new::<T>(coll, args.op, n, seed(1));
            check::fill_input(&p, rank, &mut host);
            send.copy_from_host(&host, &s)?;
            recv.copy_from_host(&vec![T::from_i128(-99); layout.recv], &s)?;
            dc.run(call, Some(&send), &mut recv, &s, &opts)
                .and_then(|e| e.wait())
                .with_context(|| ctx("out of place (checked run)"))?;
            let out = recv.to_vec(&s)?;
            Some(check::count_wrong(&p, &layout, rank, &out))
        } else {
            plan.check.then_some(0)
        };
        // The out-of-place host copy goes too: the host memory check
        // counts one host buffer of the in-place size at a time.
        drop((send, recv, host));

        // In place: the input where NCCL puts it in the one buffer.
        let len = layout.in_place_len();
        let (in_off, out_off) = (
            layout.in_place_input(coll, rank),
            layout.in_place_output(coll, rank),
        );
        let p = Pattern::new::<T>(coll, args.op, n, seed(2));
        let mut host = vec![T::default(); len];
        check::fill_input(&p, rank, &mut host[in_off..in_off + layout.send]);
        let mut buf = upload(dc, &s, &host, "in-place")?;
        let ip_us = time(dc.comm(), warmup, iters, None, || {
            dc.run(call, None, &mut buf, &s, &opts)?.wait()
        })
        .with_context(|| ctx("in place"))?;
        let ip_wrong = if plan.check && coll != Collective::Barrier {
            let p = Pattern::new::<T>(coll, args.op, n, seed(3));
            host.fill(T::from_i128(-99));
            check::fill_input(&p, rank, &mut host[in_off..in_off + layout.send]);
            buf.copy_from_host(&host, &s)?;
            dc.run(call, None, &mut buf, &s, &opts)
                .and_then(|e| e.wait())
                .with_context(|| ctx("in place (checked run)"))?;
            let out = buf.to_vec(&s)?;
            Some(check::count_wrong(
                &p,
                &layout,
                rank,
                &out[out_off..out_off + layout.recv],
            ))
        } else {
            plan.check.then_some(0)
        };
        drop(buf);
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
    dc.comm().barrier().context("final barrier")?;
    Ok(())
}
