//! The web layer shared by the request stages: sessions from cookies, CSRF checks,
//! form decoding, HTML rendering with escaping, and the static assets.

/// `N` bytes from the operating system's random source.
///
/// # Panics
/// If the OS has no random source (a broken system: no session could be safe).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random source failed");
    b
}
