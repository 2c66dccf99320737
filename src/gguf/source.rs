//! A buffered, position-tracking, bounds-checking byte source over a GGUF
//! file: every length is checked against the bytes left before anything is
//! read or allocated, and skipped data is seeked over, never read.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::error::GgufError;

/// Buffer size of the reader: big enough that a header is a handful of
/// `read` calls, small enough that it never pulls in much tensor data.
pub const BUF_SIZE: usize = 64 * 1024;

/// The longest string `skip_strings_seen` shows its visitor.
pub const SEEN_MAX: u64 = 64;

/// A reader that counts the bytes it hands out, so tests (and callers) can
/// prove a header read never touches the tensor data.
#[derive(Debug)]
pub struct Counted<R> {
    /// The wrapped file.
    inner: R,
    /// Bytes returned by `read` so far.
    bytes: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

impl<R: Seek> Seek for Counted<R> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// The byte source the header parser reads from.
#[derive(Debug)]
pub struct Source<'p> {
    /// The file, buffered.
    reader: BufReader<Counted<File>>,
    /// The file's path, for errors.
    pub path: &'p Path,
    /// Current offset from the start of the file.
    pub pos: u64,
    /// The file's size, fixed when it was opened.
    pub size: u64,
}

impl<'p> Source<'p> {
    /// Opens `path` and checks it is a non-empty regular file.
    pub fn open(path: &'p Path) -> Result<Self, GgufError> {
        let file = File::open(path).map_err(|e| GgufError::from_io(path, 0, e))?;
        let meta = file.metadata().map_err(|e| GgufError::from_io(path, 0, e))?;
        if !meta.is_file() {
            return Err(GgufError::Unreadable {
                path: path.to_path_buf(),
                reason: "not a regular file".to_string(),
            });
        }
        if meta.len() == 0 {
            return Err(GgufError::Empty {
                path: path.to_path_buf(),
            });
        }
        let counted = Counted { inner: file, bytes: 0 };
        Ok(Source {
            reader: BufReader::with_capacity(BUF_SIZE, counted),
            path,
            pos: 0,
            size: meta.len(),
        })
    }

    /// Bytes actually read from the file so far (buffer fills included).
    pub fn bytes_read(&self) -> u64 {
        self.reader.get_ref().bytes
    }

    /// Bytes left between the current position and the end of the file.
    pub fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.pos)
    }

    /// A [`GgufError::Truncated`] at the current position.
    pub fn truncated(&self, reason: impl Into<String>) -> GgufError {
        GgufError::Truncated {
            path: self.path.to_path_buf(),
            offset: self.pos,
            reason: reason.into(),
        }
    }

    /// A [`GgufError::Invalid`] for this file.
    pub fn invalid(&self, reason: impl Into<String>) -> GgufError {
        GgufError::invalid(self.path, reason)
    }

    /// Fails with `gguf_truncated` unless `n` more bytes exist; `what` names
    /// the record for the message.
    pub fn need(&self, n: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(format!("{} needs {n} bytes, {} remain", what(), self.remaining())));
        }
        Ok(())
    }

    /// Fills `buf` exactly, after checking the bytes exist.
    pub fn read_exact(&mut self, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<(), GgufError> {
        self.need(buf.len() as u64, what)?;
        self.reader
            .read_exact(buf)
            .map_err(|e| GgufError::from_io(self.path, self.pos, e))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// Reads a little-endian `u32`.
    pub fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a little-endian `u64`.
    pub fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        let mut b = [0u8; 8];
        self.read_exact(&mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Moves forward `n` bytes without reading them (within the buffer when
    /// they are there, by a seek otherwise), after checking they exist.
    pub fn skip(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        self.need(n, what)?;
        // `need` proved n <= remaining <= file size; a file over i64::MAX
        // bytes cannot exist, so the conversion only fails on a broken OS.
        let delta = i64::try_from(n).map_err(|_| self.invalid("skip beyond i64 range"))?;
        self.reader
            .seek_relative(delta)
            .map_err(|e| GgufError::from_io(self.path, self.pos, e))?;
        self.pos += n;
        Ok(())
    }

    /// Reads a GGUF string length and checks it: over `cap` is
    /// `gguf_invalid` (absurd), past the end of the file is `gguf_truncated`.
    pub fn string_len(&mut self, cap: u64, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        let len = self.u64(what)?;
        if len > cap {
            return Err(self.invalid(format!("{} has length {len}, over the limit of {cap}", what())));
        }
        self.need(len, what)?;
        Ok(len)
    }

    /// Reads a GGUF string of at most `cap` bytes into `buf` (reused by the
    /// caller, so a header of many keys allocates once).
    pub fn string_into(&mut self, buf: &mut Vec<u8>, cap: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        let len = self.string_len(cap, what)?;
        // len <= cap, and every cap used is far below usize::MAX.
        buf.resize(len as usize, 0);
        self.read_exact(buf, what)
    }

    /// Seeks over `count` GGUF strings of at most `cap` bytes each. Whole
    /// strings inside the buffer are stepped over in a tight loop (a 262k
    /// entry vocabulary costs about a millisecond); a string that straddles
    /// the buffer end goes through the checked slow path.
    pub fn skip_strings(&mut self, count: u64, cap: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        self.skip_strings_seen(count, cap, what, &mut |_| {})
    }

    /// As `skip_strings`, showing `seen` every string of at most
    /// `SEEN_MAX` bytes on the way (a vocabulary scanned for a few special
    /// tokens' texts without keeping it); longer ones are stepped over.
    pub fn skip_strings_seen(
        &mut self,
        mut count: u64,
        cap: u64,
        what: &dyn Fn() -> String,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Result<(), GgufError> {
        while count > 0 {
            let buf = self
                .reader
                .fill_buf()
                .map_err(|e| GgufError::from_io(self.path, self.pos, e))?;
            let mut off = 0usize;
            while count > 0 && buf.len() - off >= 8 {
                let mut len = [0u8; 8];
                len.copy_from_slice(&buf[off..off + 8]);
                let len = u64::from_le_bytes(len);
                if len > cap || len > (buf.len() - off - 8) as u64 {
                    break;
                }
                // len fits in the buffer, so in usize.
                let end = off + 8 + len as usize;
                if len <= SEEN_MAX {
                    seen(&buf[off + 8..end]);
                }
                off = end;
                count -= 1;
            }
            if off > 0 {
                self.reader.consume(off);
                self.pos += off as u64;
            } else {
                // The next string straddles the buffer end, is over the cap,
                // or the file ends: the checked path reports or handles it.
                let len = self.string_len(cap, what)?;
                if len <= SEEN_MAX {
                    let mut b = [0u8; SEEN_MAX as usize];
                    // len <= SEEN_MAX.
                    let b = &mut b[..len as usize];
                    self.read_exact(b, what)?;
                    seen(b);
                } else {
                    self.skip(len, what)?;
                }
                count -= 1;
            }
        }
        Ok(())
    }
}
