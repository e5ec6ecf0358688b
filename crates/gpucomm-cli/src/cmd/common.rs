//! Helpers shared by subcommands: sizes with K/M/G suffixes, nccl-tests-style
//! sweeps and data type names.

/// Parses a byte size as nccl-tests does: a number with an optional suffix
/// K, M, G or T (powers of 1024; a trailing `B` or `iB` is accepted:
/// [`gpucomm_algo::parse_size`]).
/// Every size is a command-line value: a bad one is a [`Usage`] error.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    parse_size_value(s).or_usage()
}

fn parse_size_value(s: &str) -> anyhow::Result<u64> {
    // Said in the command line's terms, not Rust's ("invalid digit found
    // in string", "cannot parse integer from empty string").
    gpucomm_algo::parse_size(s).map_err(|e| match e {
        gpucomm_algo::SizeError::TooLarge => anyhow::anyhow!("size {s:?} is too large"),
        gpucomm_algo::SizeError::Invalid => anyhow::anyhow!(
            "invalid size {s:?}: expected a whole number of bytes with an optional \
             K, M, G or T suffix (powers of 1024), e.g. 8, 1K, 64M, 8G"
        ),
    })
}

/// A bad command line found after parsing (an unknown name, a value out of
/// range or beyond what the tool takes, options that conflict or would be
/// ignored): `main` exits 2 for it, as for clap's own usage errors, and 1
/// for failures of the run (a file that cannot be read or parsed, an I/O or
/// transport failure). docs/cli.md, "Exit status".
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Returns early with a [`Usage`] error (exit status 2).
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::cmd::common::Usage(format!($($t)*))))
    };
}
pub(crate) use usage;

/// `e` as a bad command line (exit 2), its message kept: for an error a
/// library returns on a value the command line gave it (a GPU index, a
/// node count, an option the machine cannot take). Only where the value
/// checked is the command line's: a run's failures stay failures.
pub fn usage_error(e: impl Into<anyhow::Error>) -> anyhow::Error {
    let e = e.into();
    if e.chain().any(|c| c.is::<Usage>()) {
        return e;
    }
    anyhow::Error::new(Usage(chain_message(&e)))
}

/// [`usage_error`] on a `Result`'s error.
pub trait OrUsage<T> {
    /// The error, if any, as a bad command line (exit 2).
    fn or_usage(self) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> OrUsage<T> for Result<T, E> {
    fn or_usage(self) -> anyhow::Result<T> {
        self.map_err(usage_error)
    }
}

/// The error and its causes, outer first, joined by ": " as anyhow's `{:#}`
/// joins them, but each said once: where a message already ends with its
/// cause's text (an error type that both prints its source and returns it,
/// as `std::io::Error` wrappers often do), the cause is not repeated.
pub fn chain_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if msg.ends_with(&s) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&s);
    }
    msg
}

/// An output path (`sim --trace`, `topo --export`) the run could not write
/// to, a directory or a file in a directory that does not exist, is a bad
/// command line, refused before the run (which may take minutes) rather
/// than after it.
pub fn check_output_path(flag: &str, p: &std::path::Path) -> anyhow::Result<()> {
    if p.is_dir() {
        usage!("{flag} {}: is a directory", p.display());
    }
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if !dir.is_dir() {
        usage!(
            "{flag} {}: no directory {} to write it in",
            p.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The sizes of an nccl-tests sweep: `min`, then multiplied by `factor`
/// until past `max` (`max` itself always included when the sweep is not
/// empty). `factor` must be at least 2.
pub fn size_sweep(min: u64, max: u64, factor: u64) -> anyhow::Result<Vec<u64>> {
    if factor < 2 {
        usage!("step factor must be at least 2 (got {factor})");
    }
    if min > max {
        usage!("min bytes ({min}) is larger than max bytes ({max})");
    }
    let mut sizes = Vec::new();
    let mut s = min;
    while s < max {
        sizes.push(s);
        if s == 0 {
            s = 1;
            continue;
        }
        s = match s.checked_mul(factor) {
            Some(v) => v,
            None => break,
        };
    }
    sizes.push(max);
    Ok(sizes)
}

/// Formats a byte count for humans (1024-based: `64 MiB`).
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{} {}", v as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Parses a data type as `-d` takes it: gpucomm's names (f32, bf16...) or
/// nccl-tests' (float, bfloat16, half, int8...).
pub fn parse_dtype(s: &str) -> Result<gpucomm::DataType, String> {
    gpucomm::DataType::from_name(s).ok_or_else(|| {
        format!(
            "unknown type {s:?} (expected f32, f64, f16, bf16, i8, u8, i32, u32, i64 or u64, \
             or nccl-tests' float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64)"
        )
    })
}

/// nccl-tests' type names (the `type` column).
pub fn nccl_type_name(t: gpucomm::DataType) -> &'static str {
    match t.name() {
        "f32" => "float",
        "f64" => "double",
        "f16" => "half",
        "bf16" => "bfloat16",
        "i8" => "int8",
        "u8" => "uint8",
        "i32" => "int32",
        "u32" => "uint32",
        "i64" => "int64",
        "u64" => "uint64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        // Said in the command line's terms, not Rust's parse errors.
        for bad in ["", "1.5K", "16E", "1X", "-1"] {
            let e = format!("{:#}", parse_size(bad).unwrap_err());
            assert!(
                e.contains("expected a whole number of bytes"),
                "{bad:?}: {e}"
            );
            assert!(
                !e.contains("digit") && !e.contains("integer"),
                "{bad:?}: {e}"
            );
        }
        let e = format!("{:#}", parse_size("99999999999999999999").unwrap_err());
        assert_eq!(e, "size \"99999999999999999999\" is too large");
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_size("16b").unwrap(), 16);
        assert!(parse_size("").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn sweep_like_nccl_tests() {
        assert_eq!(size_sweep(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(size_sweep(8, 100, 4).unwrap(), vec![8, 32, 100]);
        assert_eq!(size_sweep(0, 4, 2).unwrap(), vec![0, 1, 2, 4]);
        assert_eq!(size_sweep(5, 5, 2).unwrap(), vec![5]);
        assert!(size_sweep(8, 4, 2).is_err());
        assert!(size_sweep(8, 64, 1).is_err());
    }

    #[test]
    fn human_bytes() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(64 << 20), "64 MiB");
    }
}
