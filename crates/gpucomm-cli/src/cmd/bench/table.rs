//! The bench's output: nccl-tests' table (and JSON lines), built from the
//! records the ranks send.

use std::collections::BTreeMap;
use std::io::Write;

use gpucomm_algo::{Collective, ReduceOp};

use super::super::common::nccl_type_name;
use super::{Args, Memory, Plan, Record, check};

/// One output row, combined over ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// nccl-tests' size: the larger of input and output, bytes.
    pub bytes: u64,
    /// nccl-tests' count.
    pub count: usize,
    /// Out-of-place time (us), combined over ranks.
    pub oop_us: f64,
    /// In-place time (us).
    pub ip_us: f64,
    /// Out-of-place wrong elements, summed over ranks (None: not checked).
    pub oop_wrong: Option<u64>,
    /// In-place wrong elements.
    pub ip_wrong: Option<u64>,
    /// Timed iterations.
    pub iters: usize,
    /// Warm-up iterations.
    pub warmup: usize,
}

/// Algorithm and bus bandwidth in GB/s (10^9 bytes/s) for `bytes` in `us`.
pub fn bandwidths(collective: &Collective, nranks: usize, bytes: u64, us: f64) -> (f64, f64) {
    if us <= 0.0 {
        return (0.0, 0.0);
    }
    let algbw = bytes as f64 / 1e3 / us;
    (algbw, algbw * collective.busbw_factor(nranks))
}

/// The output of one bench run: the header, rows as they complete, the footer.
pub(super) struct Printer {
    args: Args,
    plan: Plan,
    hellos: BTreeMap<usize, Record>,
    header_done: bool,
    pending: BTreeMap<usize, Vec<Record>>,
    pub(super) next_row: usize,
    busbw_sum: f64,
    busbw_n: usize,
    pub(super) wrong_rows: usize,
    out: Box<dyn Write + Send>,
    pub(super) failed: Option<String>,
}

impl Printer {
    /// A printer writing to `out`.
    pub(super) fn new(args: Args, plan: Plan, out: Box<dyn Write + Send>) -> Self {
        Printer {
            args,
            plan,
            hellos: BTreeMap::new(),
            header_done: false,
            pending: BTreeMap::new(),
            next_row: 0,
            busbw_sum: 0.0,
            busbw_n: 0,
            wrong_rows: 0,
            out,
            failed: None,
        }
    }

    fn layout(&self, bytes: u64) -> check::Layout {
        check::Layout::new(
            self.plan.collective,
            bytes,
            self.args.dtype.size(),
            self.args.ranks,
        )
    }

    pub(super) fn take(&mut self, rec: Record) {
        match rec {
            Record::Hello { rank, .. } => {
                self.hellos.insert(rank, rec);
            }
            Record::Row { index, .. } => self.pending.entry(index).or_default().push(rec),
        }
        if !self.header_done && self.hellos.len() == self.args.ranks {
            self.header_done = true;
            if !self.args.json {
                let h = header(&self.args, &self.plan, &self.hellos);
                self.write(&h);
            }
        }
        while self.header_done
            && self
                .pending
                .get(&self.next_row)
                .is_some_and(|v| v.len() == self.args.ranks)
        {
            let recs = self.pending.remove(&self.next_row).unwrap_or_default();
            let row = self.combine(self.next_row, &recs);
            self.emit(&row);
            self.next_row += 1;
        }
    }

