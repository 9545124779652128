//! An RDB snapshot as a member sends it to a replica doing a full sync,
//! taken without being a replica: `REPLCONF rdb-only 1` (Redis 7.0: the
//! snapshot only, no command stream after it), `REPLCONF capa eof`
//! (diskless: streamed from the member's memory, nothing written to its
//! data directory) and `SYNC`. Pure: [`Framing`] cuts the payload out of
//! the reply, [`Check`] follows it (size, SHA-256, the RDB's own CRC-64 and
//! its replication id and offset). The socket is in `take.rs`.

use sha2::{Digest, Sha256};

/// The length of the end marker of a diskless transfer (`$EOF:<marker>`).
const EOF_MARK_LEN: usize = 40;

/// What the reply to `SYNC` was found to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// An error reply (`-NOMASTERLINK ...`, `-NOAUTH ...`).
    Refused(String),
    /// Not a bulk transfer.
    Unexpected(String),
}

#[derive(Debug)]
enum State {
    /// Before the `$...` line: newlines (keep-alives while the member
    /// prepares the snapshot) and `+FULLRESYNC` are skipped.
    Preamble(Vec<u8>),
    /// A diskless transfer ending with the marker; the last
    /// [`EOF_MARK_LEN`] bytes are held back until more come.
    UntilMark {
        mark: Vec<u8>,
        held: Vec<u8>,
    },
    /// A transfer of a known length, with what is left.
    Sized {
        left: u64,
    },
    Done,
}

/// Cuts the RDB payload out of a `SYNC` reply fed in pieces.
#[derive(Debug)]
pub struct Framing {
    state: State,
}

impl Default for Framing {
    fn default() -> Self {
        Framing {
            state: State::Preamble(Vec::new()),
        }
    }
}

impl Framing {
    /// Feeds received bytes; returns the payload bytes they complete.
    pub fn feed(&mut self, mut input: &[u8]) -> Result<Vec<u8>, FramingError> {
        let mut out = Vec::new();
        while !input.is_empty() {
            match &mut self.state {
                State::Preamble(line) => {
                    let Some(end) = input.iter().position(|&b| b == b'\n') else {
                        line.extend_from_slice(input);
                        if line.len() > 1024 {
                            return Err(FramingError::Unexpected(lossy(line)));
                        }
                        return Ok(out);
                    };
                    line.extend_from_slice(&input[..end]);
                    input = &input[end + 1..];
                    let text = std::mem::take(line);
                    let text = text.strip_suffix(b"\r").unwrap_or(&text);
                    self.state = match text {
                        [] => State::Preamble(Vec::new()),
                        [b'+', ..] => State::Preamble(Vec::new()),
                        [b'-', rest @ ..] => return Err(FramingError::Refused(lossy(rest))),
                        [b'$', b'E', b'O', b'F', b':', mark @ ..] if mark.len() == EOF_MARK_LEN => {
                            State::UntilMark {
                                mark: mark.to_vec(),
                                held: Vec::new(),
                            }
                        }
                        [b'$', len @ ..] => match lossy(len).parse::<u64>() {
                            Ok(left) if left > 0 => State::Sized { left },
                            _ => return Err(FramingError::Unexpected(lossy(text))),
                        },
                        other => return Err(FramingError::Unexpected(lossy(other))),
                    };
                }
                State::UntilMark { mark, held } => {
                    held.extend_from_slice(input);
                    input = &[];
                    if held.len() >= EOF_MARK_LEN && held[held.len() - EOF_MARK_LEN..] == mark[..] {
                        held.truncate(held.len() - EOF_MARK_LEN);
                        out.append(held);
                        self.state = State::Done;
                    } else if held.len() > EOF_MARK_LEN {
                        let keep = held.split_off(held.len() - EOF_MARK_LEN);
                        out.append(held);
                        *held = keep;
                    }
                }
                State::Sized { left } => {
                    let take = input
                        .len()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    *left -= take as u64;
                    if *left == 0 {
                        self.state = State::Done;
                    }
                }
                State::Done => return Ok(out),
            }
        }
        Ok(out)
    }

