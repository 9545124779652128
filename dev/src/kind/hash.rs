//! Content hashes for cache keys and image tags.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `text`.
pub fn short(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn hashes_are_stable_hex() {
        assert_eq!(
            super::short("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
