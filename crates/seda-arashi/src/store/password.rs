//! Password hashes: PBKDF2-HMAC-SHA256 (RFC 8018) with a random 16-byte salt, stored
//! as `pbkdf2-sha256$ITERATIONS$SALT_HEX$HASH_HEX`; verification in constant time.
//!
//! The iteration count is stored in each hash, so it can grow without a migration.
//! Seeded demo accounts use [`DEMO_ITERATIONS`]: enough to make a stolen database
//! slow to crack for weak passwords would be far more, but emulated users log in
//! thousands of times a minute and the paper's login was a plain lookup.

use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Iterations of the seeded accounts' hashes.
pub const DEMO_ITERATIONS: u32 = 2_000;

const SCHEME: &str = "pbkdf2-sha256";

/// Hashes `password` with a fresh salt and `iterations` rounds (at least 1).
pub fn hash_password(password: &str, iterations: u32) -> String {
    let iterations = iterations.max(1);
    let salt = random_bytes::<16>();
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), &salt, iterations, &mut out);
    format!("{SCHEME}${iterations}${}${}", hex(&salt), hex(&out))
}

/// Whether `password` matches `stored` (false for a malformed `stored`).
pub fn verify_password(password: &str, stored: &str) -> bool {
    let mut parts = stored.split('$');
    let (Some(SCHEME), Some(iter), Some(salt), Some(hash), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let (Ok(iterations), Some(salt), Some(hash)) = (iter.parse::<u32>(), unhex(salt), unhex(hash))
    else {
        return false;
    };
    if iterations == 0 || hash.len() != 32 {
        return false;
    }
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), &salt, iterations, &mut out);
    bool::from(out.ct_eq(&hash[..]))
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `N` bytes from the operating system's random source.
///
/// # Panics
/// If the OS has no random source (a broken system: no session could be safe).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random source failed");
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_differ_by_salt() {
        let a = hash_password("user1-pw", 10);
        let b = hash_password("user1-pw", 10);
        assert_ne!(a, b, "fresh salt each time");
        assert!(verify_password("user1-pw", &a));
        assert!(!verify_password("user1-pW", &a));
        assert!(!verify_password("", &a));
        for bad in [
            "",
            "pbkdf2-sha256$0$00$00",
            "md5$1$00$00",
            &a[..a.len() - 2],
            "x$y$z$w$v",
        ] {
            assert!(!verify_password("user1-pw", bad), "{bad}");
        }
    }
}
