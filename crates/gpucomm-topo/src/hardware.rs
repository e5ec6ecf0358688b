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

/// GPU architecture and device memory bandwidth (GB/s) from a product name
/// (`"NVIDIA H100 80GB HBM3"`, `"Tesla V100-SXM2-16GB"`); `None` for a GPU
/// not in the table. Figures: [`gpu_memory`]. Models are matched as words
/// of the name, so an "RTX A4000" is no A40 and an "RTX A1000" no A100.
///
/// ```
/// use gpucomm_topo::{GpuArch, hardware::gpu_from_label};
/// assert_eq!(gpu_from_label("NVIDIA H100 80GB HBM3"), Some((GpuArch::Hopper, 3350.0)));
/// assert_eq!(gpu_from_label("Voodoo 3"), None);
/// assert_eq!(gpu_from_label("NVIDIA RTX A4000"), None);
/// ```
pub fn gpu_from_label(label: &str) -> Option<(GpuArch, f64)> {
    use gpu_memory as m;
    let l = label.to_ascii_uppercase();
    let w = words(label);
    let is = |model: &str| names_model(&w, model);
    Some(if is("B200") || is("GB200") || is("B100") {
        // The B100's HBM3e runs at the B200's 8 TB/s.
        (GpuArch::Blackwell, m::B200)
    } else if is("GH200") {
        let hbm3e = l.contains("144") || l.contains("HBM3E") || l.contains("624");
        (
            GpuArch::Hopper,
            if hbm3e { m::GH200_144GB } else { m::GH200_96GB },
        )
    } else if is("H200") {
        (GpuArch::Hopper, m::H200)
    } else if is("H20") {
        (GpuArch::Hopper, m::H20)
    } else if is("H100") || is("H800") {
        let bw = if l.contains("NVL") {
            m::H100_NVL
        } else if l.contains("PCIE") {
            m::H100_PCIE
        } else {
            m::H100_SXM
        };
        (GpuArch::Hopper, bw)
    } else if is("A100") || is("A800") {
        // The memory size the name states, as a word ("80GB", "80 GB"):
        // "80" anywhere in it matched the A800's own number, and gave an
        // "A800 40GB" the 80 GB part's 2,039 GB/s.
        let bw = match stated_gb(&w) {
            Some(80) if l.contains("PCIE") => m::A100_80GB_PCIE,
            Some(80) => m::A100_80GB_SXM,
            Some(40) => m::A100_40GB,
            _ if l.contains("PCIE") => m::A100_40GB,
            _ => m::A100_80GB_SXM,
        };
        (GpuArch::Ampere, bw)
    } else if is("V100") {
        (GpuArch::Volta, m::V100)
    } else if is("P100") {
        (GpuArch::Pascal, m::P100)
    } else if is("A30") {
        // GA100, as the A100: sm_80.
        (GpuArch::Ampere, m::A30)
    } else if is("L40") {
        (GpuArch::Ada, m::L40)
    } else if w.iter().any(|x| x == "L4") {
        (GpuArch::Ada, m::L4)
    } else if is("4090") || w.iter().any(|x| x == "ADA") {
        // "Ada" as a word: "RTX 6000 Ada", not "adapter" nor "adaptive".
        (GpuArch::Ada, m::RTX_4090)
    } else if is("A40") {
        // Consumer Ampere (GA102, sm_86) is GpuArch::Ada's.
        (GpuArch::Ada, m::A40)
    } else if is("A6000") {
        (GpuArch::Ada, m::RTX_A6000)
    } else if is("A10") {
        (GpuArch::Ada, m::A10)
    } else if is("3090") {
        (GpuArch::Ada, m::RTX_3090)
    } else {
        return None;
    })
}

