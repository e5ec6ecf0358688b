//! Element types: the one list of data types every engine shares (the
//! runtime's reductions, the GPU backend's kernels, the wire formats).

/// The element types collectives accept.
/// Deliberately exhaustive: adding a type must fail to compile in every
/// engine that has not learned to move and reduce it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// IEEE half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    Bf16,
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
}

impl DataType {
    /// Every data type, in a fixed order.
    pub const ALL: [DataType; 10] = [
        DataType::F32,
        DataType::F64,
        DataType::F16,
        DataType::Bf16,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
    ];

    /// Whether integer semantics apply (wrapping sum and product, truncating avg).
    pub const fn is_integer(self) -> bool {
        !matches!(
            self,
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::Bf16
        )
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
        }
    }

    /// The name used on command lines and by nccl-tests (`float`, ... are not
    /// used: `f32`, `f64`, `f16`, `bf16`, `i8`, `u8`, `i32`, `u32`, `i64`, `u64`).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
        }
    }

    /// Parses a name printed by [`DataType::name`] (also `float`, `double`,
    /// `half`, `int`, `float32`... as in nccl-tests).
    pub fn from_name(s: &str) -> Option<Self> {
        let s = s.to_ascii_lowercase();
        Some(match s.as_str() {
            "f32" | "float" | "float32" => DataType::F32,
            "f64" | "double" | "float64" => DataType::F64,
            "f16" | "half" | "float16" => DataType::F16,
            "bf16" | "bfloat16" => DataType::Bf16,
            "i8" | "int8" | "char" => DataType::I8,
            "u8" | "uint8" => DataType::U8,
            "i32" | "int" | "int32" => DataType::I32,
            "u32" | "uint32" => DataType::U32,
            "i64" | "int64" => DataType::I64,
            "u64" | "uint64" => DataType::U64,
            _ => return None,
        })
    }

    /// The one-byte code gpucomm's wire formats use for this type (stable).
    pub const fn code(self) -> u8 {
        match self {
            DataType::F32 => 1,
            DataType::F64 => 2,
            DataType::F16 => 3,
            DataType::Bf16 => 4,
            DataType::I8 => 5,
            DataType::U8 => 6,
            DataType::I32 => 7,
            DataType::U32 => 8,
            DataType::I64 => 9,
            DataType::U64 => 10,
        }
    }

    /// The type of a [`DataType::code`], `None` for an unknown code.
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.code() == c)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
