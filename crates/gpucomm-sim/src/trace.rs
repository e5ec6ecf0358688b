//! Chrome trace output (JSON, opens in Perfetto / chrome://tracing): one
//! track per rank and one per busy link.
//!
//! The slices of one track must nest (Perfetto drops or misplaces the
//! others), and a rank's transfers overlap without nesting: its channels
//! run at once, and a connection starts its next chunk while the last is
//! still in flight. So a rank's track is as many lanes (threads named
//! `rank R`, `rank R #2`, ...) as it has transfers at once, each transfer
//! on the first lane free when it starts.

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
    let tracks = Lanes::new(
        run.rank_spans
            .iter()
            .map(|s| (s.rank, s.start.as_ps(), s.end.as_ps())),
    );
    let rank_names = tracks
        .names(|r| format!("rank {r}"))
        .into_iter()
        .map(|(tid, name)| {
            json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                "args": {"name": name}})
        });
    let rank_spans = run.rank_spans.iter().zip(tracks.tid).map(move |(s, tid)| {
        json!({
            "ph": "X", "pid": 0, "tid": tid, "name": s.what,
            "ts": offset_us + s.start.as_us(), "dur": (s.end - s.start).as_us(),
            "args": {"rank": s.rank, "step": s.step, "channel": s.channel, "bytes": s.bytes}
        })
    });
    let mut links: Vec<u32> = run.link_spans.iter().map(|s| s.link).collect();
    links.sort_unstable();
    links.dedup();
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

/// Tracks of spans that may overlap: every span of a key (a rank, a named
/// track) on one of the key's lanes, the first free when it starts, so
/// that no two spans of a lane overlap; `tid` numbers the lanes of all
/// keys in key order.
struct Lanes<K> {
    /// Per span, in input order.
    tid: Vec<u64>,
    /// Per key in order: the key, its first lane's tid and its lanes.
    keys: Vec<(K, u64, u32)>,
}

impl<K: Ord + Copy> Lanes<K> {
    fn new<T: PartialOrd + Copy>(spans: impl Iterator<Item = (K, T, T)>) -> Self {
        let spans: Vec<(K, T, T)> = spans.collect();
        let mut order: Vec<usize> = (0..spans.len()).collect();
        // By key, then start (a stable sort keeps equal starts in order).
        order.sort_by(|&a, &b| {
            let (x, y) = (&spans[a], &spans[b]);
            x.0.cmp(&y.0)
                .then(x.1.partial_cmp(&y.1).unwrap_or(std::cmp::Ordering::Equal))
        });
        let mut lane = vec![0u32; spans.len()];
        let mut keys: Vec<(K, u64, u32)> = Vec::new();
        // The current key's lanes: when each is free again.
        let mut free_at: Vec<T> = Vec::new();
        for &i in &order {
            let (k, start, end) = spans[i];
            if keys.last().is_none_or(|&(last, _, _)| last != k) {
                keys.push((k, 0, 0));
                free_at.clear();
            }
            let l = match free_at.iter().position(|&f| f <= start) {
                Some(l) => l,
                None => {
                    free_at.push(end);
                    free_at.len() - 1
                }
            };
            free_at[l] = end;
            lane[i] = l as u32;
            let entry = keys.last_mut().expect("pushed");
            entry.2 = entry.2.max(l as u32 + 1);
        }
        let mut next = 0u64;
        for k in &mut keys {
            k.1 = next;
            next += u64::from(k.2);
        }
        let first = |k: K| keys[keys.partition_point(|e| e.0 < k)].1;
        let tid = spans
            .iter()
            .zip(&lane)
            .map(|(s, &l)| first(s.0) + u64::from(l))
            .collect();
        Lanes { tid, keys }
    }

    /// `(tid, name)` of every lane: the key's label, then `#2`, `#3`...
    fn names(&self, label: impl Fn(K) -> String) -> Vec<(u64, String)> {
        let mut v = Vec::new();
        for &(k, first, lanes) in &self.keys {
            for l in 0..lanes {
                let name = match l {
                    0 => label(k),
                    _ => format!("{} #{}", label(k), l + 1),
                };
                v.push((first + u64::from(l), name));
            }
        }
        v
    }
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
    let index = |track: &str| names.iter().position(|t| *t == track).unwrap_or(0);
    let lanes = Lanes::new(spans.iter().map(|s| (index(&s.0), s.2, s.3)));
    let mut ev = Vec::new();
    for (tid, name) in lanes.names(|i| names[i].to_string()) {
        ev.push(
            json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": name}}),
        );
    }
    for ((_, name, a, b), tid) in spans.iter().zip(&lanes.tid) {
        ev.push(json!({"ph": "X", "pid": 0, "tid": tid, "name": name, "ts": a, "dur": b - a}));
    }
    document(ev)
}