/// Device memory of a GPU, GB (1e9 bytes), from its product name: the size
/// the name states ("A100 SXM4 40GB", "NVIDIA H100 80GB HBM3",
/// "Tesla V100-SXM2-16GB"; a GH200's name states the superchip's memory
/// with its CPU's, "GH200 480GB", so its GPU's is the HBM: 96 GB HBM3, 144
/// GB HBM3e), else the largest the product was made with (NVIDIA
/// datasheets: B200 180, the B200 of a GB200 186, B100 192, H200 141, H20
/// 96, H100 NVL 94, H100 and H800 80, A100 and A800 80, V100 32, P100 16,
/// L40S, L40, A40 and RTX A6000 48, RTX 4090 and 3090 24, A10 (A10G) and
/// A30 24, L4 24, T4 16), so that a check
/// against it never refuses what the GPU may hold; `None` for a GPU not in
/// the table. Models are matched as words of the name, as in
/// [`gpu_from_label`].
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
    let l = label.to_ascii_uppercase();
    let words = words(label);
    let is = |model: &str| names_model(&words, model);
    if is("GH200") {
        let hbm3e = l.contains("144") || l.contains("HBM3E") || l.contains("624");
        return Some(if hbm3e { 144.0 } else { 96.0 });
    }
    if let Some(n) = stated_gb(&words) {
        return Some(f64::from(n));
    }
    let word = |x: &str| words.iter().any(|w| w == x);
    Some(if is("GB200") {
        186.0
    } else if is("B200") {
        180.0
    } else if is("H200") {
        141.0
    } else if is("H100") && l.contains("NVL") {
        94.0
    } else if is("B100") {
        192.0
    } else if is("H20") {
        96.0
    } else if ["H100", "H800", "A100", "A800"].iter().any(|g| is(g)) {
        80.0
    } else if is("V100") {
        32.0
    } else if is("P100") {
        16.0
    } else if ["L40", "A40", "A6000"].iter().any(|g| is(g)) {
        48.0
    } else if ["4090", "3090", "A10", "A30"].iter().any(|g| is(g)) || word("L4") {
        24.0
    } else if word("T4") {
        16.0
    } else {
        return None;
    })
}

/// Host memory bandwidth per socket (GB/s) from a CPU model name; `None`
/// for a CPU not in the table (vendor datasheets: memory channels and
/// fastest supported DIMM speed).
///
/// ```
/// use gpucomm_topo::hardware::cpu_memory_from_label;
/// assert_eq!(cpu_memory_from_label("Xeon E5-2698 v4"), Some(76.8));
/// assert_eq!(cpu_memory_from_label("Z80"), None);
/// ```
pub fn cpu_memory_from_label(label: &str) -> Option<f64> {
    let l = label.to_ascii_uppercase();
    Some(if l.contains("E5-26") {
        ddr_gbps(4, 2400) // Broadwell-EP: 4 x DDR4-2400
    } else if l.contains("8570") || l.contains("EMERALD") {
        ddr_gbps(8, 5600) // Emerald Rapids: 8 x DDR5-5600
    } else if l.contains("8480") || l.contains("8468") || l.contains("SAPPHIRE") {
        ddr_gbps(8, 4800) // Sapphire Rapids: 8 x DDR5-4800
    } else if l.contains("8168") || l.contains("PLATINUM 81") {
        ddr_gbps(6, 2666) // Skylake-SP: 6 x DDR4-2666
    } else if l.contains("EPYC 7") || l.contains("ICE LAKE") {
        ddr_gbps(8, 3200) // EPYC 7002/7003, Ice Lake-SP: 8 x DDR4-3200
    } else if l.contains("GRACE") {
        500.0 // NVIDIA Grace datasheet: up to 500 GB/s LPDDR5X
    } else if l.contains("13900K") || l.contains("14900K") {
        ddr_gbps(2, 5600) // Intel ARK: 2 x DDR5-5600, 89.6 GB/s
    } else {
        return None;
    })
}

