//! The CPU reference the GPU kernels must equal: the runtime's reduction
//! semantics (see the `gpucomm` crate's `dtype` module), on little-endian
//! byte slices so one function covers every [`DType`].

use gpucomm_algo::ReduceOp;
use half::{bf16, f16};

use crate::Error;
use crate::kernels::DType;

macro_rules! int_ops {
    ($t:ty, $op:expr, $x:expr, $y:expr) => {{
        let (x, y): ($t, $t) = ($x, $y);
        match $op {
            ReduceOp::Sum | ReduceOp::Avg => x.wrapping_add(y),
            ReduceOp::Prod => x.wrapping_mul(y),
            ReduceOp::Min => x.min(y),
            ReduceOp::Max => x.max(y),
        }
    }};
}

fn f32_op(op: ReduceOp, x: f32, y: f32) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Min => x.min(y),
        ReduceOp::Max => x.max(y),
    }
}

fn f64_op(op: ReduceOp, x: f64, y: f64) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Min => x.min(y),
        ReduceOp::Max => x.max(y),
    }
}

fn lengths(dtype: DType, dst: usize, a: usize, b: usize) -> Result<(), Error> {
    if dst % dtype.size() != 0 || a != dst || b != dst {
        return Err(Error::InvalidArgument(format!(
            "reduce of {dtype}: lengths {dst}, {a}, {b} must be equal multiples of {}",
            dtype.size()
        )));
    }
    Ok(())
}

