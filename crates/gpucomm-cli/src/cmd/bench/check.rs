//! What the bench puts in the buffers and what it expects back.
//!
//! Every rank fills its input from a pattern of small integers that depends on
//! the rank, the element index and a per-check seed (so a result left over
//! from an earlier run is not mistaken for a right one). The values are chosen
//! per element type and number of ranks so that every reduction is exact in
//! that type: sums stay below the largest integer the type holds exactly (256
//! for bf16, 2048 for f16, 127 for i8, ...), products are powers of two, min
//! and max pick one of the inputs. So results are compared for equality,
//! except `avg` of floating-point types (each input is divided by the number
//! of ranks before the sum, as NCCL's PreMulSum: compared within n + 2 units
//! in the last place). Integer sums and products wrap, as in the
//! runtime; integer `avg` is the sum divided by the number of ranks,
//! truncated.

use gpucomm_algo::{Collective, ReduceOp};

/// An element type the bench can fill and check.
pub trait Elem: Copy + PartialEq + Default + Send + Sync + std::fmt::Debug + 'static {
    /// True for floating-point types.
    const FLOAT: bool;
    /// True for types with negative values.
    const SIGNED: bool;
    /// Relative rounding unit (floats; 0 for integers).
    const EPS: f64;
    /// Largest magnitude every integer up to which the type holds exactly.
    const EXACT: i64;
    /// The integer `v` in this type (wrapping for integers).
    fn from_i128(v: i128) -> Self;
    /// The nearest value to `v` in this type (saturating for integers).
    #[cfg_attr(not(test), allow(dead_code))] // the tests' reference uses it
    fn from_f64(v: f64) -> Self;
    /// The value as f64 (for comparisons within a tolerance).
    fn to_f64(self) -> f64;
}

