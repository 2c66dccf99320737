//! The Windows GPU memory of the child through PDH: `\GPU Process
//! Memory(pid_<pid>_*)\Dedicated Usage` and `Shared Usage`, one instance
//! per adapter, read on the adapter that holds most of the child's memory.
//! What is made of PDH's answer (the path, the child's instances, the
//! adapter: `vram::process_counter_path`, `vram::process_usage`) is tested
//! on Linux with recorded instance names; this file is the calls alone.
//! Type-checked here (`scripts/cross-check.sh`); never run on Windows.

use windows_sys::Win32::System::Performance::{
    PDH_FMT_COUNTERVALUE_ITEM_W, PDH_FMT_LARGE, PdhAddEnglishCounterW, PdhCloseQuery, PdhCollectQueryData,
    PdhGetFormattedCounterArrayW, PdhOpenQueryW,
};

use super::vram::VramProvider;

/// PDH's "more data" status.
const PDH_MORE_DATA: u32 = 0x800007D2;

/// Reads `\GPU Process Memory(pid_<pid>*)\Shared Usage`.
#[derive(Debug, Default)]
pub struct PdhVram;

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

impl VramProvider for PdhVram {
    fn usage(&mut self, pid: u32) -> Result<super::vram::AdapterUsage, String> {
        let dedicated = instances(pid, "Dedicated Usage")?;
        let shared = instances(pid, "Shared Usage")?;
        super::vram::process_usage(pid, &dedicated, &shared).ok_or_else(|| "the child has no GPU Process Memory instance".into())
    }
}

/// `\GPU Process Memory(pid_<pid>_*)\<counter>` per instance: its name
/// (`pid_<pid>_luid_<high>_<low>_phys_<n>`: one per adapter) and bytes, as
/// PDH formats them (signed).
fn instances(pid: u32, counter_name: &str) -> Result<Vec<(String, i64)>, String> {
    let path = wide(&super::vram::process_counter_path(pid, counter_name));
    // SAFETY: every handle is created and closed here; buffers are sized
    // by PDH's own first call, and each item's name points into that buffer.
    unsafe {
        let mut query = std::mem::zeroed();
        if PdhOpenQueryW(std::ptr::null(), 0, &mut query) != 0 {
            return Err("PdhOpenQuery failed".into());
        }
        let mut counter = std::mem::zeroed();
        let result = (|| {
            if PdhAddEnglishCounterW(query, path.as_ptr(), 0, &mut counter) != 0 {
                return Err(format!("no GPU Process Memory {counter_name} counter for the child"));
            }
            if PdhCollectQueryData(query) != 0 {
                return Err("PdhCollectQueryData failed".into());
            }
            let (mut size, mut count) = (0u32, 0u32);
            let rc = PdhGetFormattedCounterArrayW(counter, PDH_FMT_LARGE, &mut size, &mut count, std::ptr::null_mut());
            if rc != PDH_MORE_DATA {
                return Err("the child has no GPU Process Memory instance".into());
            }
            // u64 words: the items' alignment.
            let mut buf = vec![0u64; (size as usize).div_ceil(8)];
            let items = buf.as_mut_ptr() as *mut PDH_FMT_COUNTERVALUE_ITEM_W;
            if PdhGetFormattedCounterArrayW(counter, PDH_FMT_LARGE, &mut size, &mut count, items) != 0 {
                return Err("PdhGetFormattedCounterArray failed".into());
            }
            let mut out = Vec::with_capacity(count as usize);
            for i in 0..count as usize {
                let item = &*items.add(i);
                let mut len = 0;
                while *item.szName.add(len) != 0 {
                    len += 1;
                }
                let name = String::from_utf16_lossy(std::slice::from_raw_parts(item.szName, len));
                out.push((name, item.FmtValue.Anonymous.largeValue));
            }
            Ok(out)
        })();
        PdhCloseQuery(query);
        result
    }
}