/// `dst[i] = a[i] op b[i]` over elements of `dtype` stored little-endian.
pub fn reduce(op: ReduceOp, dtype: DType, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<(), Error> {
    lengths(dtype, dst.len(), a.len(), b.len())?;
    let w = dtype.size();
    for ((d, x), y) in dst
        .chunks_exact_mut(w)
        .zip(a.chunks_exact(w))
        .zip(b.chunks_exact(w))
    {
        macro_rules! go {
            ($t:ty, $f:expr) => {{
                let x = <$t>::from_le_bytes(x.try_into().expect("width"));
                let y = <$t>::from_le_bytes(y.try_into().expect("width"));
                let r: $t = $f(x, y);
                d.copy_from_slice(&r.to_le_bytes());
            }};
        }
        match dtype {
            DType::F32 => go!(f32, |x, y| f32_op(op, x, y)),
            DType::F64 => go!(f64, |x, y| f64_op(op, x, y)),
            DType::F16 => go!(f16, |x: f16, y: f16| f16::from_f32(f32_op(
                op,
                x.to_f32(),
                y.to_f32()
            ))),
            DType::Bf16 => go!(bf16, |x: bf16, y: bf16| bf16::from_f32(f32_op(
                op,
                x.to_f32(),
                y.to_f32()
            ))),
            DType::I8 => go!(i8, |x, y| int_ops!(i8, op, x, y)),
            DType::U8 => go!(u8, |x, y| int_ops!(u8, op, x, y)),
            DType::I32 => go!(i32, |x, y| int_ops!(i32, op, x, y)),
            DType::U32 => go!(u32, |x, y| int_ops!(u32, op, x, y)),
            DType::I64 => go!(i64, |x, y| int_ops!(i64, op, x, y)),
            DType::U64 => go!(u64, |x, y| int_ops!(u64, op, x, y)),
        }
    }
    Ok(())
}

/// The largest rank count [`divide`] (and the GPU divide kernel) accepts for
/// `dtype`: the count converted to the element type must stay positive.
pub fn max_ranks(dtype: DType) -> u64 {
    match dtype {
        DType::I8 => i8::MAX as u64,
        DType::U8 => u8::MAX as u64,
        DType::I32 => i32::MAX as u64,
        DType::U32 => u32::MAX as u64,
        DType::I64 => i64::MAX as u64,
        _ => u64::MAX,
    }
}

/// Checks a rank count for [`divide`].
pub fn check_ranks(dtype: DType, ranks: u64) -> Result<(), Error> {
    if ranks == 0 || ranks > max_ranks(dtype) {
        return Err(Error::InvalidArgument(format!(
            "avg over {ranks} ranks is not defined for {dtype} (1..={})",
            max_ranks(dtype)
        )));
    }
    Ok(())
}

/// `dst[i] /= ranks` as the end of `avg` (integers truncate; halves go
/// through `f32`).
pub fn divide(dtype: DType, dst: &mut [u8], ranks: u64) -> Result<(), Error> {
    lengths(dtype, dst.len(), dst.len(), dst.len())?;
    check_ranks(dtype, ranks)?;
    let w = dtype.size();
    for d in dst.chunks_exact_mut(w) {
        macro_rules! go {
            ($t:ty, $f:expr) => {{
                let x = <$t>::from_le_bytes((&*d).try_into().expect("width"));
                let r: $t = $f(x);
                d.copy_from_slice(&r.to_le_bytes());
            }};
        }
        match dtype {
            DType::F32 => go!(f32, |x: f32| x / ranks as f32),
            DType::F64 => go!(f64, |x: f64| x / ranks as f64),
            DType::F16 => go!(f16, |x: f16| f16::from_f32(x.to_f32() / ranks as f32)),
            DType::Bf16 => go!(bf16, |x: bf16| bf16::from_f32(x.to_f32() / ranks as f32)),
            DType::I8 => go!(i8, |x: i8| x / ranks as i8),
            DType::U8 => go!(u8, |x: u8| x / ranks as u8),
            DType::I32 => go!(i32, |x: i32| x / ranks as i32),
            DType::U32 => go!(u32, |x: u32| x / ranks as u32),
            DType::I64 => go!(i64, |x: i64| x / ranks as i64),
            DType::U64 => go!(u64, |x: u64| x / ranks),
        }
    }
    Ok(())
}

/// Deterministic test data for `dtype`: `n` elements from `seed`, chosen to
/// exercise wrapping (integers), rounding (halves) and signs.
pub fn test_data(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s >> 11
    };
    let mut v = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        let r = next();
        // Floats: values of mixed magnitude and sign, some not representable
        // in 16 bits (so rounding matters), never NaN.
        let f = ((r % 20001) as f64 - 10000.0) / 97.0 * if r % 7 == 0 { 1e-3 } else { 1.0 };
        match dtype {
            DType::F32 => v.extend_from_slice(&(f as f32).to_le_bytes()),
            DType::F64 => v.extend_from_slice(&f.to_le_bytes()),
            DType::F16 => v.extend_from_slice(&f16::from_f64(f).to_le_bytes()),
            DType::Bf16 => v.extend_from_slice(&bf16::from_f64(f).to_le_bytes()),
            _ => v.extend_from_slice(&r.to_le_bytes()[..dtype.size()]),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_truncates_like_the_runtime() {
        let mut d = [0u8; 1];
        reduce(
            ReduceOp::Sum,
            DType::I8,
            &mut d,
            &[100i8 as u8],
            &[100i8 as u8],
        )
        .unwrap();
        assert_eq!(d[0] as i8, 100i8.wrapping_add(100));
        let mut d = (-7i32).to_le_bytes();
        divide(DType::I32, &mut d, 2).unwrap();
        assert_eq!(i32::from_le_bytes(d), -3);
        assert!(divide(DType::I8, &mut [0u8], 128).is_err());
        assert!(divide(DType::U8, &mut [0u8], 0).is_err());
        assert!(
            reduce(
                ReduceOp::Sum,
                DType::F32,
                &mut [0u8; 4],
                &[0u8; 4],
                &[0u8; 3]
            )
            .is_err()
        );
    }

    #[test]
    fn halves_round_each_combine() {
        // 2048 + 1 is not representable in f16: rounds to even (2048).
        let (a, b) = (
            f16::from_f32(2048.0).to_le_bytes(),
            f16::from_f32(1.0).to_le_bytes(),
        );
        let mut d = [0u8; 2];
        reduce(ReduceOp::Sum, DType::F16, &mut d, &a, &b).unwrap();
        assert_eq!(f16::from_le_bytes(d).to_f32(), 2048.0);
    }
}
