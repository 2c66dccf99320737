//! The `llm-warden` binary: `serve`, `chat`, `inspect`, the client
//! subcommands and `worker`. Everything is the library's `cli` module, so
//! the binary is an embedding application like any other.

fn main() -> std::process::ExitCode {
    llm_warden::cli::main()
}
