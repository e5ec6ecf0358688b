//! Chrome trace output (JSON, opens in Perfetto / chrome://tracing): one
//! track per rank and one per busy link.

use serde_json::{Value, json};

use crate::exec::ExecResult;

/// Builds a Chrome trace from a run that recorded spans
/// (`ExecConfig::trace_ranks > 0`). `link_names` maps link ids to names.
pub fn chrome_trace(
    run: &ExecResult,
    link_name: &dyn Fn(u32) -> String,
    offset_us: f64,
) -> Vec<Value> {
    let mut ev = Vec::new();
    let mut ranks: Vec<usize> = run.rank_spans.iter().map(|s| s.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for r in &ranks {
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": r,
                        "args": {"name": format!("rank {r}")}}));
    }
    for s in &run.rank_spans {
        ev.push(json!({
            "ph": "X", "pid": 0, "tid": s.rank, "name": s.what,
            "ts": offset_us + s.start.as_us(), "dur": (s.end - s.start).as_us(),
            "args": {"step": s.step, "channel": s.channel, "bytes": s.bytes}
        }));
    }
    let mut links: Vec<u32> = run.link_spans.iter().map(|s| s.link).collect();
    links.sort_unstable();
    links.dedup();
    for l in &links {
        ev.push(json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": l,
                        "args": {"name": link_name(*l)}}));
    }
    for s in &run.link_spans {
        ev.push(json!({
            "ph": "X", "pid": 1, "tid": s.link, "name": "busy",
            "ts": offset_us + s.start.as_us(), "dur": (s.end - s.start).as_us()
        }));
    }
    ev
}

/// Wraps events into a trace document with process names.
pub fn document(mut events: Vec<Value>) -> Value {
    events.insert(
        0,
        json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "ranks"}}),
    );
    events.insert(
        1,
        json!({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "links"}}),
    );
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
