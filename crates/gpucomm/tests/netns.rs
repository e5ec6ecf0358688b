//! Multi-host jobs on one machine: every "host" is a Linux network namespace
//! created by the test, joined to a "switch" namespace (a Linux bridge) by a
//! veth pair, so rank-to-rank traffic really crosses a network stack, a link
//! and a bridge, as between hosts. The test binary re-executes itself under
//! `ip netns exec HOST` as the rank processes (like `multiproc.rs`) and builds
//! each rank's `BootstrapConfig` directly, with `TransportChoice::Auto`: the
//! runtime must find on its own that ranks in other namespaces are other
//! hosts (TCP) and ranks in the same namespace share memory (shm).
//!
//! Addresses are `10.213.0.<host + 1>/24`, assigned only inside the
//! namespaces the test creates; nothing is routed anywhere else. Namespaces
//! are named `gcnt<pid>x<seq>...` and deleted by a drop guard (a test that
//! fails still cleans up; leftovers of a killed run are removed by the next
//! run once their pid is gone).
//!
//! Needs root and iproute2 (`ip`, `tc`). Without them the tests print why and
//! pass as skipped, except under CI (env `CI` set), where they fail.

mod common;

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpucomm::{BootstrapConfig, Communicator, Failure, ReduceOp, TransportChoice, TransportKind};

