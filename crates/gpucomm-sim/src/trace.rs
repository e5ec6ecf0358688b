//! Chrome trace output (JSON, opens in Perfetto / chrome://tracing): one
//! track per rank and one per busy link.

use serde_json::{Value, json};

use crate::exec::ExecResult;

/// Builds a Chrome trace from a run that recorded spans
/// (`ExecConfig::trace_ranks > 0`). `link_names` maps link ids to names.
/// [`write_chrome_trace`] writes the same events without holding them.
pub fn chrome_trace(
    run: &ExecResult,
    link_name: &dyn Fn(u32) -> String,
    offset_us: f64,
) -> Vec<Value> {
    events(run, link_name, offset_us).collect()
}

/// The events of [`chrome_trace`], one at a time: a run of hundreds of
/// ranks records millions of spans, and as JSON values together they took
/// gigabytes (a 504-rank all_gather's trace ran out of memory).
fn events<'a>(
    run: &'a ExecResult,
    link_name: &'a dyn Fn(u32) -> String,
    offset_us: f64,
) -> impl Iterator<Item = Value> + 'a {
    let mut ranks: Vec<usize> = run.rank_spans.iter().map(|s| s.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut links: Vec<u32> = run.link_spans.iter().map(|s| s.link).collect();
    links.sort_unstable();
    links.dedup();
    let rank_names = ranks.into_iter().map(|r| {
        json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": r,
                "args": {"name": format!("rank {r}")}})
    });
    let rank_spans = run.rank_spans.iter().map(move |s| {
        json!({
            "ph": "X", "pid": 0, "tid": s.rank, "name": s.what,
            "ts": offset_us + s.start.as_us(), "dur": (s.end - s.start).as_us(),
            "args": {"step": s.step, "channel": s.channel, "bytes": s.bytes}
        })
    });
    let link_names = links.into_iter().map(move |l| {
        json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": l,
                "args": {"name": link_name(l)}})
    });
    let link_spans = run.link_spans.iter().map(move |s| {
        json!({
            "ph": "X", "pid": 1, "tid": s.link, "name": "busy",
            "ts": offset_us + s.start.as_us(), "dur": (s.end - s.start).as_us()
        })
    });
    rank_names
        .chain(rank_spans)
        .chain(link_names)
        .chain(link_spans)
}

/// Writes [`document`]`(`[`chrome_trace`]`(run, link_name, offset_us))`
/// to `w`, the same JSON, one event at a time: memory stays that of the
/// recorded spans, whatever the trace's size.
pub fn write_chrome_trace(
    mut w: impl std::io::Write,
    run: &ExecResult,
    link_name: &dyn Fn(u32) -> String,
    offset_us: f64,
) -> std::io::Result<()> {
    w.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
    for (i, e) in process_names()
        .into_iter()
        .chain(events(run, link_name, offset_us))
        .enumerate()
    {
        if i > 0 {
            w.write_all(b",")?;
        }
        serde_json::to_writer(&mut w, &e)?;
    }
    w.write_all(b"]}")?;
    w.flush()
}

/// The two processes' names: ranks (pid 0), links (pid 1).
fn process_names() -> [Value; 2] {
    [
        json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "ranks"}}),
        json!({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "links"}}),
    ]
}

/// Wraps events into a trace document with process names.
pub fn document(events: Vec<Value>) -> Value {
    let events: Vec<Value> = process_names().into_iter().chain(events).collect();
    json!({ "traceEvents": events, "displayTimeUnit": "ns" })
}

/// Spans on named tracks (`(track, name, start_us, end_us)`), for the
/// commands that run no schedule (p2p, copy, rdma, train).
pub fn spans(spans: &[(String, String, f64, f64)]) -> Value {
    let mut tracks: Vec<&str> = spans.iter().map(|s| s.0.as_str()).collect();
    tracks.dedup();
    let mut names: Vec<&str> = Vec::new();
    for t in tracks {
        if !names.contains(&t) {
            names.push(t);
        }
    }
    let mut ev = Vec::new();
    for (i, t) in names.iter().enumerate() {
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": i, "args": {"name": t}}));
    }
    for (track, name, a, b) in spans {
        let tid = names.iter().position(|t| t == track).unwrap_or(0);
        ev.push(json!({"ph": "X", "pid": 0, "tid": tid, "name": name, "ts": a, "dur": b - a}));
    }
    document(ev)
}
