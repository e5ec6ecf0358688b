//! Byte sizes as nccl-tests' `-b`/`-e` take them.

/// Why a size did not parse ([`parse_size`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not a whole number with an optional suffix.
    Invalid,
    /// More bytes than a `u64` holds.
    TooLarge,
}

/// Parses a byte size as nccl-tests does: a number with an optional suffix
/// K, M, G or T (powers of 1024; a trailing `B` or `iB` is accepted, case
/// ignored, as are spaces before the suffix and `_` between digits). The
/// number is whole, as nccl-tests' `parsesize` reads it (`1.5K` is
/// refused).
///
/// ```
/// use gpucomm_algo::{SizeError, parse_size};
/// assert_eq!(parse_size("8G"), Ok(8 << 30));
/// assert_eq!(parse_size("128 MiB"), Ok(128 << 20));
/// assert_eq!(parse_size("8_589_934_592"), Ok(8 << 30));
/// assert_eq!(parse_size("1.5K"), Err(SizeError::Invalid));
/// assert_eq!(parse_size("99999999T"), Err(SizeError::TooLarge));
/// assert_eq!(parse_size("8 gigs"), Err(SizeError::Invalid));
/// assert_eq!(parse_size("+5"), Ok(5));
/// assert_eq!(parse_size("+"), Err(SizeError::Invalid));
/// ```
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let upper = s.trim().to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper)
        .trim_end();
    let (num, shift) = match body.chars().last() {
        Some('K') => (&body[..body.len() - 1], 10),
        Some('M') => (&body[..body.len() - 1], 20),
        Some('G') => (&body[..body.len() - 1], 30),
        Some('T') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    // A leading `+`, as `u64`'s own parse and nccl-tests' `%zu` take it.
    let num = num.trim().replace('_', "");
    let num = num.strip_prefix('+').unwrap_or(&num);
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SizeError::Invalid);
    }
    let n: u64 = num.parse().map_err(|_| SizeError::TooLarge)?;
    n.checked_mul(1 << shift).ok_or(SizeError::TooLarge)
}