const ROLE: &str = "GPUCOMM_NETNS_ROLE";
/// The /24 every test network uses (each test has its own namespaces, so
/// equal addresses in two tests never meet).
const SUBNET: &str = "10.213.0";
/// Rank 0's store port: free, since rank 0's namespace is new.
const STORE_PORT: u16 = 29500;
/// The shaper of the rate-limited test.
const TBF: [&str; 8] = [
    "root", "tbf", "rate", "200mbit", "burst", "32kbit", "latency", "50ms",
];
/// Verified all-reduces a rank runs before it reports ready (failure cases).
const READY_AFTER: u64 = 20;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Runs a command to completion, bounded by 10 s; its stdout, or why not.
fn cmd(args: &[&str]) -> Result<String, String> {
    let shown = args.join(" ");
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{shown}`: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let out = child.wait_with_output().map_err(|e| e.to_string())?;
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                return if st.success() {
                    Ok(stdout)
                } else {
                    Err(format!(
                        "`{shown}` failed ({st}): {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ))
                };
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`{shown}` did not finish within 10 s"));
            }
            Err(e) => return Err(format!("`{shown}`: {e}")),
        }
    }
}

/// Whether the tests can run here; `false` (with the reason printed) means
/// skip. Under CI a missing prerequisite is a failure.
fn usable() -> bool {
    let why = if !rustix::process::geteuid().is_root() {
        Some("not running as root".to_string())
    } else if let Err(e) = cmd(&["ip", "-V"]) {
        Some(format!("iproute2 `ip` is not usable: {e}"))
    } else if let Err(e) = cmd(&["tc", "-V"]) {
        Some(format!("iproute2 `tc` is not usable: {e}"))
    } else {
        None
    };
    match why {
        None => true,
        Some(w) if std::env::var_os("CI").is_some() => {
            panic!("network namespace tests must run in CI (root, iproute2 from .ci/run): {w}")
        }
        Some(w) => {
            eprintln!("SKIPPED: network namespace test: {w}");
            false
        }
    }
}

/// Deletes namespaces left by a test process that no longer exists (one
/// killed before its guards ran).
fn sweep_stale() {
    let Ok(list) = cmd(&["ip", "netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix("gcnt")
            .and_then(|s| s.split('x').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = cmd(&["ip", "netns", "del", name]);
        }
    }
}

/// A star network: `hosts` namespaces, each with `eth0` (address
/// `10.213.0.<h + 1>`) cabled to port `p<h>` of bridge `br0` in a switch
/// namespace. Dropping it deletes every namespace (and so every link) it
/// made, and its scratch directory.
struct Net {
    prefix: String,
    hosts: usize,
    made: Vec<String>,
    /// Rank logs and ready markers.
    dir: PathBuf,
    /// The host name ranks use for the store, when not rank 0's address
    /// (`name_store`).
    store_name: Option<String>,
}

impl Net {
    fn build(hosts: usize) -> Net {
        sweep_stale();
        let prefix = format!(
            "gcnt{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let mut net = Net {
            prefix,
            hosts,
            made: Vec::new(),
            dir,
            store_name: None,
        };
        // From here on a failure still deletes whatever was made (drop).
        if let Err(e) = net.wire() {
            panic!("building the test network: {e}");
        }
        net
    }

    fn wire(&mut self) -> Result<(), String> {
        let sw = self.switch();
        cmd(&["ip", "netns", "add", &sw])?;
        self.made.push(sw.clone());
        cmd(&["ip", "-n", &sw, "link", "set", "lo", "up"])?;
        cmd(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        cmd(&["ip", "-n", &sw, "link", "set", "br0", "up"])?;
        for h in 0..self.hosts {
            let ns = self.host(h);
            let port = format!("p{h}");
            cmd(&["ip", "netns", "add", &ns])?;
            self.made.push(ns.clone());
            // Both ends are created directly inside their namespaces.
            cmd(&[
                "ip", "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ])?;
            cmd(&["ip", "-n", &sw, "link", "set", &port, "master", "br0"])?;
            cmd(&["ip", "-n", &sw, "link", "set", &port, "up"])?;
            let addr = format!("{}/24", self.addr(h));
            cmd(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            cmd(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            cmd(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    fn switch(&self) -> String {
        format!("{}s", self.prefix)
    }

    fn host(&self, h: usize) -> String {
        format!("{}h{h}", self.prefix)
    }

    fn addr(&self, h: usize) -> String {
        format!("{SUBNET}.{}", h + 1)
    }

    /// Bytes that crossed host `h`'s cable (both directions), read from the
    /// switch's port counters.
    fn port_bytes(&self, h: usize) -> u64 {
        ["rx_bytes", "tx_bytes"]
            .iter()
            .map(|c| {
                let path = format!("/sys/class/net/p{h}/statistics/{c}");
                cmd(&["ip", "netns", "exec", &self.switch(), "cat", &path])
                    .unwrap_or_else(|e| panic!("{e}"))
                    .trim()
                    .parse::<u64>()
                    .expect("a byte counter")
            })
            .sum()
    }

    /// Rate-limits host `h`'s cable in both directions (`tc ... tbf`).
    fn shape(&self, h: usize) {
        let (ns, sw, port) = (self.host(h), self.switch(), format!("p{h}"));
        for (ns, dev) in [(ns.as_str(), "eth0"), (sw.as_str(), port.as_str())] {
            let mut a = vec!["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev];
            a.extend(TBF);
            cmd(&a).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// `tc -s` statistics of the shaper on host `h`'s side: (sent bytes,
    /// overlimits), and the line they come from.
    fn shaper_stats(&self, h: usize) -> (u64, u64, String) {
        let out = cmd(&[
            "ip",
            "netns",
            "exec",
            &self.host(h),
            "tc",
            "-s",
            "qdisc",
            "show",
            "dev",
            "eth0",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("tbf"), "no tbf qdisc on eth0: {out}");
        let num_after = |key: &str| -> u64 {
            out.split(key)
                .nth(1)
                .and_then(|s| {
                    s.trim_start()
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .and_then(|d| d.parse().ok())
                })
                .unwrap_or_else(|| panic!("no `{key}` in: {out}"))
        };
        (
            num_after("Sent"),
            num_after("overlimits"),
            out.replace('\n', " "),
        )
    }

    /// Names host `h0` for the store: on `h0` itself the name maps to
    /// 127.0.1.1 (as Debian and Ubuntu map a machine's own hostname), on
    /// every other host to `h0`'s address. `ip netns exec` mounts
    /// `/etc/netns/<namespace>/hosts` over `/etc/hosts`.
    fn name_store(&mut self, h0: usize) {
        let name = format!("{}-store", self.prefix);
        for h in 0..self.hosts {
            let ip = if h == h0 {
                "127.0.1.1".to_string()
            } else {
                self.addr(h0)
            };
            let dir = PathBuf::from("/etc/netns").join(self.host(h));
            std::fs::create_dir_all(&dir).expect("/etc/netns/<namespace>");
            std::fs::write(
                dir.join("hosts"),
                format!("127.0.0.1 localhost\n{ip} {name}\n"),
            )
            .expect("/etc/netns/<namespace>/hosts");
        }
        self.store_name = Some(name);
    }

    /// Brings host `h`'s cable down at the switch (a pulled cable).
    fn cut(&self, h: usize) {
        cmd(&[
            "ip",
            "-n",
            &self.switch(),
            "link",
            "set",
            &format!("p{h}"),
            "down",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.made.iter().rev() {
            if let Err(e) = cmd(&["ip", "netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.store_name.is_some() {
            for h in 0..self.hosts {
                let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(self.host(h)));
            }
        }
    }
}

/// The network for a test, or `None` when the test is skipped.
fn setup(hosts: usize) -> Option<Net> {
    usable().then(|| Net::build(hosts))
}

/// How one rank process ended.
#[derive(Debug)]
struct Outcome {
    /// Exit code; -1 killed by a signal, -2 hung (killed by the test).
    code: i32,
    output: String,
    /// When the test saw it exit.
    at: Option<Instant>,
}

/// Rank processes, each in its host's namespace; killed on drop.
struct Job {
    children: Vec<Child>,
    logs: Vec<PathBuf>,
}

impl Job {
    /// Starts `placement.len()` ranks, rank `r` in host `placement[r]`; the
    /// store is on rank 0's host address. Bootstrap waits are bounded by
    /// 20 s, every later wait by `op_timeout`.
    fn spawn(
        net: &Net,
        scenario: &str,
        placement: &[usize],
        ranks_per_node: usize,
        op_timeout: Duration,
    ) -> Job {
        let n = placement.len();
        let exe = std::env::current_exe().unwrap();
        let host = (net.store_name.clone()).unwrap_or_else(|| net.addr(placement[0]));
        let store = format!("{host}:{STORE_PORT}");
        let token = format!("tok-{}", net.prefix);
        let place: Vec<String> = placement.iter().map(|h| h.to_string()).collect();
        let place = place.join(".");
        let mut job = Job {
            children: Vec::new(),
            logs: Vec::new(),
        };
        for (r, &h) in placement.iter().enumerate() {
            let log = net.dir.join(format!("rank{r}.log"));
            let f = File::create(&log).unwrap();
            let spec = format!(
                "{scenario},{r},{n},{store},{token},20000,{},{place},{ranks_per_node},{}",
                op_timeout.as_millis(),
                net.dir.display()
            );
            // `ip netns exec` enters the namespace and execs the binary: the
            // child is the rank process itself.
            let child = Command::new("ip")
                .args(["netns", "exec", &net.host(h)])
                .arg(&exe)
                .args([
                    "--exact",
                    "worker",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, spec)
                .stdin(Stdio::null())
                .stdout(Stdio::from(f.try_clone().unwrap()))
                .stderr(Stdio::from(f))
                .spawn()
                .unwrap();
            job.children.push(child);
            job.logs.push(log);
        }
        job
    }

    /// Whether some rank has already exited.
    fn any_exited(&mut self) -> bool {
        self.children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    fn kill(&mut self, r: usize) {
        let _ = self.children[r].kill();
    }

    /// Waits for every rank, at most `limit`; a rank still running then is
    /// killed and reported hung.
    fn wait(&mut self, limit: Duration) -> Vec<Outcome> {
        let deadline = Instant::now() + limit;
        let n = self.children.len();
        let mut done: Vec<Option<(i32, Option<Instant>)>> = vec![None; n];
        while done.iter().any(Option::is_none) {
            let now = Instant::now();
            for (c, d) in self.children.iter_mut().zip(done.iter_mut()) {
                if d.is_some() {
                    continue;
                }
                if let Ok(Some(st)) = c.try_wait() {
                    *d = Some((st.code().unwrap_or(-1), Some(now)));
                } else if now > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    *d = Some((-2, None));
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        done.into_iter()
            .zip(&self.logs)
            .map(|(d, log)| {
                let (code, at) = d.expect("all done");
                let mut output = std::fs::read_to_string(log).unwrap_or_default();
                if code == -2 {
                    output.push_str("\nHUNG: killed by the test");
                }
                Outcome { code, output, at }
            })
            .collect()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn assert_ok(r: usize, o: &Outcome) {
    assert_eq!(o.code, 0, "rank {r} failed:\n{}", o.output);
    assert!(
        o.output.contains("WORKER-OK"),
        "rank {r} did not finish:\n{}",
        o.output
    );
}

/// Whether a forced algorithm has a schedule for the case on this job's
/// shape (`ranks_per_node` as the runtime derives it from the placement).
fn supported(case: &common::Case, n: usize, ranks_per_node: usize) -> bool {
    let (Some(a), Some(coll)) = (case.algorithm, case.call.collective()) else {
        return true;
    };
    let p = gpucomm_algo::Problem::new(coll, case.count, n, ranks_per_node)
        .with_elem_size(case.dtype.size());
    gpucomm_algo::Schedule::new(p, a).is_ok()
}

/// Sum of `f32` all-reduce inputs at element `i`, iteration `it`.
fn loop_value(rank: usize, i: usize, it: u64) -> f32 {
    ((rank as u64 + i as u64 + it) % 7) as f32
}

/// The worker role: never runs unless re-executed by a test.
#[test]
#[ignore]
fn worker() {
    let Ok(spec) = std::env::var(ROLE) else {
        return;
    };
    let f: Vec<&str> = spec.splitn(10, ',').collect();
    let scenario = f[0];
    let rank: usize = f[1].parse().unwrap();
    let n: usize = f[2].parse().unwrap();
    let boot_timeout = Duration::from_millis(f[5].parse().unwrap());
    let op_timeout = Duration::from_millis(f[6].parse().unwrap());
    let place: Vec<usize> = f[7].split('.').map(|h| h.parse().unwrap()).collect();
    let ranks_per_node: usize = f[8].parse().unwrap();
    let dir = PathBuf::from(f[9]);
    let local: Vec<usize> = (0..n).filter(|&p| place[p] == place[rank]).collect();
    let cfg = BootstrapConfig {
        rank,
        world_size: n,
        local_rank: local.iter().position(|&p| p == rank),
        local_world_size: Some(local.len()),
        store_addr: f[3].to_string(),
        token: f[4].to_string(),
        transport: if scenario == "forceshm" {
            TransportChoice::Shm
        } else {
            TransportChoice::Auto
        },
        algorithm: None,
        timeout: boot_timeout,
        socket_ifname: None,
    };
    if scenario == "forceshm" {
        // Shared memory forced across hosts: a clear error, on every rank.
        let t = Instant::now();
        let e = Communicator::new(&cfg).expect_err("shm across namespaces must be refused");
        println!("rank {rank}: {e} after {:?}", t.elapsed());
        assert!(
            matches!(e, gpucomm::Error::Bootstrap { .. }) && e.to_string().contains("another host"),
            "{e}"
        );
        println!("WORKER-OK");
        return;
    }
    let c = Communicator::new(&cfg).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    c.set_timeout(op_timeout);
    // Auto: shared memory inside a namespace, TCP between namespaces.
    let kinds: Vec<Option<TransportKind>> = (0..n).map(|p| c.transport_to(p)).collect();
    println!("rank {rank} on host {}: transports {kinds:?}", place[rank]);
    for p in (0..n).filter(|&p| p != rank) {
        let want = if place[p] == place[rank] {
            TransportKind::Shm
        } else {
            TransportKind::Tcp
        };
        assert_eq!(kinds[p], Some(want), "rank {rank} to rank {p}");
    }
    match scenario {
        "collectives" => {
            let cases: Vec<_> = common::cases(n, true)
                .into_iter()
                .filter(|k| supported(k, n, ranks_per_node))
                .collect();
            let mut checked = 0;
            for case in &cases {
                checked += common::run_dyn(&c, case).unwrap_or_else(|e| panic!("{e}"));
            }
            // Every pair once more, with a payload only that pair knows.
            for p in (0..n).filter(|&p| p != rank) {
                let mine: Vec<u32> = (0..50_000).map(|i| (rank * 100 + p) as u32 ^ i).collect();
                let mut got = vec![0u32; 50_000];
                if rank < p {
                    c.send(&mine, p).unwrap();
                    c.recv(&mut got, p).unwrap();
                } else {
                    c.recv(&mut got, p).unwrap();
                    c.send(&mine, p).unwrap();
                }
                for (i, &x) in got.iter().enumerate() {
                    assert_eq!(
                        x,
                        (p * 100 + rank) as u32 ^ i as u32,
                        "from rank {p} at {i}"
                    );
                }
                checked += got.len();
            }
            c.barrier().unwrap();
            println!(
                "rank {rank}: {} cases and {} pairs, {checked} elements checked",
                cases.len(),
                n - 1
            );
        }
        "split" => {
            // Groups across hosts: each peer on its parent's transport
            // (checked by split_checks), shared memory inside a namespace.
            common::split_checks(&c).unwrap_or_else(|e| panic!("{e}"));
            println!("rank {rank}: split checked");
        }
        "linkdown" | "killed" => {
            // All-reduces checked element by element until the test breaks
            // the network or kills a rank; the error must name the peer
            // and the transport.
            let len = 1 << 16;
            let started = Instant::now();
            let mut it = 0u64;
            let err = loop {
                let send: Vec<f32> = (0..len).map(|i| loop_value(rank, i, it)).collect();
                let mut recv = vec![0f32; len];
                if let Err(e) = c.all_reduce(&send, &mut recv, ReduceOp::Sum) {
                    break e;
                }
                for (i, &x) in recv.iter().enumerate() {
                    let want: f32 = (0..n).map(|r| loop_value(r, i, it)).sum();
                    assert_eq!(x, want, "iteration {it}, element {i}");
                }
                it += 1;
                if it == READY_AFTER {
                    File::create(dir.join(format!("ready{rank}"))).unwrap();
                }
                assert!(
                    started.elapsed() < Duration::from_secs(40),
                    "rank {rank}: still no error after {it} iterations"
                );
            };
            println!("rank {rank}: after {it} iterations: {err}");
            assert!(it >= READY_AFTER, "failed before the test broke anything");
            let ctx = err.context().expect("an operation error");
            assert_eq!(ctx.op, "all_reduce", "{err}");
            let peer = ctx.peer.expect("the error names a peer");
            assert!(peer != rank && peer < n, "{err}");
            assert_eq!(ctx.transport, Some(TransportKind::Tcp), "{err}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("peer {peer}")) && msg.contains("over tcp"),
                "{msg}"
            );
            match (scenario, err.failure()) {
                ("linkdown", Some(Failure::Timeout(_)))
                | (_, Some(Failure::PeerGone(_)))
                | (_, Some(Failure::Aborted(_))) => {}
                _ => panic!("unexpected failure for {scenario}: {err}"),
            }
        }
        other => panic!("unknown scenario {other}"),
    }
    println!("WORKER-OK");
}

/// Runs the case list on `placement` (host per rank) and checks that every
/// rank's data crossed its host's cable when it has peers on other hosts.
fn collectives(net: &Net, placement: &[usize], ranks_per_node: usize) {
    let hosts: Vec<usize> = (0..net.hosts).collect();
    let before: Vec<u64> = hosts.iter().map(|&h| net.port_bytes(h)).collect();
    let t = Instant::now();
    let mut job = Job::spawn(
        net,
        "collectives",
        placement,
        ranks_per_node,
        Duration::from_secs(30),
    );
    let res = job.wait(Duration::from_secs(90));
    for (r, o) in res.iter().enumerate() {
        assert_ok(r, o);
        eprintln!(
            "{}",
            o.output
                .lines()
                .filter(|l| l.contains("rank "))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    for &h in &hosts {
        let crossed = net.port_bytes(h) - before[h];
        eprintln!("host {h}: {crossed} bytes through its cable");
        let remote = placement.contains(&h) && placement.iter().any(|&x| x != h);
        if remote {
            assert!(
                crossed > 1 << 20,
                "host {h} has remote peers but only {crossed} bytes crossed its cable"
            );
        }
    }
    eprintln!("{placement:?}: {:?}", t.elapsed());
}

#[test]
fn two_hosts_use_tcp() {
    let Some(net) = setup(2) else { return };
    collectives(&net, &[0, 1], 1);
}

/// The store named by a host name that rank 0's host maps to a loopback
/// address and the others to its real one: the store must listen beyond
/// loopback, and ranks on rank 0's host (which reach the store over
/// loopback) must give their peers a routable data address.
#[test]
fn store_named_by_a_host_name_that_is_loopback_at_home() {
    let Some(mut net) = setup(2) else { return };
    net.name_store(0);
    collectives(&net, &[0, 0, 1], 1);
}

#[test]
fn four_hosts_use_tcp() {
    let Some(net) = setup(4) else { return };
    collectives(&net, &[0, 1, 2, 3], 1);
}

/// Two ranks per host: shared memory inside a host, TCP across, and
/// hierarchical schedules (2 ranks per node) available to the tuner.
#[test]
fn mixed_two_ranks_per_host() {
    let Some(net) = setup(2) else { return };
    collectives(&net, &[0, 0, 1, 1], 2);
}

/// Uneven, non-contiguous placement: ranks 0 and 2 share a host.
#[test]
fn mixed_uneven_placement() {
    let Some(net) = setup(2) else { return };
    collectives(&net, &[0, 1, 0], 1);
}

/// `Communicator::split` across hosts: groups of ranks on one host and on
/// several, each peer on the transport the job picked for it.
#[test]
fn split_across_hosts() {
    let Some(net) = setup(2) else { return };
    let mut job = Job::spawn(&net, "split", &[0, 0, 1, 1, 0], 1, Duration::from_secs(30));
    let res = job.wait(Duration::from_secs(90));
    for (r, o) in res.iter().enumerate() {
        assert_ok(r, o);
    }
}

/// `TransportChoice::Shm` forced for ranks on different hosts: every rank
/// gets a bootstrap error saying so (none waits for the 20 s timeout).
#[test]
fn forced_shm_across_hosts_is_refused() {
    let Some(net) = setup(2) else { return };
    let t = Instant::now();
    let mut job = Job::spawn(&net, "forceshm", &[0, 1], 1, Duration::from_secs(5));
    let res = job.wait(Duration::from_secs(30));
    for (r, o) in res.iter().enumerate() {
        assert_ok(r, o);
        let line = o.output.lines().find(|l| l.contains("forced"));
        eprintln!("{}", line.unwrap_or(""));
    }
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}

/// Host 1's cable limited to 200 Mbit/s both ways (token bucket, 4 KB burst,
/// drops past 50 ms of queue): results must still be exact. No timing is
/// asserted; the shaper's counters show that it was in the path and held
/// packets back.
#[test]
fn rate_limited_link() {
    let Some(net) = setup(3) else { return };
    net.shape(1);
    collectives(&net, &[0, 1, 2], 1);
    let (sent, overlimits, line) = net.shaper_stats(1);
    eprintln!("host 1 shaper: {line}");
    assert!(sent > 1 << 20, "only {sent} bytes went through the shaper");
    assert!(
        overlimits > 0,
        "the shaper never held a packet back: {line}"
    );
}

/// Breaks the job mid-run (`how`: "linkdown" pulls host 2's cable at the
/// switch, "killed" SIGKILLs rank 2) and checks that every surviving rank ends
/// with an error naming a peer and TCP, within `limit` of the break.
fn break_mid_run(how: &str, op_timeout: Duration, limit: Duration) {
    let Some(net) = setup(3) else { return };
    let mut job = Job::spawn(&net, how, &[0, 1, 2], 1, op_timeout);
    let ready = Instant::now() + Duration::from_secs(40);
    while !(0..3).all(|r| net.dir.join(format!("ready{r}")).exists()) {
        if Instant::now() > ready || job.any_exited() {
            let res = job.wait(Duration::from_millis(100));
            panic!("ranks did not all start looping: {res:#?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    let survivors: &[usize] = if how == "linkdown" {
        net.cut(2);
        &[0, 1, 2]
    } else {
        job.kill(2);
        &[0, 1]
    };
    let res = job.wait(limit + Duration::from_secs(5));
    for &r in survivors {
        let o = &res[r];
        assert_ne!(o.code, -2, "rank {r} hung:\n{}", o.output);
        assert_ok(r, o);
        let took = o.at.expect("exited") - t0;
        eprintln!(
            "{how}: rank {r} ended {took:?} after the break: {}",
            o.output
                .lines()
                .find(|l| l.contains("iterations"))
                .unwrap_or("")
        );
        assert!(
            took < limit,
            "rank {r} took {took:?} to fail:\n{}",
            o.output
        );
    }
}

/// A pulled cable: nothing is closed, nothing arrives; the isolated rank and
/// the ranks waiting on it must each end with an error by the timeout (the
/// first ones to see it abort, which ends the others' waits too).
#[test]
fn link_down_mid_run_ends_in_errors() {
    let timeout = Duration::from_secs(3);
    break_mid_run("linkdown", timeout, timeout + Duration::from_secs(4));
}

/// A rank killed on another host: its kernel closes the connections, the
/// survivors see it through the network well before their 15 s timeout.
#[test]
fn killed_rank_on_another_host() {
    break_mid_run("killed", Duration::from_secs(15), Duration::from_secs(8));
}
