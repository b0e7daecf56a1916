//! Resource quantities: parsing `resource.Quantity` strings into nano-units.

use serde_json::Value;

/// Parses a Kubernetes resource quantity (`500m`, `1`, `128Mi`, `1G`, `1e3`, `0.5`) into
/// nano-units, rounding up like the apiserver does. `None` when it is not a quantity or overflows.
pub fn parse_quantity(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (num, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return None;
    }
    let (exp10, pow2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => (s[1..].parse::<i32>().ok()?, 0),
        _ => return None,
    };
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return None;
    }
    let mut value: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    value = value.checked_mul(1i128.checked_shl(pow2)?)?;
    let frac_len = i32::try_from(frac_part.len()).ok()?;
    let exp = exp10.checked_add(9)?.checked_sub(frac_len)?;
    if exp >= 0 {
        let factor = 10i128.checked_pow(u32::try_from(exp).ok()?)?;
        value = value.checked_mul(factor)?;
    } else {
        let shift = u32::try_from(-exp).ok()?;
        value = match 10i128.checked_pow(shift) {
            Some(div) => (value + div - 1) / div,
            None => i128::from(value > 0),
        };
    }
    Some(if negative { -value } else { value })
}

pub(crate) fn quantity_of(v: &Value) -> Option<i128> {
    match v {
        Value::String(s) => parse_quantity(s),
        Value::Number(n) => parse_quantity(&n.to_string()),
        _ => None,
    }
}

pub(crate) fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_nano_units() {
        assert_eq!(parse_quantity("500m"), Some(500_000_000));
        assert_eq!(parse_quantity("1"), Some(1_000_000_000));
        assert_eq!(parse_quantity("128Mi"), Some(128 * 1024 * 1024 * 1_000_000_000));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000_000_000_000));
        assert_eq!(parse_quantity("1e3"), parse_quantity("1k"));
        assert_eq!(parse_quantity("0.5"), parse_quantity("500m"));
        assert_eq!(parse_quantity("-1"), Some(-1_000_000_000));
        assert_eq!(parse_quantity("1n"), Some(1));
        assert_eq!(parse_quantity("0.1n"), Some(1));
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("1.2.3"), None);
        assert_eq!(parse_quantity("5Xi"), None);
    }
}
