//! What rpc-server says of itself at start: its RPC protocol version and its
//! devices, in its order. Pure: the supervisor hands in the captured lines.
//!
//! rpc-server (b10883) prints, once it accepted its first connection (its
//! stdout is block-buffered into our pipe, and the first `accept` flushes it):
//!
//! ```text
//! Starting RPC server v6.0.0
//!   endpoint       : 127.0.0.1:50161
//!   local cache    : n/a
//! Devices:
//!   CPU: Intel(R) Xeon(R) Processor (24152 MiB, 24152 MiB free)
//!   transport      : TCP
//! Accepted client connection
//! ```
//!
//! Its CPU figures are the host's physical RAM, not a cgroup's limit: the
//! worker reports memory itself (`devices`) and keeps only the names here.

use crate::rpc::status::DeviceKind;

/// The line rpc-server prints for every connection it accepts: the proof
/// that a connect reached *our* child and not another listener on the port.
pub const ACCEPTED_LINE: &str = "Accepted client connection";

/// One device as rpc-server announced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BannerDevice {
    /// Its ggml name (`CPU`, `CUDA0`).
    pub name: String,
    /// `None` for a backend the status has no kind for (Vulkan, Metal).
    pub kind: Option<DeviceKind>,
    /// The memory rpc-server saw, MiB (the fallback when NVML cannot say).
    pub total_mib: u64,
    /// Free when it started, MiB.
    pub free_mib: u64,
}

/// The RPC protocol version (`6.0.0`) from the `Starting RPC server` line.
pub fn protocol(lines: &[String]) -> Option<String> {
    lines.iter().find_map(|l| {
        let v = l.trim().strip_prefix("Starting RPC server v")?.trim();
        let ok = !v.is_empty()
            && v.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        ok.then(|| v.to_string())
    })
}

/// The devices listed under `Devices:`, in order (the order llama-server's
/// `--tensor-split` numbers them in).
pub fn devices(lines: &[String]) -> Vec<BannerDevice> {
    lines
        .iter()
        .skip_while(|l| l.trim() != "Devices:")
        .skip(1)
        .map_while(|l| device_line(l))
        .collect()
}

/// `  CUDA0: NVIDIA H200 (143156 MiB, 142564 MiB free)`, or `None` for any
/// other line (the `transport : TCP` line that ends the list).
fn device_line(line: &str) -> Option<BannerDevice> {
    let (name, rest) = line.trim().split_once(": ")?;
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mem = rest.strip_suffix(')')?.rsplit_once(" (")?.1;
    let (total, free) = mem.split_once(", ")?;
    let mib = |s: &str| s.trim().strip_suffix(" MiB")?.trim().parse::<u64>().ok();
    Some(BannerDevice {
        name: name.to_string(),
        kind: kind_of(name),
        total_mib: mib(total)?,
        free_mib: mib(free.trim().strip_suffix(" free")?)?,
    })
}

/// `CPU` is host RAM, `CUDA<n>` a GPU; other backends have no kind here.
fn kind_of(name: &str) -> Option<DeviceKind> {
    if name == "CPU" {
        return Some(DeviceKind::Cpu);
    }
    let n = name.strip_prefix("CUDA")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(DeviceKind::Cuda)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    /// What b10883's CPU build printed here (measured).
    const CPU_BANNER: &str = "Starting RPC server v6.0.0
  endpoint       : 127.0.0.1:50161
  local cache    : n/a
Devices:
  CPU: Intel(R) Xeon(R) Processor (24152 MiB, 24152 MiB free)
  transport      : TCP
Accepted client connection
Client connection closed";

    #[test]
    fn protocol_rows() {
        let rows: &[(&str, Option<&str>)] = &[
            (CPU_BANNER, Some("6.0.0")),
            // why: nothing printed yet (the banner comes with the first accept)
            ("", None),
            // why: a version that is not dotted numbers is not trusted
            ("Starting RPC server vX", None),
            ("Starting RPC server v", None),
            // why: a later protocol, surrounding noise
            ("ggml: something\nStarting RPC server v7.1.0\n", Some("7.1.0")),
        ];
        for (i, (text, want)) in rows.iter().enumerate() {
            assert_eq!(protocol(&lines(text)).as_deref(), *want, "row {i}: {text:?}");
        }
    }

    #[test]
    fn device_rows() {
        let cpu = |total, free| BannerDevice {
            name: "CPU".into(),
            kind: Some(DeviceKind::Cpu),
            total_mib: total,
            free_mib: free,
        };
        let cuda = |n: u32, total, free| BannerDevice {
            name: format!("CUDA{n}"),
            kind: Some(DeviceKind::Cuda),
            total_mib: total,
            free_mib: free,
        };
        let rows: Vec<(&str, Vec<BannerDevice>)> = vec![
            (CPU_BANNER, vec![cpu(24152, 24152)]),
            // why: a CUDA build lists its GPUs first, in CUDA's order, then the CPU
            (
                "Devices:\n  CUDA0: NVIDIA H200 (143156 MiB, 142564 MiB free)\n  CUDA1: NVIDIA H200 (143156 MiB, 100 MiB free)\n  CPU: AMD EPYC (1000 MiB, 900 MiB free)\n  transport      : TCP",
                vec![cuda(0, 143156, 142564), cuda(1, 143156, 100), cpu(1000, 900)],
            ),
            // why: a product name with its own parentheses and colons
            (
                "Devices:\n  CPU: Foo (R) CPU: v2 (8 MiB, 4 MiB free)\n",
                vec![BannerDevice {
                    name: "CPU".into(),
                    kind: Some(DeviceKind::Cpu),
                    total_mib: 8,
                    free_mib: 4,
                }],
            ),
            // why: a backend the status has no kind for keeps its place
            (
                "Devices:\n  Vulkan0: Some GPU (10 MiB, 5 MiB free)\n  CPU: X (8 MiB, 4 MiB free)\n",
                vec![
                    BannerDevice {
                        name: "Vulkan0".into(),
                        kind: None,
                        total_mib: 10,
                        free_mib: 5,
                    },
                    cpu(8, 4),
                ],
            ),
            // why: no banner yet
            ("Starting RPC server v6.0.0\n", vec![]),
            // why: the endpoint line above `Devices:` is not a device
            ("  endpoint       : 127.0.0.1:1 (1 MiB, 1 MiB free)\n", vec![]),
        ];
        for (i, (text, want)) in rows.iter().enumerate() {
            assert_eq!(&devices(&lines(text)), want, "row {i}: {text:?}");
        }
    }
}
