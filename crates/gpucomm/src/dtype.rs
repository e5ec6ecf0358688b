//! Element types and the reduction kernels.
//!
//! Every kernel is a plain indexed loop over slices of equal length, written so
//! that LLVM vectorizes it (no bounds checks inside the loop: the slices are
//! re-sliced to one length first). `f16`/`bf16` are widened to `f32`, combined
//! and rounded back, one element at a time. The `reduce` bench
//! (`cargo bench -p gpucomm --bench reduce`) compares these kernels with a
//! scalar loop that LLVM is told not to vectorize.
//!
//! Integer semantics: `sum` and `prod` wrap on overflow (as NCCL does), `avg`
//! is the wrapping sum divided by the number of ranks with Rust's integer
//! division (truncating toward zero).

use gpucomm_algo::ReduceOp;
use half::{bf16, f16};

pub use gpucomm_algo::DataType;

mod sealed {
    pub trait Sealed {}
}

/// A type collectives can move and reduce. Implemented for `f32`, `f64`,
/// [`half::f16`], [`half::bf16`], `i8`, `u8`, `i32`, `u32`, `i64`, `u64`;
/// sealed (plain old data with no invalid bit pattern is required).
pub trait Element:
    Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static + sealed::Sealed
{
    /// The runtime tag of the type.
    const DTYPE: DataType;
    /// `self op other`.
    fn combine(self, other: Self, op: ReduceOp) -> Self;
    /// `self / n` for [`ReduceOp::Avg`] (integer division truncates).
    fn div_ranks(self, n: usize) -> Self;
    /// A value from a small integer (test data, checks).
    fn from_i64(v: i64) -> Self;
    /// The value as `f64` (checks).
    fn to_f64(self) -> f64;
    /// `dst = a op b` elementwise (`a` is `None` when `dst` is also the
    /// left operand). Types override it with a faster form (halves convert
    /// whole blocks through f32 with the CPU's conversion instructions).
    #[doc(hidden)]
    fn reduce_slices(dst: &mut [Self], a: Option<&[Self]>, b: &[Self], op: ReduceOp) {
        match a {
            Some(a) => reduce3_loop(dst, a, b, op),
            None => reduce2_loop(dst, b, op),
        }
    }
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DataType = DataType::$d;
            #[inline(always)]
            fn combine(self, o: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => self.wrapping_add(o),
                    ReduceOp::Prod => self.wrapping_mul(o),
                    ReduceOp::Min => self.min(o),
                    ReduceOp::Max => self.max(o),
                }
            }
            #[inline(always)]
            fn div_ranks(self, n: usize) -> Self {
                // In i128: `n as u8` is 0 for 256 ranks, `n as i8` -128
                // for 128 (a panic, a wrong sign).
                (self as i128 / n as i128) as $t
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
int_element!(i8, I8);
int_element!(u8, U8);
int_element!(i32, I32);
int_element!(u32, U32);
int_element!(i64, I64);
int_element!(u64, U64);

macro_rules! float_element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DataType = DataType::$d;
            #[inline(always)]
            fn combine(self, o: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => self + o,
                    ReduceOp::Prod => self * o,
                    ReduceOp::Min => self.min(o),
                    ReduceOp::Max => self.max(o),
                }
            }
            #[inline(always)]
            fn div_ranks(self, n: usize) -> Self {
                self / (n as $t)
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
float_element!(f32, F32);
float_element!(f64, F64);

macro_rules! half_element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DataType = DataType::$d;
            #[inline(always)]
            fn combine(self, o: Self, op: ReduceOp) -> Self {
                <$t>::from_f32(self.to_f32().combine(o.to_f32(), op))
            }
            #[inline(always)]
            fn div_ranks(self, n: usize) -> Self {
                <$t>::from_f32(self.to_f32() / n as f32)
            }
            fn from_i64(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            fn reduce_slices(dst: &mut [Self], a: Option<&[Self]>, b: &[Self], op: ReduceOp) {
                use half::slice::HalfFloatSliceExt;
                const B: usize = 1024;
                let (mut fa, mut fb) = ([0f32; B], [0f32; B]);
                let n = dst.len();
                let mut i = 0;
                while i < n {
                    let m = (n - i).min(B);
                    match a {
                        Some(a) => a[i..i + m].convert_to_f32_slice(&mut fa[..m]),
                        None => dst[i..i + m].convert_to_f32_slice(&mut fa[..m]),
                    }
                    b[i..i + m].convert_to_f32_slice(&mut fb[..m]);
                    reduce2_loop(&mut fa[..m], &fb[..m], op);
                    dst[i..i + m].convert_from_f32_slice(&fa[..m]);
                    i += m;
                }
            }
        }
    };
}
half_element!(f16, F16);
half_element!(bf16, Bf16);