    /// Whether the whole payload has been seen.
    pub fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a complete, checked snapshot is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub size: u64,
    /// Lower-case hex SHA-256 of the whole file.
    pub sha256: String,
    /// The RDB format version (`REDIS0010`: 10).
    pub version: u32,
    /// The replication id and offset the snapshot covers (the `repl-id`
    /// and `repl-offset` aux fields), when the member wrote them.
    pub repl_id: Option<String>,
    pub repl_offset: Option<i64>,
    /// The `redis-ver` aux field.
    pub redis_version: Option<String>,
}

/// Why a snapshot is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("not an RDB file (no REDIS header)")]
    NotRdb,
    #[error("the RDB file ends before its end marker")]
    Truncated,
    #[error("the RDB file's CRC-64 is {found:016x}, its contents give {computed:016x}")]
    Checksum { found: u64, computed: u64 },
}

/// Follows a snapshot as it streams: size, SHA-256, the RDB's CRC-64 (the
/// last 8 bytes, little-endian, over everything before them; 0 when the
/// member has `rdbchecksum no`), and the aux fields at its head.
pub struct Check {
    size: u64,
    sha: Sha256,
    crc: crc::Digest<'static, u64>,
    /// The last 9 bytes seen (the EOF opcode and the checksum, at the end).
    tail: Vec<u8>,
    /// The first bytes, until the aux fields are parsed.
    head: Vec<u8>,
    aux: Option<Aux>,
}

static CRC: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// How many bytes of the head are kept for the aux fields at most.
const HEAD_MAX: usize = 64 * 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Aux {
    version: u32,
    fields: Vec<(String, String)>,
}

impl Default for Check {
    fn default() -> Self {
        Check {
            size: 0,
            sha: Sha256::new(),
            crc: CRC.digest(),
            tail: Vec::new(),
            head: Vec::new(),
            aux: None,
        }
    }
}

impl Check {
    pub fn feed(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        self.sha.update(bytes);
        if self.aux.is_none() && self.head.len() < HEAD_MAX {
            self.head.extend_from_slice(bytes);
            if let Some(aux) = parse_aux(&self.head) {
                self.aux = Some(aux);
                self.head = Vec::new();
            }
        }
        // The CRC covers all but the last 8 bytes: hold 8 back.
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 9 {
            let spill = self.tail.len() - 9;
            // The 9th-from-last byte (EOF opcode) is covered by the CRC too,
            // so everything but the last 8 goes in.
            self.crc.update(&self.tail[..spill]);
            self.tail.drain(..spill);
        }
    }

