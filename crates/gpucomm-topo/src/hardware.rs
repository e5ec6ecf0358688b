//! Hardware attributes of nodes that are not links: the architecture and
//! device-memory bandwidth of a GPU, the memory bandwidth of a CPU socket.
//!
//! Presets set them on their nodes ([`Node::arch`](crate::Node::arch),
//! [`Node::memory_bandwidth`](crate::Node::memory_bandwidth)); files may set
//! them; when a node does not, [`Node::gpu_arch`](crate::Node::gpu_arch) and
//! [`Node::memory_gbps`](crate::Node::memory_gbps) infer them from the
//! node's label with the tables below (what discovery gives: `nvidia-smi`'s
//! product name, `/proc/cpuinfo`'s model name). Every figure is the vendor's
//! datasheet number; host memory bandwidth is channels x transfer rate x 8
//! bytes, the theoretical peak vendors quote.

use std::fmt;

/// GPU architecture (decides, in the simulator, NCCL's per-link figures
/// and NVLink SHARP efficiency).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuArch {
    /// Pascal (P100), sm_60.
    Pascal,
    /// Volta (V100), sm_70.
    Volta,
    /// Ampere (A100), sm_80.
    Ampere,
    /// Ada / consumer Ampere (RTX 4090, L40, A40), sm_86/89.
    Ada,
    /// Hopper (H100, H200), sm_90.
    Hopper,
    /// Blackwell (B200, GB200), sm_100.
    Blackwell,
}

impl GpuArch {
    /// All architectures, oldest first.
    pub const ALL: [GpuArch; 6] = [
        Self::Pascal,
        Self::Volta,
        Self::Ampere,
        Self::Ada,
        Self::Hopper,
        Self::Blackwell,
    ];

    /// The name used in files (`"hopper"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Pascal => "pascal",
            Self::Volta => "volta",
            Self::Ampere => "ampere",
            Self::Ada => "ada",
            Self::Hopper => "hopper",
            Self::Blackwell => "blackwell",
        }
    }

    /// Parses a file name (case-insensitive).
    ///
    /// ```
    /// use gpucomm_topo::GpuArch;
    /// assert_eq!(GpuArch::parse("Hopper"), Some(GpuArch::Hopper));
    /// assert_eq!(GpuArch::parse("kepler"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for GpuArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Device memory bandwidth, GB/s, of the GPUs the presets use (NVIDIA
/// datasheets).
pub mod gpu_memory {
    /// Tesla P100 SXM2 (HBM2): 732 GB/s.
    pub const P100: f64 = 732.0;
    /// Tesla V100 SXM2/SXM3 (HBM2): 900 GB/s.
    pub const V100: f64 = 900.0;
    /// A100 40GB (SXM4 and PCIe, HBM2): 1,555 GB/s.
    pub const A100_40GB: f64 = 1555.0;
    /// A100 80GB PCIe (HBM2e): 1,935 GB/s.
    pub const A100_80GB_PCIE: f64 = 1935.0;
    /// A100 80GB SXM4 (HBM2e): 2,039 GB/s.
    pub const A100_80GB_SXM: f64 = 2039.0;
    /// H100 SXM5 80GB (HBM3): 3.35 TB/s.
    pub const H100_SXM: f64 = 3350.0;
    /// H100 PCIe 80GB (HBM2e): 2 TB/s.
    pub const H100_PCIE: f64 = 2000.0;
    /// H100 NVL 94GB (HBM3): 3.9 TB/s.
    pub const H100_NVL: f64 = 3900.0;
    /// H200 SXM 141GB (HBM3e): 4.8 TB/s.
    pub const H200: f64 = 4800.0;
    /// The Hopper GPU of a GH200 480GB (96 GB HBM3): 4 TB/s (NVIDIA GH200
    /// datasheet).
    pub const GH200_96GB: f64 = 4000.0;
    /// The Hopper GPU of a GH200 with 144 GB HBM3e: 4.9 TB/s.
    pub const GH200_144GB: f64 = 4900.0;
    /// B200 (HBM3e): 8 TB/s per GPU (DGX B200 datasheet: 64 TB/s for 8).
    pub const B200: f64 = 8000.0;
    /// GeForce RTX 4090 (24 GB GDDR6X, 384-bit at 21 Gb/s): 1,008 GB/s.
    pub const RTX_4090: f64 = 1008.0;
    /// H20 (96 GB HBM3): 4.0 TB/s, as the GH200's 96 GB part.
    pub const H20: f64 = 4000.0;
    /// L40 and L40S (48 GB GDDR6): 864 GB/s.
    pub const L40: f64 = 864.0;
    /// L4 (24 GB GDDR6): 300 GB/s.
    pub const L4: f64 = 300.0;
    /// A40 (48 GB GDDR6): 696 GB/s.
    pub const A40: f64 = 696.0;
    /// RTX A6000 (48 GB GDDR6): 768 GB/s.
    pub const RTX_A6000: f64 = 768.0;
    /// A10 and AWS's A10G (24 GB GDDR6): 600 GB/s.
    pub const A10: f64 = 600.0;
    /// A30 (24 GB HBM2): 933 GB/s.
    pub const A30: f64 = 933.0;
    /// GeForce RTX 3090 (24 GB GDDR6X): 936 GB/s.
    pub const RTX_3090: f64 = 936.0;
    /// GeForce RTX 3090 Ti (24 GB GDDR6X at 21 Gb/s): 1,008 GB/s.
    pub const RTX_3090_TI: f64 = 1008.0;
    /// Tesla V100S PCIe 32GB (HBM2): 1,134 GB/s.
    pub const V100S: f64 = 1134.0;
    /// Tesla P100 PCIe 12GB (HBM2, three stacks): 549 GB/s.
    pub const P100_12GB: f64 = 549.0;
    /// RTX 6000 Ada and RTX 5880 Ada (48 GB GDDR6): 960 GB/s.
    pub const RTX_6000_ADA: f64 = 960.0;
    /// RTX 5000 Ada (32 GB GDDR6): 576 GB/s.
    pub const RTX_5000_ADA: f64 = 576.0;
    /// RTX 4500 Ada (24 GB GDDR6): 432 GB/s.
    pub const RTX_4500_ADA: f64 = 432.0;
    /// RTX 4000 Ada (20 GB GDDR6): 360 GB/s.
    pub const RTX_4000_ADA: f64 = 360.0;
    /// RTX 4000 SFF Ada (20 GB GDDR6): 280 GB/s.
    pub const RTX_4000_SFF_ADA: f64 = 280.0;
    /// RTX 2000 Ada (16 GB GDDR6): 224 GB/s.
    pub const RTX_2000_ADA: f64 = 224.0;
}

/// Host memory bandwidth per socket, GB/s: channels x MT/s x 8 bytes.
pub const fn ddr_gbps(channels: u32, mts: u32) -> f64 {
    (channels * mts) as f64 * 8.0 / 1000.0
}

/// Memory bandwidth per socket assumed for a CPU neither set nor known to
/// [`cpu_memory_from_label`]: 8 channels of DDR4-3200, 204.8 GB/s (AMD EPYC
/// 7002/7003 and Intel Ice Lake-SP).
pub const DEFAULT_CPU_MEMORY_GBPS: f64 = ddr_gbps(8, 3200);