    fn combine(&self, index: usize, recs: &[Record]) -> Row {
        let mut by_rank: Vec<_> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Row {
                    rank,
                    oop_us,
                    ip_us,
                    oop_wrong,
                    ip_wrong,
                    iters,
                    warmup,
                    ..
                } => Some((
                    *rank, *oop_us, *ip_us, *oop_wrong, *ip_wrong, *iters, *warmup,
                )),
                _ => None,
            })
            .collect();
        by_rank.sort_by_key(|r| r.0);
        let oop: Vec<f64> = by_rank.iter().map(|r| r.1).collect();
        let ip: Vec<f64> = by_rank.iter().map(|r| r.2).collect();
        let sum = |xs: Vec<Option<u64>>| xs.into_iter().sum::<Option<u64>>();
        let layout = self.layout(self.plan.sizes[index]);
        Row {
            bytes: layout.bytes(self.args.dtype.size()),
            count: layout.count,
            oop_us: self.args.average.combine(&oop),
            ip_us: self.args.average.combine(&ip),
            oop_wrong: sum(by_rank.iter().map(|r| r.3).collect()),
            ip_wrong: sum(by_rank.iter().map(|r| r.4).collect()),
            iters: by_rank.first().map(|r| r.5).unwrap_or(0),
            warmup: by_rank.first().map(|r| r.6).unwrap_or(0),
        }
    }

    fn emit(&mut self, row: &Row) {
        let c = &self.plan.collective;
        let n = self.args.ranks;
        let (oa, ob) = bandwidths(c, n, row.bytes, row.oop_us);
        let (ia, ib) = bandwidths(c, n, row.bytes, row.ip_us);
        self.busbw_sum += ob + ib;
        self.busbw_n += 2;
        self.wrong_rows += usize::from(row.oop_wrong.unwrap_or(0) > 0)
            + usize::from(row.ip_wrong.unwrap_or(0) > 0);
        let line = if self.args.json {
            let v = serde_json::json!({
                "collective": self.args.collective.name(),
                "ranks": n,
                "transport": self.args.transport_label(),
                "memory": self.args.memory.name(),
                "algorithm": self.args.algorithm.name(),
                "bytes": row.bytes,
                "count": row.count,
                "type": self.args.dtype.name(),
                "redop": redop_name(c, self.args.op),
                "root": root_value(c),
                "iters": row.iters,
                "warmup": row.warmup,
                "time_us": row.oop_us,
                "algbw_gbps": oa,
                "busbw_gbps": ob,
                "wrong": row.oop_wrong,
                "in_place_time_us": row.ip_us,
                "in_place_algbw_gbps": ia,
                "in_place_busbw_gbps": ib,
                "in_place_wrong": row.ip_wrong,
            });
            format!("{v}\n")
        } else {
            format_row(
                row,
                nccl_type_name(self.args.dtype),
                redop_name(c, self.args.op),
                root_value(c),
                (oa, ob),
                (ia, ib),
            )
        };
        self.write(&line);
    }

    fn write(&mut self, s: &str) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self
            .out
            .write_all(s.as_bytes())
            .and_then(|_| self.out.flush())
        {
            self.failed = Some(e.to_string());
        }
    }

    pub(super) fn footer(&mut self) {
        if self.args.json {
            return;
        }
        let avg = if self.busbw_n > 0 {
            self.busbw_sum / self.busbw_n as f64
        } else {
            0.0
        };
        let status = if self.wrong_rows > 0 { "FAILED" } else { "OK" };
        let s = format!(
            "# {:<20} : {} {}\n# {:<20} : {} \n#\n# Collective test concluded: gpucomm bench {}\n#\n",
            "Out of bounds values",
            self.wrong_rows,
            status,
            "Avg bus bandwidth",
            fmt_g(avg),
            self.args.collective.name()
        );
        self.write(&s);
    }
}

/// The `redop` column: the op for collectives that reduce (and sendrecv, as
/// nccl-tests prints it), `none` otherwise.
pub fn redop_name(c: &Collective, op: ReduceOp) -> &'static str {
    match c {
        Collective::AllReduce
        | Collective::ReduceScatter
        | Collective::Reduce { .. }
        | Collective::SendRecv { .. } => op.name(),
        _ => "none",
    }
}

/// The `root` column: the root of rooted collectives, -1 otherwise.
pub fn root_value(c: &Collective) -> i64 {
    c.root().map(|r| r as i64).unwrap_or(-1)
}

/// nccl-tests' `getFloatStr`: `%*.2f`, then fewer decimals, then `%e`, so
/// the value fits `width` characters.
pub fn float_str(v: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{v:>width$.prec$}");
        if s.len() <= width {
            return s;
        }
    }
    let s = c_exp(v, if width >= 7 { 1 } else { 0 });
    format!("{s:>width$}")
}

/// C's `%.{prec}e` (`1.5e+03`).
fn c_exp(v: f64, prec: usize) -> String {
    let s = format!("{v:.prec$e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let e: i32 = e.parse().unwrap_or(0);
            format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        }
        None => s,
    }
}