/// One core's streaming read bandwidth from DRAM (GB/s) from a CPU model
/// name: what a single thread's copy can pull, which on a server is
/// bounded by the cache misses one core keeps in flight (Little's law:
/// lines in flight x 64 B / memory latency), far below the socket's
/// memory bandwidth. `None` for a CPU with no published figure (desktop
/// parts among them, whose one core comes near half their two channels).
///
/// Figures: likwid-bench `load` on one core of a part of the same
/// microarchitecture (RRZE-HPC/kerncraft `examples/machine-files`:
/// `Zen2_EPYC-7452.yml` 21.77 for EPYC 7002; `SapphireRapids_Platinum-8470.yml`
/// 14.49 and `IcelakeSP_Platinum-8360Y.yml` 15.37, at commit ff9b17c;
/// `CascadelakeSP_Gold-6248_SNC.yml` 12.96; `SkylakeSP_Platinum-8147_2.7GHz.yml`,
/// a Platinum 8174 at 2.7 GHz, 10.88; `BroadwellEP_E5-2697v4_CoD.yml`
/// 11.18), and for Emerald Rapids a one-core streaming read of 8.8 B per
/// cycle at 2.1 GHz, 18.5, on a Xeon Gold 5512U with turbo off (a
/// published research log). These run at base clock and differ by part:
/// Skylake-SP's Gold 6148 gives 14.32, Broadwell's E5-2630 v4 7.98.
///
/// ```
/// use gpucomm_topo::hardware::cpu_core_read_gbps_from_label;
/// assert_eq!(cpu_core_read_gbps_from_label("AMD EPYC 7742 64-Core Processor"), Some(21.77));
/// assert_eq!(cpu_core_read_gbps_from_label("Core i9-13900K"), None);
/// ```
pub fn cpu_core_read_gbps_from_label(label: &str) -> Option<f64> {
    let l = label.to_ascii_uppercase();
    let w = words(label);
    // A Xeon Scalable part's number: "8480C" -> 8480 (its second digit
    // the generation: 1 Skylake, 2 Cascade Lake, 3 Ice Lake, 4 Sapphire
    // Rapids, 5 Emerald Rapids); an EPYC's last digit its generation.
    // The part's number follows "Xeon" and at most its tier ("Xeon
    // Platinum 8480C", "Xeon 6338"), not any number in the name ("DDR4-3200").
    let after = |name: &str, within: usize| {
        let k = w.iter().position(|x| x == name)?;
        w[k + 1..]
            .iter()
            .filter(|x| !matches!(x.as_str(), "R" | "TM"))
            .take(within)
            .find(|x| x.starts_with(|c: char| c.is_ascii_digit()))
    };
    let xeon_gen = after("XEON", 2).and_then(|x| {
        let d: String = x.chars().take_while(char::is_ascii_digit).collect();
        (d.len() == 4 && matches!(&d[..1], "3" | "4" | "5" | "6" | "8"))
            .then(|| d.as_bytes()[1] - b'0')
    });
    // EPYC 7002: "7742", "7402P", "7H12"; or named "Rome".
    let epyc_rome = after("EPYC", 1).is_some_and(|x| {
        let n: String = x.chars().take(4).collect();
        n.len() == 4 && n.starts_with('7') && n.ends_with('2')
    }) || l.contains("EPYC") && w.iter().any(|x| x == "ROME");
    Some(if l.contains("E5-26") && l.contains("V4") {
        11.18
    } else if epyc_rome {
        21.77
    } else if l.contains("EMERALD") || xeon_gen == Some(5) {
        18.5
    } else if l.contains("SAPPHIRE") || xeon_gen == Some(4) {
        14.49
    } else if l.contains("ICE LAKE") || xeon_gen == Some(3) {
        15.37
    } else if l.contains("CASCADE") || xeon_gen == Some(2) {
        12.96
    } else if l.contains("SKYLAKE") || xeon_gen == Some(1) {
        10.88
    } else {
        return None;
    })
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
            ("Xeon E5-2698 v3", None),
            ("Grace", None),
            ("Core i9-13900K", None),
            ("Intel(R) Core(TM) i9-13900K", None),
        ] {
            assert_eq!(cpu_core_read_gbps_from_label(label), gbps, "{label}");
        }
    }
}
