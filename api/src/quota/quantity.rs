//! Quantities as quota does arithmetic on them: an exact amount in nano-units plus the format
//! (`DecimalSI`, `BinarySI`, `DecimalExponent`) it prints back in, as `resource.Quantity` does.

use crate::validation::parse_quantity;
use std::cmp::Ordering;
use std::fmt;

/// How a quantity prints (resource.Format): the format of the text it was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// An amount in nano-units with the format it prints in. Equality and ordering compare the
/// amount only (Kubernetes' `Cmp`), so `1Gi` equals `1073741824`.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    pub nanos: i128,
    pub format: Format,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses quantity text (`500m`, `1Gi`, `1e3`); `None` when it is not a quantity.
    pub fn parse(s: &str) -> Option<Self> {
        let nanos = parse_quantity(s.trim())?;
        let format = if s.ends_with('i') {
            Format::BinarySi
        } else if s.trim_start_matches(['+', '-']).contains(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSi
        };
        Some(Self { nanos, format })
    }

    /// A whole number of units (an object count).
    pub fn from_units(n: i64) -> Self {
        Self { nanos: i128::from(n) * NANO, format: Format::DecimalSi }
    }

    pub fn zero() -> Self {
        Self::from_units(0)
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// The sum, in this quantity's format (Quantity.Add keeps the receiver's, unless it is zero).
    pub fn plus(self, other: Self) -> Self {
        let format = if self.nanos == 0 { other.format } else { self.format };
        Self { nanos: self.nanos.saturating_add(other.nanos), format }
    }

    pub fn minus(self, other: Self) -> Self {
        Self { nanos: self.nanos.saturating_sub(other.nanos), format: self.format }
    }

    /// Whether the amount is a whole number of milli-units multiple of 1000 (an integer).
    pub fn is_integer(&self) -> bool {
        self.nanos % NANO == 0
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

/// Kubernetes' canonical text: the largest suffix that keeps the amount whole (`1500m`, `1`,
/// `2k`, `352Mi`); a binary amount that is not a whole multiple of 1024 prints as decimal.
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        if self.format == Format::BinarySi && abs.is_multiple_of(NANO as u128) {
            let units = abs / NANO as u128;
            if units >= 1024 {
                const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
                let (mut v, mut i) = (units, 0usize);
                while v.is_multiple_of(1024) && i < SUFFIXES.len() {
                    v /= 1024;
                    i += 1;
                }
                if i > 0 {
                    return write!(f, "{sign}{v}{}", SUFFIXES[i - 1]);
                }
            }
        }
        // Decimal: exponents -9, -6, ..., 18 (n u m "" k M G T P E).
        let mut exp = -9i32;
        let mut v = abs;
        while v.is_multiple_of(1000) && exp < 18 {
            v /= 1000;
            exp += 3;
        }
        if self.format == Format::DecimalExponent {
            return match exp {
                0 => write!(f, "{sign}{v}"),
                e => write!(f, "{sign}{v}e{e}"),
            };
        }
        let suffix = match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        };
        write!(f, "{sign}{v}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect("a quantity")
    }

    #[test]
    fn prints_canonically_as_kubernetes_does() {
        for (text, canonical) in [
            ("500m", "500m"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("1000", "1k"),
            ("252Mi", "252Mi"),
            ("1024Mi", "1Gi"),
            ("1536", "1536"),
            ("0", "0"),
            ("0.5", "500m"),
            ("1e3", "1e3"),
            ("-2", "-2"),
        ] {
            assert_eq!(q(text).to_string(), canonical, "{text}");
        }
    }

    #[test]
    fn sums_keep_the_first_format() {
        assert_eq!(q("252Mi").plus(q("100Mi")).to_string(), "352Mi");
        assert_eq!(q("500m").plus(q("500m")).to_string(), "1");
        assert_eq!(q("1").minus(q("1")).to_string(), "0");
        assert_eq!(q("0").plus(q("10Mi")).to_string(), "10Mi", "a zero takes the other's format");
        assert_eq!(q("1Gi"), q("1073741824"));
        assert!(q("600m") > q("500m"));
    }
}