/// `dst[i] = a[i] op b[i]` for every `i` (`a` and `b` at least as long as `dst`).
#[inline]
pub fn reduce3<T: Element>(dst: &mut [T], a: &[T], b: &[T], op: ReduceOp) {
    T::reduce_slices(dst, Some(a), b, op)
}

/// `acc[i] = acc[i] op b[i]` for every `i`.
#[inline]
pub fn reduce2<T: Element>(acc: &mut [T], b: &[T], op: ReduceOp) {
    T::reduce_slices(acc, None, b, op)
}

#[inline]
fn reduce3_loop<T: Element>(dst: &mut [T], a: &[T], b: &[T], op: ReduceOp) {
    let n = dst.len();
    let (a, b) = (&a[..n], &b[..n]);
    // One loop per op so each inner loop is branch-free and vectorizable.
    match op {
        ReduceOp::Sum | ReduceOp::Avg => {
            for i in 0..n {
                dst[i] = a[i].combine(b[i], ReduceOp::Sum);
            }
        }
        ReduceOp::Prod => {
            for i in 0..n {
                dst[i] = a[i].combine(b[i], ReduceOp::Prod);
            }
        }
        ReduceOp::Min => {
            for i in 0..n {
                dst[i] = a[i].combine(b[i], ReduceOp::Min);
            }
        }
        ReduceOp::Max => {
            for i in 0..n {
                dst[i] = a[i].combine(b[i], ReduceOp::Max);
            }
        }
    }
}

#[inline]
fn reduce2_loop<T: Element>(acc: &mut [T], b: &[T], op: ReduceOp) {
    let n = acc.len();
    let b = &b[..n];
    match op {
        ReduceOp::Sum | ReduceOp::Avg => {
            for i in 0..n {
                acc[i] = acc[i].combine(b[i], ReduceOp::Sum);
            }
        }
        ReduceOp::Prod => {
            for i in 0..n {
                acc[i] = acc[i].combine(b[i], ReduceOp::Prod);
            }
        }
        ReduceOp::Min => {
            for i in 0..n {
                acc[i] = acc[i].combine(b[i], ReduceOp::Min);
            }
        }
        ReduceOp::Max => {
            for i in 0..n {
                acc[i] = acc[i].combine(b[i], ReduceOp::Max);
            }
        }
    }
}

/// `dst[i] = dst[i] / n` (the final step of [`ReduceOp::Avg`]).
pub fn div_ranks<T: Element>(dst: &mut [T], n: usize) {
    for x in dst.iter_mut() {
        *x = x.div_ranks(n);
    }
}

/// Type-erased kernel table used by the engine: raw byte pointers plus a
/// [`DataType`] dispatch, chosen once per operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reducer {
    pub dtype: DataType,
    pub op: ReduceOp,
}

macro_rules! dispatch {
    ($dt:expr, $f:ident, $($args:expr),*) => {
        match $dt {
            DataType::F32 => $f::<f32>($($args),*),
            DataType::F64 => $f::<f64>($($args),*),
            DataType::F16 => $f::<f16>($($args),*),
            DataType::Bf16 => $f::<bf16>($($args),*),
            DataType::I8 => $f::<i8>($($args),*),
            DataType::U8 => $f::<u8>($($args),*),
            DataType::I32 => $f::<i32>($($args),*),
            DataType::U32 => $f::<u32>($($args),*),
            DataType::I64 => $f::<i64>($($args),*),
            DataType::U64 => $f::<u64>($($args),*),
        }
    };
}