/// C's `%g` (6 significant digits, trailing zeros removed).
pub fn fmt_g(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let e = format!("{v:.5e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        format!(
            "{}e{}{:02}",
            strip(mant),
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    } else {
        let prec = (5 - exp) as usize;
        strip(&format!("{v:.prec$}"))
    }
}

/// One table row, in nccl-tests' format.
pub fn format_row(
    row: &Row,
    type_name: &str,
    redop: &str,
    root: i64,
    oop: (f64, f64),
    ip: (f64, f64),
) -> String {
    let mut s = format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        row.bytes, row.count, type_name, redop, root
    );
    for (us, (alg, bus), wrong) in [
        (row.oop_us, oop, row.oop_wrong),
        (row.ip_us, ip, row.ip_wrong),
    ] {
        s.push_str(&format!(
            "  {:>7}  {:>6}  {:>6}",
            float_str(us, 7),
            float_str(alg, 6),
            float_str(bus, 6)
        ));
        match wrong {
            Some(w) => s.push_str(&format!("  {:>6}", fmt_g(w as f64))),
            None => s.push_str("    N/A"),
        }
    }
    s.push('\n');
    s
}

/// The column headings, in nccl-tests' format.
pub fn column_header() -> String {
    let mut s = format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          \n",
        "", "", "", "", ""
    );
    s.push_str(&format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"
    ));
    s.push_str(&format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    ));
    s
}

fn header(args: &Args, plan: &Plan, hellos: &BTreeMap<usize, Record>) -> String {
    let iters = args
        .iters
        .map(|n| n.to_string())
        .unwrap_or_else(|| "auto".into());
    let warmup = args
        .warmup
        .map(|n| n.to_string())
        .unwrap_or_else(|| "auto".into());
    let mut s = format!(
        "# gpucomm bench {}: nranks {} ({}) transport {} memory {} algorithm {} minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {} time: {} over ranks\n#\n# Using ranks\n",
        args.collective.name(),
        args.ranks,
        if args.threads { "threads" } else { "processes" },
        args.transport_label(),
        args.memory.name(),
        args.algorithm.name(),
        args.min_bytes,
        args.max_bytes,
        args.step_factor,
        warmup,
        iters,
        u8::from(plan.check),
        args.average.name(),
    );
    for rec in hellos.values() {
        if let Record::Hello {
            rank,
            pid,
            host,
            transports,
            memory,
        } = rec
        {
            s.push_str(&format!(
                "#  Rank {rank:>2} Pid {pid:>6} on {host:>10} links {}{}\n",
                if transports.is_empty() {
                    "none".to_string()
                } else {
                    transports.join(",")
                },
                if memory.is_empty() {
                    String::new()
                } else {
                    format!(" memory {memory}")
                }
            ));
        }
    }
    if let Some(note) = sharing_note(args, mps_control_present()) {
        s.push_str(&note);
    }
    s.push_str("#\n");
    s.push_str(&column_header());
    s
}

/// Whether an MPS control daemon's pipe is there (`$CUDA_MPS_PIPE_DIRECTORY`,
/// by default `/tmp/nvidia-mps`): then the ranks' contexts share the GPU
/// through MPS.
fn mps_control_present() -> bool {
    let dir = std::env::var("CUDA_MPS_PIPE_DIRECTORY").unwrap_or_else(|_| "/tmp/nvidia-mps".into());
    std::path::Path::new(&dir).join("control").exists()
}

