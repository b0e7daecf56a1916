//! Field selectors: parsing `field=value` / `field!=value` terms and matching them.

use std::fmt;

use super::{Result, SelectorError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldOp {
    Eq,
    NotEq,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub op: FieldOp,
    pub value: String,
}

/// A field selector: the AND of `field=value` / `field!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses like `fields.ParseSelector`: terms split on unescaped commas and sorted; the
    /// first `!=`, `==` or `=` splits a term; values may escape `\,`, `\=` and `\\`.
    pub fn parse(s: &str) -> Result<Self> {
        let mut terms = split_terms(s);
        terms.sort();
        let mut requirements = Vec::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, op, raw)) = split_term(term) else {
                return Err(SelectorError::FieldTerm { selector: s.to_owned(), term: term.to_owned() });
            };
            requirements.push(FieldRequirement { field: field.to_owned(), op, value: unescape(raw)? });
        }
        Ok(Self { requirements })
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// `get(field)` is the object's value for a field label; `None` compares as `""`.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let actual = get(&r.field).unwrap_or_default();
            match r.op {
                FieldOp::Eq => actual == r.value,
                FieldOp::NotEq => actual != r.value,
            }
        })
    }

    /// The value this selector pins `field` to, if it requires `field=value`.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find(|r| r.field == field && r.op == FieldOp::Eq).map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if r.op == FieldOp::Eq { "=" } else { "!=" };
            let value = r.value.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=");
            write!(f, "{}{op}{value}", r.field)?;
        }
        Ok(())
    }
}

/// Splits on commas not preceded by a backslash; escapes are kept for `unescape`.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [("!=", FieldOp::NotEq), ("==", FieldOp::Eq), ("=", FieldOp::Eq)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, value));
            }
        }
    }
    None
}

fn unescape(s: &str) -> Result<String> {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::FieldEscape(format!("\\{c}")));
            }
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' || c == '=' {
            return Err(SelectorError::FieldUnescaped(c));
        } else {
            out.push(c);
        }
    }
    if escaped {
        return Err(SelectorError::FieldEscape("\\".to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(s: &str) -> FieldSelector {
        FieldSelector::parse(s).expect("test field selector parses")
    }

    #[test]
    fn field_selector_supports_all_three_operators() {
        let sel = fields("status.phase=Running,spec.nodeName==n1,metadata.name!=skip");
        let get = |name: &'static str| {
            move |f: &str| match f {
                "status.phase" => Some("Running".to_owned()),
                "spec.nodeName" => Some("n1".to_owned()),
                "metadata.name" => Some(name.to_owned()),
                _ => None,
            }
        };
        assert!(sel.matches(get("web")));
        assert!(!sel.matches(get("skip")));
        assert_eq!(sel.requirements().len(), 3);
    }

    #[test]
    fn absent_fields_compare_as_empty() {
        assert!(fields("spec.nodeName=").matches(|_| None));
        assert!(fields("spec.nodeName!=n1").matches(|_| None));
        assert!(!fields("spec.nodeName=n1").matches(|_| None));
    }

    #[test]
    fn field_values_unescape_commas_equals_and_backslashes() {
        let sel = fields(r"metadata.name=a\,b\=c\\d,type=x");
        assert_eq!(sel.exact("metadata.name"), Some(r"a,b=c\d"));
        assert_eq!(sel.to_string(), r"metadata.name=a\,b\=c\\d,type=x");
    }

    #[test]
    fn field_selector_rejects_bad_escapes_and_terms() {
        assert_eq!(FieldSelector::parse(r"a=b\x"), Err(SelectorError::FieldEscape(r"\x".to_owned())));
        assert_eq!(FieldSelector::parse(r"a=b\"), Err(SelectorError::FieldEscape(r"\".to_owned())));
        assert_eq!(FieldSelector::parse("a=b=c"), Err(SelectorError::FieldUnescaped('=')));
        assert_eq!(
            FieldSelector::parse("a=b,justname").map_err(|e| e.to_string()),
            Err("invalid selector: 'a=b,justname'; can't understand 'justname'".to_owned())
        );
    }

    #[test]
    fn exact_only_reports_equality_requirements() {
        let sel = fields("metadata.name!=a,spec.nodeName=n1,,");
        assert_eq!(sel.exact("metadata.name"), None);
        assert_eq!(sel.exact("spec.nodeName"), Some("n1"));
        assert!(fields("").is_empty());
    }
}