#[allow(unsafe_code)]
impl Reducer {
    /// `dst = a op b` over `bytes` bytes (a whole number of elements).
    ///
    /// # Safety
    /// `dst`, `a`, `b` are valid for `bytes` bytes and aligned for the data
    /// type; `dst` does not overlap `b`; `dst` either equals `a` or does not
    /// overlap it.
    pub unsafe fn apply(self, dst: *mut u8, a: *const u8, b: *const u8, bytes: usize) {
        unsafe fn go<T: Element>(
            dst: *mut u8,
            a: *const u8,
            b: *const u8,
            bytes: usize,
            op: ReduceOp,
        ) {
            let n = bytes / std::mem::size_of::<T>();
            // SAFETY: the caller guarantees validity, alignment and the
            // aliasing rules, so the slices below never overlap a `&mut`.
            unsafe {
                let b = std::slice::from_raw_parts(b as *const T, n);
                if std::ptr::eq(dst as *const u8, a) {
                    reduce2(std::slice::from_raw_parts_mut(dst as *mut T, n), b, op);
                } else {
                    let a = std::slice::from_raw_parts(a as *const T, n);
                    reduce3(std::slice::from_raw_parts_mut(dst as *mut T, n), a, b, op);
                }
            }
        }
        // SAFETY: forwarded contract.
        unsafe { dispatch!(self.dtype, go, dst, a, b, bytes, self.op) }
    }

    /// Divides `bytes` bytes at `dst` by `n` (avg).
    ///
    /// # Safety
    /// `dst` is valid and aligned for `bytes` bytes.
    pub unsafe fn divide(self, dst: *mut u8, bytes: usize, n: usize) {
        unsafe fn go<T: Element>(dst: *mut u8, bytes: usize, n: usize) {
            // SAFETY: forwarded contract.
            let s = unsafe {
                std::slice::from_raw_parts_mut(dst as *mut T, bytes / std::mem::size_of::<T>())
            };
            div_ranks(s, n);
        }
        // SAFETY: forwarded contract.
        unsafe { dispatch!(self.dtype, go, dst, bytes, n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_match_scalar() {
        for op in ReduceOp::ALL {
            let a: Vec<i32> = (0..1003).map(|i| i * 7 - 300).collect();
            let b: Vec<i32> = (0..1003).map(|i| 500 - i * 3).collect();
            let mut d = vec![0; 1003];
            reduce3(&mut d, &a, &b, op);
            for i in 0..1003 {
                assert_eq!(d[i], a[i].combine(b[i], op));
            }
            let mut acc = a.clone();
            reduce2(&mut acc, &b, op);
            assert_eq!(acc, d);
        }
    }

    #[test]
    fn half_goes_through_f32() {
        let a = [f16::from_f32(1.5), f16::from_f32(-2.0)];
        let b = [f16::from_f32(2.25), f16::from_f32(4.0)];
        let mut d = [f16::ZERO; 2];
        reduce3(&mut d, &a, &b, ReduceOp::Sum);
        assert_eq!(d[0].to_f32(), 3.75);
        assert_eq!(d[1].to_f32(), 2.0);
        let mut e = [bf16::from_f32(3.0)];
        reduce2(&mut e, &[bf16::from_f32(5.0)], ReduceOp::Max);
        assert_eq!(e[0].to_f32(), 5.0);
    }

    #[test]
    fn half_block_path_matches_per_element() {
        for op in ReduceOp::ALL {
            let a: Vec<f16> = (0..3001)
                .map(|i| f16::from_f32((i % 37) as f32 * 0.25 - 3.0))
                .collect();
            let b: Vec<f16> = (0..3001)
                .map(|i| f16::from_f32((i % 11) as f32 * 0.5 - 2.0))
                .collect();
            let mut d = vec![f16::ZERO; 3001];
            reduce3(&mut d, &a, &b, op);
            let mut acc = a.clone();
            reduce2(&mut acc, &b, op);
            for i in 0..3001 {
                assert_eq!(d[i], a[i].combine(b[i], op), "{op:?} {i}");
                assert_eq!(acc[i], d[i]);
            }
            let ab: Vec<bf16> = a.iter().map(|x| bf16::from_f32(x.to_f32())).collect();
            let mut db = ab.clone();
            reduce2(&mut db, &ab, op);
            for i in 0..3001 {
                assert_eq!(db[i], ab[i].combine(ab[i], op));
            }
        }
    }

    #[test]
    fn integer_avg_truncates_and_sum_wraps() {
        assert_eq!(7i32.div_ranks(2), 3);
        assert_eq!((-7i32).div_ranks(2), -3);
        assert_eq!(250u8.combine(10, ReduceOp::Sum), 4);
    }

    #[test]
    fn names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::from_name(d.name()), Some(d));
            assert_eq!(DataType::from_code(d.code()), Some(d));
        }
        assert_eq!(DataType::from_name("nope"), None);
    }
}
