//! Kubernetes quantities (`resource.Quantity`) as numbers.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A Kubernetes quantity in bytes (`512Mi`, `1G`, `1.5Gi`, `1e9`, `100000`).
pub fn bytes(q: &Quantity) -> Option<u64> {
    let s = q.0.trim();
    let suffixes: &[(&str, f64)] = &[
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("m", 1e-3),
    ];
    let (number, mult) = suffixes
        .iter()
        .find_map(|(suf, mult)| s.strip_suffix(suf).map(|n| (n, *mult)))
        .unwrap_or((s, 1.0));
    let n: f64 = number.parse().ok()?;
    let bytes = n * mult;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_suffixes_fractions_and_exponents() {
        let q = |s: &str| bytes(&Quantity(s.into()));
        assert_eq!(q("512Mi"), Some(512 << 20));
        assert_eq!(q("1G"), Some(1_000_000_000));
        assert_eq!(q("1.5Gi"), Some(3 << 29));
        assert_eq!(q("1e3"), Some(1000));
        assert_eq!(q("100000"), Some(100000));
        assert_eq!(q("lots"), None);
    }
}