    /// The snapshot, once the stream has ended.
    pub fn finish(self) -> Result<Snapshot, CheckError> {
        let aux = match self.aux {
            Some(a) => a,
            None => parse_header(&self.head)
                .ok_or(CheckError::NotRdb)
                .map(|version| Aux {
                    version,
                    fields: Vec::new(),
                })?,
        };
        if self.tail.len() < 9 || self.tail[0] != 0xFF {
            return Err(CheckError::Truncated);
        }
        let mut crc = self.crc;
        crc.update(&self.tail[..1]);
        let found = u64::from_le_bytes(self.tail[1..9].try_into().expect("8 bytes"));
        let computed = crc.finalize();
        if found != 0 && found != computed {
            return Err(CheckError::Checksum { found, computed });
        }
        let field = |k: &str| {
            aux.fields
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        };
        Ok(Snapshot {
            size: self.size,
            sha256: hex(&self.sha.finalize()),
            version: aux.version,
            repl_id: field("repl-id"),
            repl_offset: field("repl-offset").and_then(|v| v.parse().ok()),
            redis_version: field("redis-ver"),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `REDIS` and four version digits.
fn parse_header(head: &[u8]) -> Option<u32> {
    if head.len() < 9 || &head[..5] != b"REDIS" {
        return None;
    }
    std::str::from_utf8(&head[5..9]).ok()?.parse().ok()
}

/// The header and the aux fields (opcode 0xFA, a string key, a string
/// value) that follow it, once `head` holds all of them (the first other
/// opcode seen); `None` while more bytes are needed.
fn parse_aux(head: &[u8]) -> Option<Aux> {
    let version = parse_header(head)?;
    let mut at = 9;
    let mut fields = Vec::new();
    loop {
        match head.get(at)? {
            0xFA => {
                at += 1;
                let (key, n) = rdb_string(&head[at..])?;
                at += n;
                let (value, n) = rdb_string(&head[at..])?;
                at += n;
                fields.push((key, value));
            }
            _ => return Some(Aux { version, fields }),
        }
    }
}

/// An RDB string at the start of `b` (length-prefixed, or an integer
/// encoding), and the bytes it took; `None` if `b` is too short.
/// LZF-compressed strings (never aux fields in practice) read as empty.
fn rdb_string(b: &[u8]) -> Option<(String, usize)> {
    let first = *b.first()?;
    let (len, at) = match first >> 6 {
        0 => (u64::from(first & 0x3F), 1),
        1 => (u64::from(first & 0x3F) << 8 | u64::from(*b.get(1)?), 2),
        2 if first == 0x80 => (
            u64::from(u32::from_be_bytes(b.get(1..5)?.try_into().ok()?)),
            5,
        ),
        2 if first == 0x81 => (u64::from_be_bytes(b.get(1..9)?.try_into().ok()?), 9),
        3 => {
            return match first & 0x3F {
                0 => Some(((*b.get(1)? as i8).to_string(), 2)),
                1 => Some((
                    i16::from_le_bytes(b.get(1..3)?.try_into().ok()?).to_string(),
                    3,
                )),
                2 => Some((
                    i32::from_le_bytes(b.get(1..5)?.try_into().ok()?).to_string(),
                    5,
                )),
                3 => {
                    // LZF: compressed length, original length, data.
                    let (clen, n1) = rdb_len(&b[1..])?;
                    let (_, n2) = rdb_len(&b[1 + n1..])?;
                    let end = 1 + n1 + n2 + usize::try_from(clen).ok()?;
                    b.get(..end)?;
                    Some((String::new(), end))
                }
                _ => None,
            };
        }
        _ => return None,
    };
    let end = at + usize::try_from(len).ok()?;
    Some((String::from_utf8_lossy(b.get(at..end)?).into_owned(), end))
}

/// A plain RDB length at the start of `b` and the bytes it took.
fn rdb_len(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    match first >> 6 {
        0 => Some((u64::from(first & 0x3F), 1)),
        1 => Some((u64::from(first & 0x3F) << 8 | u64::from(*b.get(1)?), 2)),
        2 if first == 0x80 => Some((
            u64::from(u32::from_be_bytes(b.get(1..5)?.try_into().ok()?)),
            5,
        )),
        2 if first == 0x81 => Some((u64::from_be_bytes(b.get(1..9)?.try_into().ok()?), 9)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> Vec<u8> {
        let mut v = vec![s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A small RDB: header, aux fields (one an 8-bit integer, one a 32-bit
    /// integer), a SELECTDB and one string key, EOF and the CRC-64.
    fn rdb(checksum: bool) -> Vec<u8> {
        let mut v = b"REDIS0010".to_vec();
        for (k, val) in [
            ("redis-ver", string("7.0.15")),
            ("repl-id", string(&"a".repeat(40))),
        ] {
            v.push(0xFA);
            v.extend(string(k));
            v.extend(val);
        }
        v.push(0xFA);
        v.extend(string("repl-offset"));
        v.extend([0xC2]);
        v.extend(1_837_925i32.to_le_bytes());
        v.push(0xFA);
        v.extend(string("aof-base"));
        v.extend([0xC0, 0]);
        v.extend([0xFE, 0x00, 0x00]);
        v.extend(string("k"));
        v.extend(string("v"));
        v.push(0xFF);
        let crc = if checksum { CRC.checksum(&v) } else { 0 };
        v.extend(crc.to_le_bytes());
        v
    }

    fn check_in_pieces(bytes: &[u8], piece: usize) -> Result<Snapshot, CheckError> {
        let mut c = Check::default();
        for chunk in bytes.chunks(piece) {
            c.feed(chunk);
        }
        c.finish()
    }

    #[test]
    fn a_whole_rdb_checks_out_in_any_pieces_with_its_replication_offset() {
        let file = rdb(true);
        for piece in [1, 2, 7, 9, 10, 1000] {
            let s = check_in_pieces(&file, piece).unwrap();
            assert_eq!(s.size, file.len() as u64);
            assert_eq!(s.version, 10);
            assert_eq!(s.repl_id.as_deref(), Some("a".repeat(40).as_str()));
            assert_eq!(s.repl_offset, Some(1_837_925));
            assert_eq!(s.redis_version.as_deref(), Some("7.0.15"));
            assert_eq!(s.sha256, hex(&Sha256::digest(&file)));
        }
        // `rdbchecksum no` writes 0: nothing to compare.
        assert!(check_in_pieces(&rdb(false), 5).is_ok());
    }

    #[test]
    fn a_cut_or_changed_rdb_is_refused() {
        let file = rdb(true);
        assert_eq!(
            check_in_pieces(&file[..file.len() - 3], 4),
            Err(CheckError::Truncated)
        );
        let mut bad = file.clone();
        let i = bad.len() - 12;
        bad[i] ^= 1;
        assert!(matches!(
            check_in_pieces(&bad, 4),
            Err(CheckError::Checksum { .. })
        ));
        assert_eq!(check_in_pieces(b"HELLO WORLD", 4), Err(CheckError::NotRdb));
    }

    fn frame(reply: &[u8], piece: usize) -> Result<(Vec<u8>, bool), FramingError> {
        let mut f = Framing::default();
        let mut out = Vec::new();
        for chunk in reply.chunks(piece) {
            out.extend(f.feed(chunk)?);
        }
        Ok((out, f.done()))
    }

    #[test]
    fn the_payload_is_cut_out_of_a_diskless_or_sized_reply() {
        let payload = rdb(true);
        let mark = "0123456789012345678901234567890123456789";
        let mut diskless = b"\n\n+FULLRESYNC x 0\r\n$EOF:".to_vec();
        diskless.extend(mark.as_bytes());
        diskless.extend(b"\r\n");
        diskless.extend(&payload);
        diskless.extend(mark.as_bytes());
        let mut sized = format!("\n${}\r\n", payload.len()).into_bytes();
        sized.extend(&payload);
        for piece in [1, 3, 41, 4096] {
            assert_eq!(frame(&diskless, piece).unwrap(), (payload.clone(), true));
            assert_eq!(frame(&sized, piece).unwrap(), (payload.clone(), true));
        }
        // Not all of it yet: not done, the marker's bytes held back.
        let (partial, done) = frame(&diskless[..diskless.len() - 10], 7).unwrap();
        assert!(!done);
        assert!(partial.len() < payload.len());
    }

    #[test]
    fn an_error_reply_is_the_members_refusal() {
        assert_eq!(
            frame(
                b"-NOMASTERLINK Can't SYNC while not connected with my master\r\n",
                5
            ),
            Err(FramingError::Refused(
                "NOMASTERLINK Can't SYNC while not connected with my master".into()
            ))
        );
        assert!(matches!(
            frame(b":1\r\n", 5),
            Err(FramingError::Unexpected(_))
        ));
    }
}
