//! `fake-llama-server`: the test double of llama-server as a process
//! (`llm_warden::child::fake::process`), for the crate's own tests.

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    llm_warden::child::fake::process::main()
}

#[cfg(not(unix))]
fn main() -> std::process::ExitCode {
    eprintln!("the fake llama-server runs as a process on Unix only");
    std::process::ExitCode::FAILURE
}
