//! No orphans on Windows: every child is put in the warden's one job object,
//! created with kill-on-close. Windows closes a process's handles when it
//! ends, however it ends (a crash, `taskkill /F`, a power-user's End Task),
//! and closing the last handle to such a job kills every process in it: the
//! counterpart of Linux's parent-death signal (`process::command`). The
//! handle is never closed while the warden lives.
//!
//! A child is assigned right after `CreateProcess` returns: a warden killed
//! in between leaves that one child running (tokio's `Command` cannot start
//! it suspended). Assigning can fail (a parent job that forbids breakaway
//! and nesting, before Windows 8): said once per child, never a failed load.
//!
//! Type-checked here (`scripts/cross-check.sh`); never run on Windows.

use std::sync::OnceLock;

use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JobObjectExtendedLimitInformation, SetInformationJobObject,
};

/// The job's handle, shared by every spawning thread.
struct Job(HANDLE);

// SAFETY: a job handle is a kernel object reference; the calls made with it
// (AssignProcessToJobObject) are safe from any thread.
unsafe impl Send for Job {}
// SAFETY: as above: the handle is only read.
unsafe impl Sync for Job {}

static JOB: OnceLock<Option<Job>> = OnceLock::new();

/// The warden's kill-on-close job, created at the first spawn.
fn job() -> Option<HANDLE> {
    JOB.get_or_init(|| {
        // SAFETY: no security attributes and no name: an anonymous job.
        let h = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if h.is_null() {
            tracing::warn!(
                "could not create a job object ({}): a model server may outlive a warden that is killed",
                std::io::Error::last_os_error()
            );
            return None;
        }
        // SAFETY: an all-zero JOBOBJECT_EXTENDED_LIMIT_INFORMATION is a
        // valid value (plain integers); only the limit flag is set.
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: `info` is the struct this information class reads, and
        // its size is given.
        let ok = unsafe {
            SetInformationJobObject(
                h,
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        } != 0;
        if !ok {
            tracing::warn!(
                "could not make the job kill its processes on close ({}): a model server may outlive a warden that is killed",
                std::io::Error::last_os_error()
            );
        }
        ok.then_some(Job(h))
    })
    .as_ref()
    .map(|j| j.0)
}

/// Puts the child process `process` (its handle) in the warden's job;
/// `false` (said once here) when it could not.
pub fn adopt(process: HANDLE, pid: u32) -> bool {
    let Some(job) = job() else { return false };
    // SAFETY: both handles are valid: the job lives as long as the warden,
    // and `process` is the just-spawned child's, owned by its `Child`.
    let ok = unsafe { AssignProcessToJobObject(job, process) } != 0;
    if !ok {
        tracing::warn!(
            pid,
            "could not put the model server in the warden's job ({}): it may outlive a warden that is killed",
            std::io::Error::last_os_error()
        );
    }
    ok
}