macro_rules! int_elem {
    ($($t:ty, $signed:expr);*) => {$(
        impl Elem for $t {
            const FLOAT: bool = false;
            const SIGNED: bool = $signed;
            const EPS: f64 = 0.0;
            const EXACT: i64 = if (<$t>::MAX as u64) > (i64::MAX as u64) { i64::MAX } else { <$t>::MAX as i64 };
            fn from_i128(v: i128) -> Self { v as $t }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
int_elem!(i8, true; u8, false; i32, true; u32, false; i64, true; u64, false);

impl Elem for f32 {
    const FLOAT: bool = true;
    const SIGNED: bool = true;
    const EPS: f64 = f32::EPSILON as f64;
    const EXACT: i64 = 1 << 24;
    fn from_i128(v: i128) -> Self {
        v as f32
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Elem for f64 {
    const FLOAT: bool = true;
    const SIGNED: bool = true;
    const EPS: f64 = f64::EPSILON;
    const EXACT: i64 = 1 << 53;
    fn from_i128(v: i128) -> Self {
        v as f64
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl Elem for gpucomm::f16 {
    const FLOAT: bool = true;
    const SIGNED: bool = true;
    const EPS: f64 = 0.000_976_562_5; // 2^-10
    const EXACT: i64 = 2048;
    fn from_i128(v: i128) -> Self {
        gpucomm::f16::from_f64(v as f64)
    }
    fn from_f64(v: f64) -> Self {
        gpucomm::f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        gpucomm::f16::to_f64(self)
    }
}

impl Elem for gpucomm::bf16 {
    const FLOAT: bool = true;
    const SIGNED: bool = true;
    const EPS: f64 = 0.007_812_5; // 2^-7
    const EXACT: i64 = 256;
    fn from_i128(v: i128) -> Self {
        gpucomm::bf16::from_f64(v as f64)
    }
    fn from_f64(v: f64) -> Self {
        gpucomm::bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        gpucomm::bf16::to_f64(self)
    }
}

/// The values of one check: `value(rank, index)`.
#[derive(Clone, Copy, Debug)]
pub struct Pattern {
    /// The collective (decides whether values are combined).
    pub collective: Collective,
    /// The op of reducing collectives.
    pub op: ReduceOp,
    /// Number of ranks.
    pub nranks: usize,
    /// Varies the values from one check to the next.
    pub seed: u64,
    modulus: i64,
    signed: bool,
    float: bool,
}

impl Pattern {
    /// The pattern for element type `T`.
    pub fn new<T: Elem>(collective: Collective, op: ReduceOp, nranks: usize, seed: u64) -> Self {
        let n = nranks.max(1) as i64;
        // Sums of n values below `modulus` stay exact in a floating-point
        // T; integer sums wrap alike in the runtime and here.
        let modulus = if T::FLOAT {
            (T::EXACT / n).clamp(1, 11)
        } else {
            11
        };
        Pattern {
            collective,
            op,
            nranks,
            seed,
            modulus,
            signed: T::SIGNED,
            float: T::FLOAT,
        }
    }

    /// Rank `rank`'s input value at element `i`.
    pub fn value(&self, rank: usize, i: usize) -> i64 {
        let (r, i, s) = (rank as u64, i as u64, self.seed);
        if !self.collective.reduces() {
            // Data movement only: distinct values (below 97, exact in every type).
            let v = (r.wrapping_mul(31) + i.wrapping_mul(7) + s) % 97;
            return v as i64 - if self.signed { 48 } else { 0 };
        }
        match self.op {
            ReduceOp::Sum => {
                let v = ((r * 5 + i.wrapping_mul(3) + s) % self.modulus as u64) as i64;
                v - if self.signed { self.modulus / 2 } else { 0 }
            }
            ReduceOp::Avg => {
                // Signed integers get negative inputs (avg truncates
                // toward zero); floats none (the check's rounding bound is
                // relative to the result).
                let v = ((r * 5 + i.wrapping_mul(3) + s) % self.modulus as u64) as i64;
                v - if self.signed && !self.float {
                    self.modulus / 2
                } else {
                    0
                }
            }
            ReduceOp::Prod => {
                // Two in three ranks give 2 (so a product differs from a
                // maximum from two ranks on); signed types a -1 now and then.
                let v = if (r + i + s) % 3 == 2 { 1 } else { 2 };
                if self.signed && (r * 7 + i + s) % 5 == 0 {
                    -v
                } else {
                    v
                }
            }
            ReduceOp::Min | ReduceOp::Max => {
                let v = ((r * 7 + i.wrapping_mul(13) + s) % 23) as i64;
                v - if self.signed { 11 } else { 0 }
            }
        }
    }

    /// The reduction over every rank's value at element `i`.
    fn reduced(&self, i: usize) -> Expected {
        let vals = (0..self.nranks).map(|r| i128::from(self.value(r, i)));
        match self.op {
            ReduceOp::Sum => Expected::Exact(vals.sum()),
            ReduceOp::Prod => Expected::Exact(vals.product()),
            ReduceOp::Min => Expected::Exact(vals.min().unwrap_or(0)),
            ReduceOp::Max => Expected::Exact(vals.max().unwrap_or(0)),
            ReduceOp::Avg => {
                let sum: i128 = vals.sum();
                Expected::Avg(sum, self.nranks.max(1) as i128)
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Expected {
    Exact(i128),
    /// sum, nranks
    Avg(i128, i128),
}

fn matches<T: Elem>(got: T, exp: Expected) -> bool {
    match exp {
        Expected::Exact(v) => got == T::from_i128(v),
        // The sum wraps in T before the division (as NCCL's SumPostDiv).
        Expected::Avg(sum, n) if !T::FLOAT => {
            got == T::from_i128(T::from_i128(sum).to_f64() as i128 / n)
        }
        Expected::Avg(sum, n) => {
            let want = sum as f64 / n as f64;
            // Each input divided by n, then n - 1 additions (the inputs of
            // avg are not negative, so the bound is relative to the result).
            let ulps = 2.0 + n as f64;
            (got.to_f64() - want).abs() <= ulps * T::EPS * want.abs().max(f64::MIN_POSITIVE)
        }
    }
}

/// Element counts of one bench size, as nccl-tests defines them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Elements each rank sends (its input).
    pub send: usize,
    /// Elements each rank receives (its output).
    pub recv: usize,
    /// The count nccl-tests prints (and passes to the collective).
    pub count: usize,
    /// Per-rank block for the blocked collectives (all_gather,
    /// reduce_scatter, all_to_all); `count` otherwise.
    pub block: usize,
}

impl Layout {
    /// nccl-tests' counts for a sweep size of `nbytes` bytes
    /// (`*GetCollByteCount` in nccl-tests, without its 16-byte alignment of
    /// blocks, which only GPUs need).
    pub fn new(collective: Collective, nbytes: u64, elem_size: usize, nranks: usize) -> Self {
        let count = (nbytes / elem_size.max(1) as u64) as usize;
        let n = nranks.max(1);
        match collective {
            // nccl-tests allocates a gather's whole and a scatter's on
            // every rank, as all_gather's and reduce_scatter's.
            Collective::AllGather | Collective::Gather { .. } => {
                let b = count / n;
                Layout {
                    send: b,
                    recv: b * n,
                    count: b,
                    block: b,
                }
            }
            Collective::ReduceScatter | Collective::Scatter { .. } => {
                let b = count / n;
                Layout {
                    send: b * n,
                    recv: b,
                    count: b,
                    block: b,
                }
            }
            Collective::AllToAll => {
                let b = count / n;
                Layout {
                    send: b * n,
                    recv: b * n,
                    count: b,
                    block: b,
                }
            }
            Collective::Barrier => Layout {
                send: 0,
                recv: 0,
                count: 0,
                block: 0,
            },
            _ => Layout {
                send: count,
                recv: count,
                count,
                block: count,
            },
        }
    }

    /// The size nccl-tests prints: the larger of input and output, in bytes.
    pub fn bytes(&self, elem_size: usize) -> u64 {
        (self.send.max(self.recv) * elem_size) as u64
    }

    /// Length of the single buffer of an in-place run.
    pub fn in_place_len(&self) -> usize {
        self.send.max(self.recv)
    }

    /// Where a rank's input starts in the in-place buffer (all_gather and
    /// gather: its block of the output).
    pub fn in_place_input(&self, collective: Collective, rank: usize) -> usize {
        match collective {
            Collective::AllGather | Collective::Gather { .. } => rank * self.block,
            _ => 0,
        }
    }

    /// Where a rank's output starts in the in-place buffer (reduce_scatter
    /// and scatter: its block of the input).
    pub fn in_place_output(&self, collective: Collective, rank: usize) -> usize {
        match collective {
            Collective::ReduceScatter | Collective::Scatter { .. } => rank * self.block,
            _ => 0,
        }
    }
}

/// Fills `input` (length `layout.send`) with rank `rank`'s values.
pub fn fill_input<T: Elem>(p: &Pattern, rank: usize, input: &mut [T]) {
    for (i, x) in input.iter_mut().enumerate() {
        *x = T::from_i128(i128::from(p.value(rank, i)));
    }
}

/// Counts the wrong elements of rank `rank`'s `output` (length `layout.recv`).
pub fn count_wrong<T: Elem>(p: &Pattern, layout: &Layout, rank: usize, output: &[T]) -> u64 {
    let n = p.nranks.max(1);
    let b = layout.block;
    let exact = |v: i64| Expected::Exact(i128::from(v));
    let expected = |i: usize| -> Option<Expected> {
        Some(match p.collective {
            Collective::AllReduce => p.reduced(i),
            Collective::Reduce { root } => {
                if rank != root {
                    return None; // undefined on other ranks
                }
                p.reduced(i)
            }
            Collective::Broadcast { root } => exact(p.value(root, i)),
            Collective::AllGather => exact(p.value(i / b, i % b)),
            Collective::ReduceScatter => p.reduced(rank * b + i),
            Collective::AllToAll => exact(p.value(i / b, rank * b + i % b)),
            Collective::SendRecv { shift } => exact(p.value((rank + n - shift % n) % n, i)),
            Collective::Gather { root } => {
                if rank != root {
                    return None; // not written on other ranks
                }
                exact(p.value(i / b, i % b))
            }
            Collective::Scatter { root } => exact(p.value(root, rank * b + i)),
            Collective::Barrier => return None,
        })
    };
    let mut wrong = 0;
    for (i, &got) in output.iter().enumerate() {
        if let Some(exp) = expected(i) {
            if !matches(got, exp) {
                wrong += 1;
            }
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpucomm::{bf16, f16};

    /// A reference run of the collective on plain vectors.
    fn reference<T: Elem>(p: &Pattern, layout: &Layout) -> Vec<Vec<T>> {
        let n = p.nranks;
        let inputs: Vec<Vec<i128>> = (0..n)
            .map(|r| {
                (0..layout.send)
                    .map(|i| i128::from(p.value(r, i)))
                    .collect()
            })
            .collect();
        let reduce = |i: usize| -> T {
            let vals = inputs.iter().map(|v| v[i]);
            match p.op {
                ReduceOp::Sum => T::from_i128(vals.sum()),
                ReduceOp::Prod => T::from_i128(vals.product()),
                ReduceOp::Min => T::from_i128(vals.min().unwrap()),
                ReduceOp::Max => T::from_i128(vals.max().unwrap()),
                ReduceOp::Avg => {
                    let s: i128 = vals.sum();
                    if T::FLOAT {
                        // A runtime that divides the exact sum once.
                        T::from_f64(s as f64 / n as f64)
                    } else {
                        T::from_i128(s / n as i128)
                    }
                }
            }
        };
        let b = layout.block;
        (0..n)
            .map(|r| {
                (0..layout.recv)
                    .map(|i| match p.collective {
                        Collective::AllReduce | Collective::Reduce { .. } => reduce(i),
                        Collective::ReduceScatter => reduce(r * b + i),
                        Collective::Broadcast { root } => T::from_i128(inputs[root][i]),
                        Collective::AllGather => T::from_i128(inputs[i / b][i % b]),
                        Collective::AllToAll => T::from_i128(inputs[i / b][r * b + i % b]),
                        Collective::SendRecv { shift } => {
                            T::from_i128(inputs[(r + n - shift % n) % n][i])
                        }
                        // Other ranks' outputs are not checked: the root's.
                        Collective::Gather { .. } => T::from_i128(inputs[i / b][i % b]),
                        Collective::Scatter { root } => T::from_i128(inputs[root][r * b + i]),
                        Collective::Barrier => unreachable!(),
                    })
                    .collect()
            })
            .collect()
    }

    const COLLS: [Collective; 9] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast { root: 1 },
        Collective::Reduce { root: 2 },
        Collective::AllToAll,
        Collective::SendRecv { shift: 1 },
        Collective::Gather { root: 1 },
        Collective::Scatter { root: 3 },
    ];

    fn check_type<T: Elem>() {
        for coll in COLLS {
            for n in [2usize, 3, 4, 8] {
                let ops: &[ReduceOp] = if coll.reduces() {
                    &ReduceOp::ALL
                } else {
                    &[ReduceOp::Sum]
                };
                for &op in ops {
                    let coll = match coll {
                        Collective::Broadcast { root } => Collective::Broadcast { root: root % n },
                        Collective::Reduce { root } => Collective::Reduce { root: root % n },
                        Collective::Gather { root } => Collective::Gather { root: root % n },
                        Collective::Scatter { root } => Collective::Scatter { root: root % n },
                        c => c,
                    };
                    let p = Pattern::new::<T>(coll, op, n, 5);
                    let layout = Layout::new(coll, 1000, std::mem::size_of::<T>(), n);
                    let want = reference::<T>(&p, &layout);
                    for (r, out) in want.iter().enumerate() {
                        assert_eq!(
                            count_wrong(&p, &layout, r, out),
                            0,
                            "{coll:?} {op:?} n={n} r={r}"
                        );
                        // Corrupt one element: caught (except where undefined).
                        if layout.recv > 0
                            && !matches!(coll, Collective::Reduce { root } | Collective::Gather { root } if root != r)
                        {
                            let mut bad = out.clone();
                            let k = layout.recv / 2;
                            bad[k] = T::from_i128(101);
                            assert_eq!(
                                count_wrong(&p, &layout, r, &bad),
                                1,
                                "{coll:?} {op:?} n={n} r={r}"
                            );
                        }
                    }
                    // A result with another seed is wrong almost everywhere.
                    if coll.reduces() && op == ReduceOp::Sum {
                        let q = Pattern::new::<T>(coll, op, n, 6);
                        let r = coll.root().unwrap_or(0);
                        let wrong = count_wrong(&q, &layout, r, &want[r]);
                        assert!(wrong as usize > layout.recv / 2, "{coll:?} n={n}: {wrong}");
                    }
                }
            }
        }
    }

    #[test]
    fn reference_results_check_clean_in_every_type() {
        check_type::<f32>();
        check_type::<f64>();
        check_type::<f16>();
        check_type::<bf16>();
        check_type::<i8>();
        check_type::<u8>();
        check_type::<i32>();
        check_type::<u32>();
        check_type::<i64>();
        check_type::<u64>();
    }

    #[test]
    fn values_stay_exact() {
        // bf16 sums of 64 ranks stay below 256; i8 sums of 8 ranks below 127.
        let p = Pattern::new::<bf16>(Collective::AllReduce, ReduceOp::Sum, 64, 0);
        let max: i64 = (0..64).map(|r| p.value(r, 0).abs()).sum();
        assert!(max <= 256, "{max}");
        let p = Pattern::new::<i8>(Collective::AllReduce, ReduceOp::Sum, 8, 0);
        for i in 0..50 {
            let s: i64 = (0..8).map(|r| p.value(r, i)).sum();
            assert!((-128..=127).contains(&s), "{s}");
        }
        // Unsigned types get no negative values.
        let p = Pattern::new::<u8>(Collective::AllGather, ReduceOp::Sum, 3, 0);
        assert!((0..100).all(|i| p.value(2, i) >= 0));
    }

    #[test]
    fn avg_of_floats_within_rounding() {
        let p = Pattern::new::<f32>(Collective::AllReduce, ReduceOp::Avg, 3, 1);
        let layout = Layout::new(Collective::AllReduce, 64, 4, 3);
        let out: Vec<f32> = (0..layout.recv)
            .map(|i| (0..3).map(|r| p.value(r, i) as f32).sum::<f32>() / 3.0)
            .collect();
        assert_eq!(count_wrong(&p, &layout, 0, &out), 0);
        let out_mul: Vec<f32> = (0..layout.recv)
            .map(|i| (0..3).map(|r| p.value(r, i) as f32).sum::<f32>() * (1.0 / 3.0))
            .collect();
        assert_eq!(count_wrong(&p, &layout, 0, &out_mul), 0);
        // Divided before the sum, as the runtime does.
        let out_pre: Vec<f32> = (0..layout.recv)
            .map(|i| (0..3).map(|r| p.value(r, i) as f32 / 3.0).sum::<f32>())
            .collect();
        assert_eq!(count_wrong(&p, &layout, 0, &out_pre), 0);
        let mut bad = out.clone();
        bad[3] += 0.01;
        assert_eq!(count_wrong(&p, &layout, 0, &bad), 1);
        // Integers truncate.
        let p = Pattern::new::<i32>(Collective::AllReduce, ReduceOp::Avg, 3, 1);
        let out: Vec<i32> = (0..16)
            .map(|i| (0..3).map(|r| p.value(r, i) as i32).sum::<i32>() / 3)
            .collect();
        let layout = Layout::new(Collective::AllReduce, 64, 4, 3);
        assert_eq!(count_wrong(&p, &layout, 0, &out), 0);
    }

    #[test]
    fn the_checks_catch_plausible_wrong_kernels() {
        let layout = Layout::new(Collective::AllReduce, 256, 4, 2);
        // A product computed as a maximum, on 2 ranks (it passed: at most
        // one rank held a 2 on each element).
        let p = Pattern::new::<u32>(Collective::AllReduce, ReduceOp::Prod, 2, 0);
        let as_max: Vec<u32> = (0..layout.recv)
            .map(|i| (0..2).map(|r| p.value(r, i) as u32).max().unwrap())
            .collect();
        assert!(count_wrong(&p, &layout, 0, &as_max) > 0);
        // i8 sums from 64 ranks: the inputs were all 0.
        let p = Pattern::new::<i8>(Collective::AllReduce, ReduceOp::Sum, 64, 0);
        let distinct: std::collections::BTreeSet<i64> = (0..100).map(|i| p.value(5, i)).collect();
        assert!(distinct.len() > 5, "{distinct:?}");
        // Integer avg rounding toward minus infinity instead of zero.
        let n = 3;
        let p = Pattern::new::<i32>(Collective::AllReduce, ReduceOp::Avg, n, 0);
        let layout = Layout::new(Collective::AllReduce, 256, 4, n);
        let sums: Vec<i32> = (0..layout.recv)
            .map(|i| (0..n).map(|r| p.value(r, i) as i32).sum())
            .collect();
        let trunc: Vec<i32> = sums.iter().map(|s| s / n as i32).collect();
        let floor: Vec<i32> = sums.iter().map(|s| s.div_euclid(n as i32)).collect();
        assert_eq!(count_wrong(&p, &layout, 0, &trunc), 0);
        assert!(count_wrong(&p, &layout, 0, &floor) > 0);
        // i8 avg whose sum wraps: the sum wraps before the division.
        let n = 64;
        let p = Pattern::new::<i8>(Collective::AllReduce, ReduceOp::Avg, n, 0);
        let layout = Layout::new(Collective::AllReduce, 256, 1, n);
        let runtime: Vec<i8> = (0..layout.recv)
            .map(|i| {
                let s = (0..n).fold(0i8, |a, r| a.wrapping_add(p.value(r, i) as i8));
                (s as i128 / n as i128) as i8
            })
            .collect();
        assert_eq!(count_wrong(&p, &layout, 0, &runtime), 0);
    }

    #[test]
    fn layouts_like_nccl_tests() {
        let l = Layout::new(Collective::AllReduce, 1024, 4, 3);
        assert_eq!((l.send, l.recv, l.count, l.bytes(4)), (256, 256, 256, 1024));
        let l = Layout::new(Collective::AllGather, 1024, 4, 3);
        assert_eq!((l.send, l.recv, l.count, l.bytes(4)), (85, 255, 85, 1020));
        assert_eq!(l.in_place_input(Collective::AllGather, 2), 170);
        let l = Layout::new(Collective::ReduceScatter, 1024, 4, 2);
        assert_eq!((l.send, l.recv, l.count, l.bytes(4)), (256, 128, 128, 1024));
        assert_eq!(l.in_place_output(Collective::ReduceScatter, 1), 128);
        let l = Layout::new(Collective::AllToAll, 1024, 4, 4);
        assert_eq!((l.send, l.recv, l.count, l.bytes(4)), (256, 256, 64, 1024));
        let l = Layout::new(Collective::AllGather, 8, 4, 3);
        assert_eq!(l.bytes(4), 0);
        assert_eq!(Layout::new(Collective::Barrier, 1 << 20, 4, 2).bytes(4), 0);
    }
}
