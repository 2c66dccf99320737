//! The Windows spill gauge through PDH. Kept minimal and isolated: it
//! cannot be compiled on the Linux machines the rest is tested on.

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
    fn shared_bytes(&mut self, pid: u32) -> Result<u64, String> {
        let path = wide(&format!("\\GPU Process Memory(pid_{pid}_*)\\Shared Usage"));
        // SAFETY: every handle is created and closed here; buffers are sized
        // by PDH's own first call.
        unsafe {
            let mut query = std::mem::zeroed();
            if PdhOpenQueryW(std::ptr::null(), 0, &mut query) != 0 {
                return Err("PdhOpenQuery failed".into());
            }
            let mut counter = std::mem::zeroed();
            let result = (|| {
                if PdhAddEnglishCounterW(query, path.as_ptr(), 0, &mut counter) != 0 {
                    return Err("no GPU Process Memory counter for the child".to_string());
                }
                if PdhCollectQueryData(query) != 0 {
                    return Err("PdhCollectQueryData failed".into());
                }
                let (mut size, mut count) = (0u32, 0u32);
                let rc =
                    PdhGetFormattedCounterArrayW(counter, PDH_FMT_LARGE, &mut size, &mut count, std::ptr::null_mut());
                if rc != PDH_MORE_DATA {
                    return Err("the child has no GPU Process Memory instance".into());
                }
                let mut buf = vec![0u8; size as usize];
                let items = buf.as_mut_ptr() as *mut PDH_FMT_COUNTERVALUE_ITEM_W;
                if PdhGetFormattedCounterArrayW(counter, PDH_FMT_LARGE, &mut size, &mut count, items) != 0 {
                    return Err("PdhGetFormattedCounterArray failed".into());
                }
                let mut total: i64 = 0;
                for i in 0..count as usize {
                    total += (*items.add(i)).FmtValue.Anonymous.largeValue;
                }
                Ok(total.max(0) as u64)
            })();
            PdhCloseQuery(query);
            result
        }
    }
}