/// The words of a product name, upper case: split at every character that
/// is not a letter or digit (`"Tesla V100-SXM2-16GB"`: `TESLA`, `V100`,
/// `SXM2`, `16GB`).
fn words(label: &str) -> Vec<String> {
    label
        .to_ascii_uppercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The memory size a product name's `words` state, GB: a word `<n>GB`
/// ("80GB") or a number followed by the word `GB` ("80 GB"), 4 to 1024.
fn stated_gb(words: &[String]) -> Option<u32> {
    let size = |n: &str| n.parse::<u32>().ok().filter(|n| (4..=1024).contains(n));
    words
        .iter()
        .enumerate()
        .find_map(|(i, w)| match w.strip_suffix("GB") {
            Some(n) => size(n),
            None if words.get(i + 1).is_some_and(|next| next == "GB") => size(w),
            None => None,
        })
}

/// Whether a product name's `words` name the GPU model `model` (upper
/// case): a word that is the model, or the model followed by letters
/// (`L40S` is an `L40`, `4090D` a `4090`), never by more digits (`A4000` is
/// no `A40`, `A1000` no `A100`) nor after other characters (`GB200` is no
/// `B200`); a count glued before it is no other character (`8xH100`).
fn names_model(words: &[String], model: &str) -> bool {
    words.iter().any(|w| {
        let digits = w.chars().take_while(char::is_ascii_digit).count();
        let w = match w[digits..].strip_prefix('X') {
            Some(rest) if digits > 0 => rest,
            _ => w.as_str(),
        };
        w.strip_prefix(model)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// Whether GPU product name `label` (a topology's, `"A100 SXM4 80GB"`)
/// names the GPU `gpu` (what a model file says its times were measured
/// on, `"A100"`, `"H100 SXM5"`): every word of `gpu` but the vendor's
/// (`NVIDIA`, `Tesla`, `GeForce`) is a word of `label`, or one followed
/// by letters, as models are matched in [`gpu_from_label`] (an `A100` is
/// no `A1000`, `SXM` no `SXM5`). Case does not matter; a `gpu` of no
/// such word names nothing.
///
/// ```
/// use gpucomm_topo::hardware::names_gpu;
/// assert!(names_gpu("A100 SXM4 80GB", "A100"));
/// assert!(names_gpu("A100 SXM4 80GB", "nvidia a100-80gb"));
/// assert!(!names_gpu("H100 SXM5 80GB", "A100"));
/// assert!(!names_gpu("A100 PCIe 80GB", "A100 SXM4"));
/// assert!(!names_gpu("NVIDIA RTX A1000", "A100"));
/// assert!(names_gpu("8xH100 SXM", "h100"));
/// ```
pub fn names_gpu(label: &str, gpu: &str) -> bool {
    let have = words(label);
    let want: Vec<String> = words(gpu)
        .into_iter()
        .filter(|w| !["NVIDIA", "TESLA", "GEFORCE"].contains(&w.as_str()))
        .collect();
    !want.is_empty() && want.iter().all(|w| names_model(&have, w))
}

/// A GPU product the tables know, told from a product name
/// ([`GpuProduct::from_label`]): its architecture, device memory
/// bandwidth and largest memory come from one entry, so the figures of a
/// name are those of one product.
///
/// ```
/// use gpucomm_topo::{GpuArch, hardware::GpuProduct};
/// let p = GpuProduct::from_label("NVIDIA A100-SXM4-40GB").unwrap();
/// assert_eq!(p, GpuProduct::A100_40GB);
/// assert_eq!(p.arch(), Some(GpuArch::Ampere));
/// assert_eq!(p.memory_gbps(), Some(1555.0));
/// assert_eq!(p.memory_gb(), 40.0);
/// assert_eq!(GpuProduct::from_label("NVIDIA RTX A4000"), None);
/// ```
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuProduct {
    /// B200 (and the HGX B200 board).
    B200,
    /// The B200 of a GB200 superchip.
    GB200,
    /// B100.
    B100,
    /// The Hopper GPU of a GH200 with 96 GB HBM3 (GH200 480GB).
    GH200_96GB,
    /// The Hopper GPU of a GH200 with 144 GB HBM3e (GH200 624GB).
    GH200_144GB,
    /// H200 SXM 141GB.
    H200,
    /// H20.
    H20,
    /// H20-3e: the H20 with the H200's 141 GB of HBM3e.
    H20_3E,
    /// H100 SXM5 (and H800 SXM).
    H100_SXM,
    /// H100 PCIe (and H800 PCIe).
    H100_PCIE,
    /// H100 NVL.
    H100_NVL,
    /// A100 or A800 40GB, SXM4 or PCIe.
    A100_40GB,
    /// A100 or A800 PCIe that states no size: the 40 GB part's bandwidth
    /// (the first PCIe part), the 80 GB part's memory (the largest, for
    /// checks that must not refuse what it may hold).
    A100_PCIE,
    /// A100 or A800 80GB PCIe.
    A100_80GB_PCIE,
    /// A100 or A800 80GB SXM4 (and an SXM part that states no size).
    A100_80GB_SXM,
    /// Tesla V100.
    V100,
    /// Tesla V100S (PCIe, faster HBM2).
    V100S,
    /// Tesla P100 (SXM2 and PCIe 16GB).
    P100,
    /// Tesla P100 PCIe 12GB.
    P100_12GB,
    /// A30 (GA100).
    A30,
    /// L40 and L40S.
    L40,
    /// L4.
    L4,
    /// GeForce RTX 4090 (and 4090D).
    RTX_4090,
    /// RTX 6000 Ada and RTX 5880 Ada.
    RTX_6000_ADA,
    /// RTX 5000 Ada.
    RTX_5000_ADA,
    /// RTX 4500 Ada.
    RTX_4500_ADA,
    /// RTX 4000 Ada.
    RTX_4000_ADA,
    /// RTX 4000 SFF Ada.
    RTX_4000_SFF_ADA,
    /// RTX 2000 Ada.
    RTX_2000_ADA,
    /// A40.
    A40,
    /// RTX A6000.
    RTX_A6000,
    /// A10 and AWS's A10G.
    A10,
    /// GeForce RTX 3090.
    RTX_3090,
    /// GeForce RTX 3090 Ti.
    RTX_3090_TI,
    /// Tesla T4 (Turing: no architecture of [`GpuArch`], so only its
    /// memory size is used).
    T4,
}

impl GpuProduct {
    /// The product a name names (`"NVIDIA H100 80GB HBM3"`, `"Tesla
    /// V100-SXM2-16GB"`, `"GH200 480GB"`); `None` for a GPU not in the
    /// table. Models are matched as words of the name, so an "RTX A4000"
    /// is no A40 and an "RTX A1000" no A100; a name that names two takes
    /// the first of this order: Blackwell, Hopper, Ampere data-center
    /// parts, Volta, Pascal, then the cards. A laptop GPU ("GeForce RTX
    /// 4090 Laptop GPU": another chip and memory than the card's) is
    /// none of them.
    pub fn from_label(label: &str) -> Option<Self> {
        use GpuProduct::*;
        let l = label.to_ascii_uppercase();
        let w = words(label);
        let is = |model: &str| names_model(&w, model);
        let word = |x: &str| w.iter().any(|y| y == x);
        if word("LAPTOP") {
            return None;
        }
        // The workstation Ada cards: their number and the word "Ada"
        // ("NVIDIA RTX 6000 Ada Generation").
        let ada = |n: &str| word("ADA") && word(n);
        Some(if is("GB200") {
            GB200
        } else if is("B200") {
            B200
        } else if is("B100") {
            B100
        } else if is("GH200") {
            // The name states the superchip's memory, CPU's with GPU's:
            // GH200 624GB holds the 144 GB HBM3e part.
            let hbm3e = l.contains("144") || l.contains("HBM3E") || l.contains("624");
            if hbm3e { GH200_144GB } else { GH200_96GB }
        } else if is("H200") {
            H200
        } else if is("H20") {
            if word("3E") || l.contains("H20-3E") {
                H20_3E
            } else {
                H20
            }
        } else if is("H100") || is("H800") {
            if l.contains("NVL") {
                H100_NVL
            } else if l.contains("PCIE") {
                H100_PCIE
            } else {
                H100_SXM
            }
        } else if is("A100") || is("A800") {
            // The memory size the name states, as a word ("80GB", "80
            // GB"): "80" anywhere in it matched the A800's own number,
            // and gave an "A800 40GB" the 80 GB part's 2,039 GB/s.
            match stated_gb(&w) {
                Some(80) if l.contains("PCIE") => A100_80GB_PCIE,
                Some(80) => A100_80GB_SXM,
                Some(40) => A100_40GB,
                _ if l.contains("PCIE") => A100_PCIE,
                _ => A100_80GB_SXM,
            }
        } else if is("V100S") {
            V100S
        } else if is("V100") {
            V100
        } else if is("P100") {
            if stated_gb(&w) == Some(12) {
                P100_12GB
            } else {
                P100
            }
        } else if is("A30") {
            A30
        } else if is("L40") {
            L40
        } else if word("L4") {
            L4
        } else if is("4090") {
            RTX_4090
        } else if ada("6000") || ada("5880") {
            RTX_6000_ADA
        } else if ada("5000") {
            RTX_5000_ADA
        } else if ada("4500") {
            RTX_4500_ADA
        } else if ada("4000") && word("SFF") {
            RTX_4000_SFF_ADA
        } else if ada("4000") {
            RTX_4000_ADA
        } else if ada("2000") {
            RTX_2000_ADA
        } else if is("A40") {
            A40
        } else if is("A6000") {
            RTX_A6000
        } else if is("A10") {
            A10
        } else if is("3090") {
            if word("TI") || l.contains("3090TI") {
                RTX_3090_TI
            } else {
                RTX_3090
            }
        } else if word("T4") || word("T4G") {
            T4
        } else {
            return None;
        })
    }

    /// The architecture; `None` for one [`GpuArch`] does not have (T4).
    /// Consumer Ampere (GA102, sm_86) is [`GpuArch::Ada`]'s, the A30
    /// (GA100, sm_80) [`GpuArch::Ampere`]'s.
    pub fn arch(self) -> Option<GpuArch> {
        use GpuProduct::*;
        Some(match self {
            B200 | GB200 | B100 => GpuArch::Blackwell,
            GH200_96GB | GH200_144GB | H200 | H20 | H20_3E | H100_SXM | H100_PCIE | H100_NVL => {
                GpuArch::Hopper
            }
            A100_40GB | A100_PCIE | A100_80GB_PCIE | A100_80GB_SXM | A30 => GpuArch::Ampere,
            V100 | V100S => GpuArch::Volta,
            P100 | P100_12GB => GpuArch::Pascal,
            L40 | L4 | RTX_4090 | A40 | RTX_A6000 | A10 | RTX_3090 | RTX_3090_TI => GpuArch::Ada,
            RTX_6000_ADA | RTX_5000_ADA | RTX_4500_ADA | RTX_4000_ADA | RTX_4000_SFF_ADA
            | RTX_2000_ADA => GpuArch::Ada,
            T4 => return None,
        })
    }

    /// Device memory bandwidth, GB/s ([`gpu_memory`]); `None` where the
    /// table has no figure (T4).
    pub fn memory_gbps(self) -> Option<f64> {
        use GpuProduct::*;
        use gpu_memory as m;
        Some(match self {
            // The B100's HBM3e runs at the B200's 8 TB/s.
            B200 | GB200 | B100 => m::B200,
            GH200_96GB => m::GH200_96GB,
            GH200_144GB => m::GH200_144GB,
            H200 => m::H200,
            H20 => m::H20,
            H20_3E => m::H200,
            H100_SXM => m::H100_SXM,
            H100_PCIE => m::H100_PCIE,
            H100_NVL => m::H100_NVL,
            A100_40GB | A100_PCIE => m::A100_40GB,
            A100_80GB_PCIE => m::A100_80GB_PCIE,
            A100_80GB_SXM => m::A100_80GB_SXM,
            V100 => m::V100,
            V100S => m::V100S,
            P100 => m::P100,
            P100_12GB => m::P100_12GB,
            A30 => m::A30,
            L40 => m::L40,
            L4 => m::L4,
            RTX_4090 => m::RTX_4090,
            RTX_6000_ADA => m::RTX_6000_ADA,
            RTX_5000_ADA => m::RTX_5000_ADA,
            RTX_4500_ADA => m::RTX_4500_ADA,
            RTX_4000_ADA => m::RTX_4000_ADA,
            RTX_4000_SFF_ADA => m::RTX_4000_SFF_ADA,
            RTX_2000_ADA => m::RTX_2000_ADA,
            A40 => m::A40,
            RTX_A6000 => m::RTX_A6000,
            A10 => m::A10,
            RTX_3090 => m::RTX_3090,
            RTX_3090_TI => m::RTX_3090_TI,
            T4 => return None,
        })
    }

    /// Device memory, GB (1e9 bytes): the product's, or the largest it
    /// was made with where parts differ (NVIDIA datasheets), so that a
    /// check against it never refuses what the GPU may hold.
    pub fn memory_gb(self) -> f64 {
        use GpuProduct::*;
        match self {
            GB200 => 186.0,
            B200 => 180.0,
            B100 => 192.0,
            GH200_96GB => 96.0,
            GH200_144GB => 144.0,
            H200 | H20_3E => 141.0,
            H20 => 96.0,
            H100_NVL => 94.0,
            H100_SXM | H100_PCIE | A100_PCIE | A100_80GB_PCIE | A100_80GB_SXM => 80.0,
            A100_40GB => 40.0,
            V100 | V100S => 32.0,
            P100 | T4 | RTX_2000_ADA => 16.0,
            P100_12GB => 12.0,
            L40 | A40 | RTX_A6000 | RTX_6000_ADA => 48.0,
            RTX_5000_ADA => 32.0,
            RTX_4090 | RTX_3090 | RTX_3090_TI | A10 | A30 | L4 | RTX_4500_ADA => 24.0,
            RTX_4000_ADA | RTX_4000_SFF_ADA => 20.0,
        }
    }
}

/// GPU architecture and device memory bandwidth (GB/s) from a product name
/// (`"NVIDIA H100 80GB HBM3"`, `"Tesla V100-SXM2-16GB"`): those of
/// [`GpuProduct::from_label`]; `None` for a GPU not in the table or
/// without both. Figures: [`gpu_memory`].
///
/// ```
/// use gpucomm_topo::{GpuArch, hardware::gpu_from_label};
/// assert_eq!(gpu_from_label("NVIDIA H100 80GB HBM3"), Some((GpuArch::Hopper, 3350.0)));
/// assert_eq!(gpu_from_label("Voodoo 3"), None);
/// assert_eq!(gpu_from_label("NVIDIA RTX A4000"), None);
/// ```
pub fn gpu_from_label(label: &str) -> Option<(GpuArch, f64)> {
    let p = GpuProduct::from_label(label)?;
    Some((p.arch()?, p.memory_gbps()?))
}

/// Device memory of a GPU, GB (1e9 bytes), from its product name: the size
/// the name states ("A100 SXM4 40GB", "NVIDIA H100 80GB HBM3",
/// "Tesla V100-SXM2-16GB"; a GH200's name states the superchip's memory
/// with its CPU's, "GH200 480GB", so its GPU's is the HBM: 96 GB HBM3, 144
/// GB HBM3e), else [`GpuProduct::memory_gb`], the largest the product was
/// made with (B200 180, the B200 of a GB200 186, B100 192, H200 141, H20
/// 96, H100 NVL 94, H100 and H800 80, A100 and A800 80, V100 32, P100 16,
/// L40S, L40, A40 and RTX A6000 48, RTX 4090 and 3090 24, A10 (A10G) and
/// A30 24, L4 24, T4 16; the workstation Ada cards theirs), so that a
/// check against it never refuses what the GPU may hold. `None` for a GPU
/// not in the table whose name states no size.
///
/// ```
/// use gpucomm_topo::hardware::gpu_memory_gb_from_label;
/// assert_eq!(gpu_memory_gb_from_label("NVIDIA A100-SXM4-40GB"), Some(40.0));
/// assert_eq!(gpu_memory_gb_from_label("GH200 480GB (H100 96GB HBM3)"), Some(96.0));
/// assert_eq!(gpu_memory_gb_from_label("NVIDIA H200"), Some(141.0));
/// assert_eq!(gpu_memory_gb_from_label("Voodoo 3"), None);
/// assert_eq!(gpu_memory_gb_from_label("NVIDIA RTX A4000"), None);
/// ```
pub fn gpu_memory_gb_from_label(label: &str) -> Option<f64> {
    let product = GpuProduct::from_label(label);
    if let Some(p @ (GpuProduct::GH200_96GB | GpuProduct::GH200_144GB)) = product {
        return Some(p.memory_gb());
    }
    stated_gb(&words(label))
        .map(f64::from)
        .or_else(|| product.map(GpuProduct::memory_gb))
}

/// A CPU family the tables know, told from a model name
/// ([`CpuFamily::from_label`]): what sets a socket's memory bandwidth
/// ([`CpuFamily::memory_gbps`]) and one core's streaming read
/// ([`CpuFamily::core_read_gbps`]). One classifier for both, so a part
/// gets the figures of one family.
///
/// ```
/// use gpucomm_topo::hardware::CpuFamily;
/// let f = CpuFamily::from_label("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz").unwrap();
/// assert_eq!(f, CpuFamily::CascadeLakeSp);
/// assert_eq!(f.memory_gbps(), 140.784); // 6 x DDR4-2933
/// assert_eq!(f.core_read_gbps(), Some(12.96));
/// assert_eq!(CpuFamily::from_label("Z80"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuFamily {
    /// Xeon E5-2600/4600 (v1): 4 x DDR3-1600.
    SandyBridgeEp,
    /// Xeon E5-2600/4600 v2: 4 x DDR3-1866.
    IvyBridgeEp,
    /// Xeon E5-2600/4600 v3: 4 x DDR4-2133.
    HaswellEp,
    /// Xeon E5-2600/4600 v4 (DGX-1): 4 x DDR4-2400.
    BroadwellEp,
    /// Xeon Scalable, first generation (x1xx, DGX-2's Platinum 8168): 6 x
    /// DDR4-2666.
    SkylakeSp,
    /// Xeon Scalable, second generation (x2xx): 6 x DDR4-2933.
    CascadeLakeSp,
    /// Xeon Scalable, third generation (x3xx): 8 x DDR4-3200.
    IceLakeSp,
    /// Xeon Scalable, third generation's four- and eight-socket parts
    /// (x3xxH, x3xxHL): 6 x DDR4-3200.
    CooperLake,
    /// Xeon Scalable, fourth generation (x4xx, DGX H100's Platinum 8480C):
    /// 8 x DDR5-4800.
    SapphireRapids,
    /// Xeon Scalable, fifth generation (x5xx, DGX B200's Platinum 8570): 8
    /// x DDR5-5600.
    EmeraldRapids,
    /// EPYC 7001: 8 x DDR4-2666.
    EpycNaples,
    /// EPYC 7002 (DGX A100's 7742): 8 x DDR4-3200.
    EpycRome,
    /// EPYC 7003: 8 x DDR4-3200.
    EpycMilan,
    /// EPYC 9004: 12 x DDR5-4800.
    EpycGenoa,
    /// NVIDIA Grace: up to 500 GB/s of LPDDR5X (Grace datasheet).
    Grace,
    /// Core i9-13900K/14900K (desktop): 2 x DDR5-5600.
    RaptorLake,
}

impl CpuFamily {
    /// The family a CPU model name names (`/proc/cpuinfo`'s, a preset's,
    /// a datasheet's): a Xeon Scalable part by its number's second digit
    /// (the generation: "Xeon Platinum 8480C", "Xeon Gold 6248R", "Xeon
    /// 6338"; an H or HL part of the third is Cooper Lake) or the code
    /// name beside "Xeon" or "SP" ("Xeon (Ice Lake-SP)"); a Xeon W-3000
    /// workstation part the same way (w9-3495X and the w-3500 refresh
    /// are Sapphire Rapids); a Xeon E5 by its version ("E5-2698 v4"); an
    /// EPYC by its number's last digit ("7742", "7H12", "9654") or code
    /// name; "Grace"; a Core i9-13900K or 14900K (and F, KF, KS, T; not
    /// the laptop H and HX parts). `None` for a CPU not in the table,
    /// among them Xeon 6 ("Xeon 6530P": a number with no tier word and a
    /// P or E suffix), Xeon Max and Xeon D. A number elsewhere in the
    /// name ("DDR4-3200") is not the part's.
    pub fn from_label(label: &str) -> Option<Self> {
        use CpuFamily::*;
        let w: Vec<String> = words(label)
            .into_iter()
            // "2xEPYC" is an EPYC; "(R)" and "(TM)" are marks.
            .map(|x| {
                let digits = x.chars().take_while(char::is_ascii_digit).count();
                match x[digits..].strip_prefix('X') {
                    Some(rest) if digits > 0 && !rest.is_empty() => rest.to_string(),
                    _ => x,
                }
            })
            .filter(|x| !matches!(x.as_str(), "R" | "TM"))
            .collect();
        let word = |name: &str| w.iter().any(|x| x == name);
        // The first word within `within` after `name` that starts with a
        // digit, or the word's own number glued to it.
        let number_after = |name: &str, within: usize| {
            let k = w.iter().position(|x| x == name)?;
            w[k + 1..]
                .iter()
                .take(within)
                .find(|x| x.starts_with(|c: char| c.is_ascii_digit()))
        };
        let leading_digits =
            |x: &str| -> String { x.chars().take_while(char::is_ascii_digit).collect() };
        // Xeon E5-2600/4600: the version is a word ("v4") or glued to the
        // number ("2698V4").
        if let Some(n) = number_after("E5", 1) {
            let d = leading_digits(n);
            if d.len() == 4 && (d.starts_with("26") || d.starts_with("46")) {
                let version = |v: &str| word(v) || n.ends_with(v);
                return Some(if version("V4") {
                    BroadwellEp
                } else if version("V3") {
                    HaswellEp
                } else if version("V2") {
                    IvyBridgeEp
                } else {
                    SandyBridgeEp
                });
            }
        }
        // Xeon Scalable: the number after its tier ("Platinum 8168"),
        // else after "Xeon" ("Xeon 6338"); Bronze 3, Silver 4, Gold 5 and
        // 6, Platinum 8; the second digit the generation. Xeon W-3000
        // (after "W", "w9", ...): 31 Skylake, 32 Cascade Lake, 33 Ice
        // Lake, 34 and 35 Sapphire Rapids.
        let xeon_word = word("XEON");
        #[derive(Clone, Copy, PartialEq)]
        enum Tier {
            Scalable,
            Workstation,
            None,
        }
        let is_workstation = |x: &str| matches!(x, "W" | "W3" | "W5" | "W7" | "W9");
        let part = ["PLATINUM", "GOLD", "SILVER", "BRONZE"]
            .iter()
            .find_map(|t| number_after(t, 1))
            .map(|n| (n, Tier::Scalable))
            .or_else(|| {
                let k = w.iter().position(|x| is_workstation(x))?;
                let n = w
                    .get(k + 1)
                    .filter(|n| xeon_word && n.starts_with('3') && leading_digits(n).len() == 4)?;
                Some((n, Tier::Workstation))
            })
            .or_else(|| number_after("XEON", 2).map(|n| (n, Tier::None)));
        let scalable = part.and_then(|(n, tier)| {
            let d = leading_digits(n);
            let suffix = &n[d.len()..];
            // Xeon 6 ("Xeon 6530P", "Xeon 6980P", "6375P-C"): no tier, a
            // P or E suffix.
            let xeon6 = tier == Tier::None && (suffix.starts_with('P') || suffix.starts_with('E'));
            if d.len() != 4 || !matches!(&d[..1], "3" | "4" | "5" | "6" | "8") || xeon6 {
                return None;
            }
            Some(match (d.as_bytes()[1], tier) {
                (b'1', _) => SkylakeSp,
                (b'2', _) => CascadeLakeSp,
                // Cooper Lake: 8380H, 6348H, 8376HL.
                (b'3', _) if suffix.starts_with('H') => CooperLake,
                (b'3', _) => IceLakeSp,
                // The w-3500 is Sapphire Rapids refreshed.
                (b'4', _) | (b'5', Tier::Workstation) => SapphireRapids,
                (b'5', _) => EmeraldRapids,
                _ => return None,
            })
        });
        if scalable.is_some() {
            return scalable;
        }
        let joined = w.join(" ");
        // A code name in a Xeon's name, or followed by "SP": QEMU's
        // "Intel Core Processor (Skylake, IBRS)" is a client part.
        let named = |name: &str| {
            joined.contains(name) && (xeon_word || joined.contains(&format!("{name} SP")))
        };
        let by_code_name = [
            ("SKYLAKE", SkylakeSp),
            ("CASCADE LAKE", CascadeLakeSp),
            ("CASCADELAKE", CascadeLakeSp),
            ("COOPER LAKE", CooperLake),
            ("ICE LAKE", IceLakeSp),
            ("ICELAKE", IceLakeSp),
            ("SAPPHIRE", SapphireRapids),
            ("EMERALD", EmeraldRapids),
        ];
        if let Some(&(_, family)) = by_code_name.iter().find(|(name, _)| named(name)) {
            return Some(family);
        }
        if word("EPYC") {
            // "7742", "7402P", "7H12", "9654": the series, then the last
            // digit of four the generation.
            let part = number_after("EPYC", 1)
                .map(|n| n.chars().take(4).collect::<String>())
                .filter(|n| n.len() == 4);
            let epyc = |series: char, last: char| {
                part.as_ref()
                    .is_some_and(|n| n.starts_with(series) && n.ends_with(last))
            };
            if epyc('7', '1') || word("NAPLES") {
                return Some(EpycNaples);
            }
            if epyc('7', '2') || word("ROME") {
                return Some(EpycRome);
            }
            if epyc('7', '3') || word("MILAN") {
                return Some(EpycMilan);
            }
            // Azure HBv5's 9V64H has HBM in place of DDR5: not Genoa's
            // memory.
            if epyc('9', '4') && !word("9V64H") || word("GENOA") {
                return Some(EpycGenoa);
            }
            return None;
        }
        if word("GRACE") {
            return Some(Grace);
        }
        // Core i9-13900K, 14900K and their F, KF, KS, T and plain parts
        // (the number after "i9"); the laptop H and HX parts run slower
        // memory.
        if number_after("I9", 1).is_some_and(|n| {
            let d = leading_digits(n);
            ["13900", "14900"].contains(&d.as_str())
                && ["", "K", "KF", "KS", "F", "T"].contains(&&n[d.len()..])
        }) {
            return Some(RaptorLake);
        }
        None
    }

    /// Memory bandwidth per socket, GB/s: channels x fastest supported
    /// DIMM rate x 8 bytes (vendor datasheets; Intel ARK, AMD's EPYC
    /// pages), the theoretical peak vendors quote.
    pub fn memory_gbps(self) -> f64 {
        use CpuFamily::*;
        match self {
            SandyBridgeEp => ddr_gbps(4, 1600),
            IvyBridgeEp => ddr_gbps(4, 1866),
            HaswellEp => ddr_gbps(4, 2133),
            BroadwellEp => ddr_gbps(4, 2400),
            SkylakeSp => ddr_gbps(6, 2666),
            CascadeLakeSp => ddr_gbps(6, 2933),
            IceLakeSp => ddr_gbps(8, 3200),
            SapphireRapids => ddr_gbps(8, 4800),
            EmeraldRapids => ddr_gbps(8, 5600),
            CooperLake => ddr_gbps(6, 3200),
            EpycNaples => ddr_gbps(8, 2666),
            EpycRome | EpycMilan => ddr_gbps(8, 3200),
            EpycGenoa => ddr_gbps(12, 4800),
            Grace => 500.0,
            RaptorLake => ddr_gbps(2, 5600),
        }
    }

    /// One core's streaming read bandwidth from DRAM, GB/s: what a single
    /// thread's copy can pull, which on a server is bounded by the cache
    /// misses one core keeps in flight (Little's law: lines in flight x 64
    /// B / memory latency), far below the socket's memory bandwidth.
    /// `None` where no published figure was found (EPYC 7003 and 9004,
    /// Grace) and for desktop parts, whose one core comes near half their
    /// two channels.
    ///
    /// Figures: likwid-bench `load` on one core of a part of the same
    /// microarchitecture, from RRZE-HPC/kerncraft `examples/machine-files`
    /// (at commit 5d1cc67, the last two at ff9b17c): `SandyBridgeEP_E5-2680.yml` 12.30,
    /// `IvyBridgeEP_E5-2690v2.yml` 15.68, `HaswellEP_E5-2695v3.yml` 8.93,
    /// `BroadwellEP_E5-2697v4_CoD.yml` 11.18,
    /// `SkylakeSP_Platinum-8147_2.7GHz.yml` (a Platinum 8174 at 2.7 GHz)
    /// 10.88, `CascadelakeSP_Gold-6248_SNC.yml` 12.96,
    /// `Zen_EPYC-7451.yml` 21.58, `Zen2_EPYC-7452.yml` 21.77,
    /// `IcelakeSP_Platinum-8360Y.yml` 15.37,
    /// `SapphireRapids_Platinum-8470.yml` 14.49; for Emerald Rapids a one-core streaming
    /// read of 8.8 B per cycle at 2.1 GHz, 18.5, on a Xeon Gold 5512U
    /// with turbo off (a published research log). These run at base clock
    /// and differ by part: Skylake-SP's Gold 6148 gives 14.32, Broadwell's
    /// E5-2630 v4 7.98.
    pub fn core_read_gbps(self) -> Option<f64> {
        use CpuFamily::*;
        match self {
            SandyBridgeEp => Some(12.30),
            IvyBridgeEp => Some(15.68),
            HaswellEp => Some(8.93),
            BroadwellEp => Some(11.18),
            SkylakeSp => Some(10.88),
            // Cooper Lake: Cascade Lake's core and mesh (its four- and
            // eight-socket derivative), so Cascade Lake's figure.
            CascadeLakeSp | CooperLake => Some(12.96),
            IceLakeSp => Some(15.37),
            SapphireRapids => Some(14.49),
            EmeraldRapids => Some(18.5),
            EpycNaples => Some(21.58),
            EpycRome => Some(21.77),
            EpycMilan | EpycGenoa | Grace | RaptorLake => None,
        }
    }

    /// A desktop part (one socket, two memory channels), whose one core's
    /// copy comes near half its memory bandwidth.
    pub fn is_desktop(self) -> bool {
        matches!(self, CpuFamily::RaptorLake)
    }
}

/// Host memory bandwidth per socket (GB/s) from a CPU model name:
/// [`CpuFamily::memory_gbps`] of [`CpuFamily::from_label`]; `None` for a
/// CPU not in the table.
///
/// ```
/// use gpucomm_topo::hardware::cpu_memory_from_label;
/// assert_eq!(cpu_memory_from_label("Xeon E5-2698 v4"), Some(76.8));
/// assert_eq!(cpu_memory_from_label("Z80"), None);
/// ```
pub fn cpu_memory_from_label(label: &str) -> Option<f64> {
    CpuFamily::from_label(label).map(CpuFamily::memory_gbps)
}

/// One core's streaming read bandwidth from DRAM (GB/s) from a CPU model
/// name: [`CpuFamily::core_read_gbps`] of [`CpuFamily::from_label`];
/// `None` for a CPU not in the table or with no published figure.
///
/// ```
/// use gpucomm_topo::hardware::cpu_core_read_gbps_from_label;
/// assert_eq!(cpu_core_read_gbps_from_label("AMD EPYC 7742 64-Core Processor"), Some(21.77));
/// assert_eq!(cpu_core_read_gbps_from_label("Core i9-13900K"), None);
/// ```
pub fn cpu_core_read_gbps_from_label(label: &str) -> Option<f64> {
    CpuFamily::from_label(label).and_then(CpuFamily::core_read_gbps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in GpuArch::ALL {
            assert_eq!(GpuArch::parse(a.name()), Some(a));
        }
    }

    #[test]
    fn labels_of_the_presets_and_of_discovery() {
        assert_eq!(
            gpu_from_label("Tesla V100-SXM2-16GB").unwrap().0,
            GpuArch::Volta
        );
        assert_eq!(gpu_from_label("A100 PCIe 80GB").unwrap().1, 1935.0);
        assert_eq!(gpu_from_label("A100-PCIE-40GB").unwrap().1, 1555.0);
        assert_eq!(gpu_from_label("A100 SXM4 80GB").unwrap().1, 2039.0);
        assert_eq!(gpu_from_label("GeForce RTX 4090").unwrap().0, GpuArch::Ada);
        assert_eq!(gpu_from_label("NVIDIA H100 NVL").unwrap().1, 3900.0);
        assert_eq!(gpu_from_label("NVIDIA H100 PCIe").unwrap().1, 2000.0);
        // Cards and modules beyond the presets' GPUs: a GA100 (A30) is
        // sm_80, GA102 and AD10x parts (A10G, A40, RTX A6000, L4, L40S)
        // GpuArch::Ada's; an H20 is no H200 nor an H20-less "H2".
        for (label, arch, bw) in [
            ("NVIDIA H20", GpuArch::Hopper, 4000.0),
            ("NVIDIA H200", GpuArch::Hopper, 4800.0),
            ("NVIDIA B100", GpuArch::Blackwell, 8000.0),
            ("NVIDIA A30", GpuArch::Ampere, 933.0),
            ("NVIDIA A10G", GpuArch::Ada, 600.0),
            ("NVIDIA A10", GpuArch::Ada, 600.0),
            ("NVIDIA A40", GpuArch::Ada, 696.0),
            ("NVIDIA RTX A6000", GpuArch::Ada, 768.0),
            ("NVIDIA GeForce RTX 3090", GpuArch::Ada, 936.0),
            ("NVIDIA L40S", GpuArch::Ada, 864.0),
            ("NVIDIA L4", GpuArch::Ada, 300.0),
            ("8x NVIDIA L40S (Ada Lovelace)", GpuArch::Ada, 864.0),
            ("8x A40 with PCIe riser adapter", GpuArch::Ada, 696.0),
        ] {
            assert_eq!(gpu_from_label(label), Some((arch, bw)), "{label}");
        }
        assert_eq!(
            gpu_from_label("NVIDIA A100 80GB").unwrap().0,
            GpuArch::Ampere
        );
        // Device memory: the size the name states, the product's largest
        // otherwise, a GH200's GPU's HBM.
        for (label, gb) in [
            ("Tesla V100 SXM2 16GB", Some(16.0)),
            ("Tesla V100-SXM2-32GB", Some(32.0)),
            ("NVIDIA A100 80GB PCIe", Some(80.0)),
            ("A100 SXM4 80GB", Some(80.0)),
            ("H100 SXM5 80GB", Some(80.0)),
            ("NVIDIA H100 PCIe", Some(80.0)),
            ("NVIDIA H100 NVL", Some(94.0)),
            ("H200 SXM 141GB", Some(141.0)),
            ("B200 180GB", Some(180.0)),
            ("NVIDIA H20", Some(96.0)),
            ("NVIDIA A10G", Some(24.0)),
            ("B200 (GB200)", Some(186.0)),
            ("GH200 120GB (H100 96GB HBM3)", Some(96.0)),
            ("NVIDIA GH200 144G HBM3e", Some(144.0)),
            ("GeForce RTX 4090", Some(24.0)),
            ("NVIDIA L40S", Some(48.0)),
            ("NVIDIA L4", Some(24.0)),
            ("Tesla T4", Some(16.0)),
            ("Voodoo 3", None),
        ] {
            assert_eq!(gpu_memory_gb_from_label(label), gb, "{label}");
        }
        // Models are words: an RTX A4000 is no A40 (Ada, 48 GB), an RTX
        // A1000 no A100, an RTX A400 no A40; an L40S is an L40, a GB200's
        // B200 the GB200's.
        for label in ["NVIDIA RTX A4000", "NVIDIA RTX A1000", "NVIDIA RTX A400"] {
            assert_ne!(
                gpu_from_label(label).map(|g| g.1),
                Some(gpu_memory::A100_40GB),
                "{label}"
            );
            assert_ne!(gpu_memory_gb_from_label(label), Some(48.0), "{label}");
            assert_ne!(gpu_memory_gb_from_label(label), Some(80.0), "{label}");
        }
        assert_eq!(gpu_from_label("NVIDIA RTX A4000"), None);
        assert_eq!(gpu_from_label("NVIDIA RTX A1000"), None);
        assert_eq!(gpu_memory_gb_from_label("NVIDIA RTX A1000"), None);
        assert_eq!(gpu_from_label("NVIDIA A40").unwrap().0, GpuArch::Ada);
        assert_eq!(gpu_memory_gb_from_label("NVIDIA A40"), Some(48.0));
        assert_eq!(gpu_from_label("NVIDIA L40S").unwrap().0, GpuArch::Ada);
        assert_eq!(
            gpu_from_label("NVIDIA RTX 6000 Ada Generation").unwrap().0,
            GpuArch::Ada
        );
        assert_eq!(
            gpu_from_label("NVIDIA GB200").unwrap().0,
            GpuArch::Blackwell
        );
        assert_eq!(gpu_from_label("NVIDIA A100-SXM4-80GB").unwrap().1, 2039.0);
        // The A800's "80" is its model, not its memory: an A800 40GB has
        // the 40 GB part's 1,555 GB/s (NVIDIA A800 40GB datasheet), not
        // 2,039. Sizes are words, "80GB" or "80 GB".
        for (label, gbps) in [
            ("NVIDIA A800-SXM4-40GB", 1555.0),
            ("A800 40GB", 1555.0),
            ("NVIDIA A800 40GB Active", 1555.0),
            ("A800 SXM4 80GB", 2039.0),
            ("NVIDIA A800 80GB PCIe", 1935.0),
            ("NVIDIA A800-PCIE-40GB", 1555.0),
            ("NVIDIA A100 80 GB SXM4", 2039.0),
            ("NVIDIA A100 40 GB PCIe", 1555.0),
            ("NVIDIA A800", 2039.0),
        ] {
            assert_eq!(gpu_from_label(label).unwrap().1, gbps, "{label}");
        }
        assert_eq!(gpu_memory_gb_from_label("A800 40GB"), Some(40.0));
        assert_eq!(
            gpu_memory_gb_from_label("NVIDIA A100 40 GB PCIe"),
            Some(40.0)
        );
        assert_eq!(gpu_from_label("NVIDIA GeForce GTX 1080"), None);
        // One product gives a name's figures: an A100 PCIe that states no
        // size has the 40 GB part's bandwidth and may hold the 80 GB
        // part's memory; a T4 its memory but no architecture of the table.
        assert_eq!(gpu_from_label("8x A100 PCIe").unwrap().1, 1555.0);
        assert_eq!(gpu_memory_gb_from_label("8x A100 PCIe"), Some(80.0));
        assert_eq!(gpu_memory_gb_from_label("RTX 6000 Ada"), Some(48.0));
        assert_eq!(gpu_from_label("Tesla T4"), None);
        assert_eq!(gpu_memory_gb_from_label("Tesla T4"), Some(16.0));
        assert_eq!(
            GpuProduct::from_label("H20 and H100"),
            Some(GpuProduct::H20)
        );
        for p in [
            GpuProduct::B200,
            GpuProduct::A100_PCIE,
            GpuProduct::RTX_2000_ADA,
        ] {
            assert!(p.arch().is_some() && p.memory_gbps().is_some(), "{p:?}");
        }
        // A review's nvidia-smi names: the workstation Ada cards by their
        // number (each had the RTX 4090's 1,008 GB/s and 48 GB), the
        // H20-3e's HBM3e, V100S, P100 12GB, 3090 Ti; laptop GPUs are
        // other chips.
        for (label, gbps, gb) in [
            ("NVIDIA RTX 6000 Ada Generation", 960.0, 48.0),
            ("NVIDIA RTX 5880 Ada Generation", 960.0, 48.0),
            ("NVIDIA RTX 5000 Ada Generation", 576.0, 32.0),
            ("NVIDIA RTX 4500 Ada Generation", 432.0, 24.0),
            ("NVIDIA RTX 4000 Ada Generation", 360.0, 20.0),
            ("NVIDIA RTX 4000 SFF Ada Generation", 280.0, 20.0),
            ("NVIDIA RTX 2000 Ada Generation", 224.0, 16.0),
            ("NVIDIA H20-3e", 4800.0, 141.0),
            ("NVIDIA H20", 4000.0, 96.0),
            ("Tesla V100S-PCIE-32GB", 1134.0, 32.0),
            ("Tesla P100-PCIE-12GB", 549.0, 12.0),
            ("Tesla P100-PCIE-16GB", 732.0, 16.0),
            ("NVIDIA GeForce RTX 3090 Ti", 1008.0, 24.0),
            ("NVIDIA GeForce RTX 3090", 936.0, 24.0),
        ] {
            assert_eq!(gpu_from_label(label).map(|g| g.1), Some(gbps), "{label}");
            assert_eq!(gpu_memory_gb_from_label(label), Some(gb), "{label}");
        }
        assert_eq!(gpu_from_label("NVIDIA GeForce RTX 4090 Laptop GPU"), None);
        assert_eq!(
            gpu_from_label("NVIDIA RTX 3500 Ada Generation Laptop GPU"),
            None
        );
        assert_eq!(gpu_memory_gb_from_label("NVIDIA T4G"), Some(16.0));
        assert_eq!(cpu_memory_from_label("Xeon Platinum 8480C"), Some(307.2));
        assert_eq!(cpu_memory_from_label("EPYC 7742"), Some(204.8));
        assert!((cpu_memory_from_label("Core i9-13900K").unwrap() - 89.6).abs() < 1e-9);
        // One core's read: the presets' CPUs and discovery's names.
        for (label, gbps) in [
            ("Xeon E5-2698 v4", Some(11.18)),
            ("Intel(R) Xeon(R) CPU E5-2698 v4 @ 2.20GHz", Some(11.18)),
            ("Xeon Platinum 8168", Some(10.88)),
            ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", Some(12.96)),
            ("Xeon (Ice Lake-SP)", Some(15.37)),
            ("Xeon Platinum 8480C", Some(14.49)),
            ("Intel(R) Xeon(R) Platinum 8470", Some(14.49)),
            ("Xeon Platinum 8570", Some(18.5)),
            ("EPYC 7742", Some(21.77)),
            ("AMD EPYC 7763 64-Core Processor", None),
            ("AMD EPYC 7402P", Some(21.77)),
            ("AMD EPYC 7H12", Some(21.77)),
            ("AMD EPYC Rome", Some(21.77)),
            ("Xeon with 1 TB DDR4-3200", None),
            ("Xeon and 2x RTX 4500 Ada", None),
            ("AMD EPYC 9654", None),
            ("Xeon E5-2698 v3", Some(8.93)),
            ("Intel(R) Xeon(R) CPU E5-2680 0 @ 2.70GHz", Some(12.30)),
            ("Xeon E5-2690v2", Some(15.68)),
            ("AMD EPYC 7451 24-Core Processor", Some(21.58)),
            ("2xEPYC 7742", Some(21.77)),
            ("Intel Xeon Gold 6248R", Some(12.96)),
            ("Xeon Platinum 8380", Some(15.37)),
            ("Intel Xeon Platinum 8468", Some(14.49)),
            ("Xeon Gold 5512U", Some(18.5)),
            ("Xeon Max 9480", None),
            ("Xeon W-2295", None),
            ("Grace", None),
            ("Core i9-13900K", None),
            ("Intel(R) Core(TM) i9-13900K", None),
        ] {
            assert_eq!(cpu_core_read_gbps_from_label(label), gbps, "{label}");
        }
    }

    /// Memory and one core's read come from one family: a part named by
    /// its number alone gets its generation's memory (a Gold 6248 was
    /// given the 204.8 default beside Cascade Lake's one-core figure).
    #[test]
    fn cpu_families_from_labels() {
        use CpuFamily::*;
        for (label, family) in [
            ("Xeon E5-2698 v4", Some(BroadwellEp)),
            (
                "Intel(R) Xeon(R) CPU E5-2698 v4 @ 2.20GHz",
                Some(BroadwellEp),
            ),
            ("Xeon E5-2680 v3", Some(HaswellEp)),
            ("Xeon E5-4650 v2", Some(IvyBridgeEp)),
            ("Xeon Platinum 8168", Some(SkylakeSp)),
            ("Platinum 8168", Some(SkylakeSp)),
            (
                "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
                Some(CascadeLakeSp),
            ),
            ("Xeon Platinum 8280L", Some(CascadeLakeSp)),
            ("Xeon (Ice Lake-SP)", Some(IceLakeSp)),
            ("Intel Xeon 6338", Some(IceLakeSp)),
            ("Xeon Platinum 8480C", Some(SapphireRapids)),
            ("Intel(R) Xeon(R) Platinum 8480+", Some(SapphireRapids)),
            ("Xeon Platinum 8570", Some(EmeraldRapids)),
            ("AMD EPYC 7601", Some(EpycNaples)),
            ("EPYC 7742", Some(EpycRome)),
            ("AMD EPYC 7763 64-Core Processor", Some(EpycMilan)),
            ("EPYC Milan", Some(EpycMilan)),
            ("AMD EPYC 9654 96-Core Processor", Some(EpycGenoa)),
            ("AMD EPYC 9755", None),
            ("Grace", Some(Grace)),
            ("Core i9-13900K", Some(RaptorLake)),
            ("Intel(R) Core(TM) i9-14900KF", Some(RaptorLake)),
            ("Core i7-13700K", None),
            ("Xeon with 1 TB DDR4-3200", None),
            ("Z80", None),
            // A review's names from lscpu and cloud instances: Cooper
            // Lake's H parts, the workstation W-3000 (the w-3500 a
            // Sapphire Rapids refresh), Xeon 6 (no tier, P or E suffix)
            // and HBM-only EPYC none of the table's, client Skylake and
            // laptop i9s neither.
            (
                "Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz",
                Some(CooperLake),
            ),
            (
                "Intel(R) Xeon(R) Gold 6348H CPU @ 2.30GHz",
                Some(CooperLake),
            ),
            ("Intel(R) Xeon(R) Platinum 8376HL", Some(CooperLake)),
            (
                "Intel(R) Xeon(R) Platinum 8358P CPU @ 2.60GHz",
                Some(IceLakeSp),
            ),
            ("Intel(R) Xeon(R) w9-3595X", Some(SapphireRapids)),
            ("Intel(R) Xeon(R) w9-3495X", Some(SapphireRapids)),
            ("Intel(R) Xeon(R) W-3275 CPU @ 2.50GHz", Some(CascadeLakeSp)),
            ("Intel(R) Xeon(R) W-3375 CPU @ 2.50GHz", Some(IceLakeSp)),
            ("Intel(R) Xeon(R) Bronze 3508U", Some(EmeraldRapids)),
            ("Intel(R) Xeon(R) 6530P", None),
            ("Intel(R) Xeon(R) 6980P", None),
            ("Intel(R) Xeon(R) 6375P-C", None),
            ("Intel(R) Xeon(R) 6325P", None),
            ("Intel(R) Xeon(R) 6780E", None),
            ("Intel(R) Xeon(R) Gold 6530", Some(EmeraldRapids)),
            // A watt figure is no workstation tier.
            ("Intel Xeon 6338, 205 W, 3 UPI links", Some(IceLakeSp)),
            ("Intel Core Processor (Skylake, IBRS)", None),
            ("Intel Xeon Processor (Skylake, IBRS)", Some(SkylakeSp)),
            ("Cooper Lake-SP", Some(CooperLake)),
            ("AMD EPYC 9V64H 88-Core Processor", None),
            ("AMD EPYC 9V84 96-Core Processor", Some(EpycGenoa)),
            ("13th Gen Intel(R) Core(TM) i9-13900HX", None),
            ("13th Gen Intel(R) Core(TM) i9-13900KS", Some(RaptorLake)),
            ("Intel(R) Core(TM) i9-14900", Some(RaptorLake)),
        ] {
            assert_eq!(CpuFamily::from_label(label), family, "{label}");
        }
        let mem = |l: &str| cpu_memory_from_label(l).unwrap();
        assert!((mem("Xeon Gold 6248") - 140.784).abs() < 1e-9);
        assert!((mem("AMD EPYC 9654") - 460.8).abs() < 1e-9);
        assert!((mem("AMD EPYC 7601") - 170.624).abs() < 1e-9);
        assert_eq!(mem("Xeon Platinum 8380"), 204.8);
        assert!(CpuFamily::RaptorLake.is_desktop() && !CpuFamily::EpycRome.is_desktop());
    }
}