/// Every rank of `bench --memory device` uses the same GPU. Separate
/// processes have separate contexts, which the GPU time-slices without MPS:
/// on an H100 that put a floor of ~500 us under every 2-rank call (~33 us
/// under MPS; BENCHMARKS.md), so the header says so.
fn sharing_note(args: &Args, mps: bool) -> Option<String> {
    if args.memory != Memory::Device || args.threads || args.ranks < 2 || mps {
        return None;
    }
    Some(format!(
        "#  note: {} processes share GPU {} without MPS: the GPU time-slices between their contexts, hundreds of us per call; start MPS (nvidia-cuda-mps-control -d) or use --threads\n",
        args.ranks, args.device
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::parse_args as parse;
    use std::sync::{Arc, Mutex};

    #[test]
    fn processes_sharing_a_gpu_without_mps_get_a_note() {
        let a = parse(&["--memory", "device", "--ranks", "4", "--device", "1"]).unwrap();
        let note = sharing_note(&a, false).unwrap();
        assert!(
            note.contains("4 processes share GPU 1 without MPS"),
            "{note}"
        );
        assert!(note.starts_with('#') && note.ends_with('\n'));
        assert_eq!(sharing_note(&a, true), None);
        assert_eq!(
            sharing_note(&parse(&["--memory", "device", "--threads"]).unwrap(), false),
            None
        );
        assert_eq!(
            sharing_note(
                &parse(&["--memory", "device", "--ranks", "1"]).unwrap(),
                false
            ),
            None
        );
        assert_eq!(
            sharing_note(&parse(&["--memory", "pinned"]).unwrap(), false),
            None
        );
    }

    #[test]
    fn c_style_numbers() {
        assert_eq!(float_str(12.345, 7), "  12.35");
        assert_eq!(float_str(1234.5678, 7), "1234.57");
        assert_eq!(float_str(12345.678, 7), "12345.7");
        assert_eq!(float_str(1234567.8, 7), "1234568");
        assert_eq!(float_str(12345678.9, 7), "1.2e+07");
        assert_eq!(float_str(0.0, 6), "  0.00");
        assert_eq!(float_str(123456.0, 6), "123456");
        assert_eq!(float_str(1234567.0, 6), " 1e+06");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(3.0), "3");
        assert_eq!(fmt_g(1.234567), "1.23457");
        assert_eq!(fmt_g(0.5), "0.5");
        assert_eq!(fmt_g(123456.0), "123456");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(0.0001), "0.0001");
        assert_eq!(fmt_g(0.00001234), "1.234e-05");
    }

    #[test]
    fn rows_in_nccl_tests_format() {
        // Widths from nccl-tests' printf formats.
        let row = Row {
            bytes: 1048576,
            count: 262144,
            oop_us: 334.21,
            ip_us: 330.0,
            oop_wrong: Some(0),
            ip_wrong: Some(0),
            iters: 20,
            warmup: 5,
        };
        let c = Collective::AllReduce;
        let (oa, ob) = bandwidths(&c, 2, row.bytes, row.oop_us);
        let (ia, ib) = bandwidths(&c, 2, row.bytes, row.ip_us);
        let s = format_row(&row, "float", "sum", -1, (oa, ob), (ia, ib));
        assert_eq!(
            s,
            "     1048576        262144     float     sum      -1   334.21    3.14    3.14       0   330.00    3.18    3.18       0\n"
        );
        let first = s.clone();
        let s = format_row(
            &Row {
                oop_wrong: None,
                ip_wrong: Some(12),
                ..row.clone()
            },
            "float",
            "sum",
            -1,
            (oa, ob),
            (ia, ib),
        );
        assert!(s.contains("    3.14    N/A   330.00"), "{s}");
        assert!(s.ends_with("      12\n"), "{s}");
        let h = column_header();
        let lines: Vec<_> = h.lines().collect();
        assert_eq!(
            lines[1],
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong "
        );
        assert_eq!(
            lines[2],
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "
        );
        // Column edges line up with the rows.
        assert_eq!(lines[1].len(), first.len());
    }

    #[test]
    fn bus_bandwidth_factors() {
        let (a, b) = bandwidths(&Collective::AllReduce, 4, 1_000_000, 1000.0);
        assert!((a - 1.0).abs() < 1e-12 && (b - 1.5).abs() < 1e-12);
        let (_, b) = bandwidths(&Collective::AllGather, 4, 1_000_000, 1000.0);
        assert!((b - 0.75).abs() < 1e-12);
        let (_, b) = bandwidths(&Collective::Broadcast { root: 0 }, 4, 1_000_000, 1000.0);
        assert!((b - 1.0).abs() < 1e-12);
        assert_eq!(bandwidths(&Collective::Barrier, 2, 0, 0.0), (0.0, 0.0));
    }

    fn row_rec(rank: usize, index: usize, us: f64, wrong: u64) -> Record {
        Record::Row {
            rank,
            index,
            iters: 10,
            warmup: 2,
            oop_us: us,
            ip_us: us * 2.0,
            oop_wrong: Some(wrong),
            ip_wrong: Some(0),
        }
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn printer(argv: &[&str]) -> (Printer, Shared) {
        let args = parse(argv).unwrap();
        let plan = args.plan().unwrap();
        let out = Shared::default();
        let p = Printer {
            args,
            plan,
            hellos: BTreeMap::new(),
            header_done: false,
            pending: BTreeMap::new(),
            next_row: 0,
            busbw_sum: 0.0,
            busbw_n: 0,
            wrong_rows: 0,
            out: Box::new(out.clone()),
            failed: None,
        };
        (p, out)
    }

    fn hello(rank: usize) -> Record {
        Record::Hello {
            rank,
            pid: 100 + rank as u32,
            host: "h".into(),
            transports: vec!["shm".into()],
            memory: String::new(),
        }
    }

    #[test]
    fn records_combine_into_rows_in_order() {
        let (mut p, out) = printer(&["-b", "8", "-e", "16", "--ranks", "3"]);
        // Rows arrive out of order and before the hellos; nothing prints early.
        p.take(row_rec(1, 1, 5.0, 0));
        p.take(row_rec(0, 0, 1.0, 0));
        p.take(hello(0));
        p.take(hello(2));
        p.take(row_rec(1, 0, 3.0, 1));
        assert!(out.0.lock().unwrap().is_empty());
        p.take(hello(1));
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("#  Rank  2 Pid    102 on          h links shm"),
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 0);
        p.take(row_rec(2, 0, 2.0, 2));
        p.take(row_rec(0, 1, 4.0, 0));
        p.take(row_rec(2, 1, 6.0, 0));
        p.footer();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let rows: Vec<_> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 2, "{text}");
        // Max over ranks; wrong summed.
        assert!(
            rows[0].starts_with("           8             2     float     sum      -1     3.00"),
            "{}",
            rows[0]
        );
        assert!(rows[0].contains("       3     6.00"), "{}", rows[0]);
        assert!(
            rows[1].starts_with("          16             4     float     sum      -1     6.00"),
            "{}",
            rows[1]
        );
        assert!(text.contains("# Out of bounds values : 1 FAILED"), "{text}");
        assert!(text.contains("# Avg bus bandwidth    : "), "{text}");
    }

    #[test]
    fn json_rows() {
        let (mut p, out) = printer(&[
            "reduce_scatter",
            "-b",
            "1K",
            "-e",
            "1K",
            "--json",
            "--no-check",
        ]);
        p.take(hello(0));
        p.take(hello(1));
        p.take(Record::Row {
            rank: 0,
            index: 0,
            iters: 10,
            warmup: 2,
            oop_us: 2.0,
            ip_us: 4.0,
            oop_wrong: None,
            ip_wrong: None,
        });
        p.take(Record::Row {
            rank: 1,
            index: 0,
            iters: 10,
            warmup: 2,
            oop_us: 1.0,
            ip_us: 4.0,
            oop_wrong: None,
            ip_wrong: None,
        });
        p.footer();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["bytes"], 1024);
        assert_eq!(v["count"], 128);
        assert_eq!(v["time_us"], 2.0);
        assert_eq!(v["algbw_gbps"], 1024.0 / 1e3 / 2.0);
        assert_eq!(v["busbw_gbps"], 1024.0 / 1e3 / 2.0 * 0.5);
        assert!(v["wrong"].is_null());
        assert_eq!(v["in_place_time_us"], 4.0);
        assert_eq!(v["redop"], "sum");
        assert_eq!(v["type"], "f32");
    }

    #[test]
    fn records_round_trip() {
        let r = row_rec(1, 2, 3.5, 0);
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&s).unwrap(), r);
        let h = hello(0);
        assert_eq!(
            serde_json::from_str::<Record>(&serde_json::to_string(&h).unwrap()).unwrap(),
            h
        );
    }

    #[test]
    fn names_like_nccl_tests() {
        assert_eq!(nccl_type_name(gpucomm::DataType::F32), "float");
        assert_eq!(nccl_type_name(gpucomm::DataType::Bf16), "bfloat16");
        assert_eq!(redop_name(&Collective::AllGather, ReduceOp::Sum), "none");
        assert_eq!(
            redop_name(&Collective::Reduce { root: 0 }, ReduceOp::Max),
            "max"
        );
        assert_eq!(root_value(&Collective::Broadcast { root: 1 }), 1);
        assert_eq!(root_value(&Collective::AllToAll), -1);
    }
}
