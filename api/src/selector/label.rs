//! Label selectors: requirements, `metav1.LabelSelector` JSON, key/value rules and matching.

use std::fmt;

use serde_json::{Map, Value};

use super::parse::Parser;
use super::{Result, SelectorError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

impl Requirement {
    /// Validates like `labels.NewRequirement`.
    pub(super) fn new(key: String, op: Op, values: Vec<String>) -> Result<Self> {
        validate_key(&key)?;
        let invalid = |reason| SelectorError::InvalidValues { key: key.clone(), reason };
        match op {
            Op::In | Op::NotIn if values.is_empty() => {
                return Err(invalid("for 'in', 'notin' operators, values set can't be empty"))
            }
            Op::Equals | Op::DoubleEquals | Op::NotEquals if values.len() != 1 => {
                return Err(invalid("exact-match compatibility requires one single value"))
            }
            Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                return Err(invalid("values set must be empty for exists and does not exist"))
            }
            Op::GreaterThan | Op::LessThan => {
                if values.len() != 1 {
                    return Err(invalid("for 'Gt', 'Lt' operators, exactly one value is required"));
                }
                if values.iter().any(|v| v.parse::<i64>().is_err()) {
                    return Err(invalid("for 'Gt', 'Lt' operators, the value must be an integer"));
                }
            }
            _ => {}
        }
        for value in &values {
            validate_value(&key, value)?;
        }
        Ok(Self { key, op, values })
    }

    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        // Label values are strings once validated; anything else compares as "".
        let found = labels.and_then(|l| l.get(&self.key)).map(|v| v.as_str().unwrap_or(""));
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            Op::In | Op::Equals | Op::DoubleEquals => found.is_some_and(has),
            Op::NotIn | Op::NotEquals => !found.is_some_and(has),
            Op::Exists => found.is_some(),
            Op::DoesNotExist => found.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let (Some(Ok(have)), Some(Ok(want))) =
                    (found.map(str::parse::<i64>), self.values.first().map(|v| v.parse::<i64>()))
                else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Op::Exists => return f.write_str(&self.key),
            Op::DoesNotExist => return write!(f, "!{}", self.key),
            Op::Equals => "=",
            Op::DoubleEquals => "==",
            Op::NotEquals => "!=",
            Op::GreaterThan => ">",
            Op::LessThan => "<",
            Op::In => " in ",
            Op::NotIn => " notin ",
        };
        let mut values = self.values.clone();
        values.sort();
        let values = values.join(",");
        if matches!(self.op, Op::In | Op::NotIn) {
            write!(f, "{}{op}({values})", self.key)
        } else {
            write!(f, "{}{op}{values}", self.key)
        }
    }
}

/// A label selector: the AND of its requirements, kept sorted by key as Kubernetes does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the string syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
    /// `a>1`, `a<1`, comma separated. As in Kubernetes, `a in ()` means `a in ("")`.
    pub fn parse(s: &str) -> Result<Self> {
        let mut requirements = Parser::new(s).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Converts a `metav1.LabelSelector` (`matchLabels` + `matchExpressions`). `null`, absent
    /// and `{}` all give the empty selector, which matches everything.
    pub fn from_json(sel: &Value) -> Result<Self> {
        let obj = match sel {
            Value::Null => return Ok(Self::default()),
            Value::Object(obj) => obj,
            _ => return Err(SelectorError::Malformed("selector must be an object")),
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (key, value) in labels {
                    let value = value.as_str().ok_or(SelectorError::Malformed("matchLabels values must be strings"))?;
                    requirements.push(Requirement::new(key.clone(), Op::Equals, vec![value.to_owned()])?);
                }
            }
            Some(_) => return Err(SelectorError::Malformed("matchLabels must be an object")),
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for expr in exprs {
                    requirements.push(expression(expr)?);
                }
            }
            Some(_) => return Err(SelectorError::Malformed("matchExpressions must be a list")),
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// Whether an object with these `metadata.labels` is selected. `!=` and `notin` match when
    /// the key is absent; the empty selector matches everything.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

fn expression(expr: &Value) -> Result<Requirement> {
    let key = expr
        .get("key")
        .and_then(Value::as_str)
        .ok_or(SelectorError::Malformed("matchExpressions[].key must be a string"))?;
    let op = match expr.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => Op::In,
        "NotIn" => Op::NotIn,
        "Exists" => Op::Exists,
        "DoesNotExist" => Op::DoesNotExist,
        other => return Err(SelectorError::UnknownOperator(other.to_owned())),
    };
    let values = match expr.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(values)) => values
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or(SelectorError::Malformed("matchExpressions[].values must be strings"))?,
        Some(_) => return Err(SelectorError::Malformed("matchExpressions[].values must be a list")),
    };
    Requirement::new(key.to_owned(), op, values)
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Qualified name: optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters (`content.IsLabelKey`).
pub(super) fn validate_key(key: &str) -> Result<()> {
    let invalid = |reason: &str| SelectorError::InvalidKey { key: key.to_owned(), reason: reason.to_owned() };
    let name = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                return Err(invalid("prefix part must be non-empty"));
            }
            if prefix.len() > 253 {
                return Err(invalid("prefix part must be no more than 253 characters"));
            }
            if !is_dns1123_subdomain(prefix) {
                return Err(invalid(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                     characters, '-' or '.', and must start and end with an alphanumeric character",
                ));
            }
            name
        }
        _ => {
            return Err(invalid(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start \
                 and end with an alphanumeric character, with an optional DNS subdomain prefix and '/'",
            ))
        }
    };
    if name.is_empty() {
        return Err(invalid("name part must be non-empty"));
    }
    if name.len() > 63 {
        return Err(invalid("name part must be no more than 63 characters"));
    }
    if !is_label_token(name) {
        return Err(invalid(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
             with an alphanumeric character",
        ));
    }
    Ok(())
}

/// Label value: empty, or at most 63 characters of `[-A-Za-z0-9_.]` with alphanumeric ends.
fn validate_value(key: &str, value: &str) -> Result<()> {
    let invalid = |reason: &str| SelectorError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    if value.len() > 63 {
        return Err(invalid("must be no more than 63 characters"));
    }
    if !value.is_empty() && !is_label_token(value) {
        return Err(invalid(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character",
        ));
    }
    Ok(())
}

fn is_label_token(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
                alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::selector::test_support::{labels, selects};

    #[test]
    fn equality_operators_match_exact_values() {
        for s in ["app=web", "app==web", " app = web "] {
            assert!(selects(s, json!({"app": "web"})), "{s}");
            assert!(!selects(s, json!({"app": "db"})), "{s}");
            assert!(!selects(s, json!({})), "{s}");
        }
    }

    #[test]
    fn not_equals_matches_other_values_and_absent_keys() {
        assert!(!selects("app!=web", json!({"app": "web"})));
        assert!(selects("app!=web", json!({"app": "db"})));
        assert!(selects("app!=web", json!({})));
        let sel = LabelSelector::parse("app!=web").expect("parses");
        assert!(sel.matches(None));
    }

    #[test]
    fn set_operators_follow_kubernetes_absent_key_rules() {
        assert!(selects("tier in (a, b)", json!({"tier": "b"})));
        assert!(!selects("tier in (a,b)", json!({"tier": "c"})));
        assert!(!selects("tier in (a,b)", json!({})));
        assert!(!selects("tier notin (a)", json!({"tier": "a"})));
        assert!(selects("tier notin (a)", json!({"tier": "b"})));
        assert!(selects("tier notin (a)", json!({})));
    }

    #[test]
    fn existence_operators_check_only_the_key() {
        assert!(selects("app", json!({"app": ""})));
        assert!(!selects("app", json!({"other": "x"})));
        assert!(selects("!app", json!({"other": "x"})));
        assert!(!selects("!app", json!({"app": "web"})));
    }

    #[test]
    fn numeric_comparisons_need_an_integer_label() {
        assert!(selects("size>3", json!({"size": "4"})));
        assert!(!selects("size>3", json!({"size": "3"})));
        assert!(selects("size<3", json!({"size": "-1"})));
        assert!(!selects("size<3", json!({"size": "big"})));
        assert!(!selects("size<3", json!({})));
        assert!(LabelSelector::parse("size>big").is_err());
    }

    #[test]
    fn every_requirement_must_hold() {
        let l = json!({"app": "web", "tier": "front"});
        assert!(selects("app=web,tier in (front,back),!canary", l.clone()));
        assert!(!selects("app=web,tier=back", l));
    }

    #[test]
    fn empty_selector_matches_everything() {
        let sel = LabelSelector::parse("  ").expect("parses");
        assert!(sel.is_empty());
        assert!(sel.matches(None));
        assert!(sel.matches(Some(&labels(json!({"a": "b"})))));
    }

    #[test]
    fn display_is_sorted_by_key_with_sorted_values() {
        let sel = LabelSelector::parse("tier in (b,a),app=web,!canary,x notin (z),y,n==1,m!=2,g>1").expect("parses");
        assert_eq!(sel.to_string(), "app=web,!canary,g>1,m!=2,n==1,tier in (a,b),x notin (z),y");
        assert_eq!(LabelSelector::parse(&sel.to_string()), Ok(sel));
    }

    #[test]
    fn invalid_keys_are_rejected() {
        for s in ["a@b=c", "-a=b", "Example.com/a=b", "/a=b", "a/b/c=d", &format!("{}=x", "k".repeat(64))] {
            assert!(matches!(LabelSelector::parse(s), Err(SelectorError::InvalidKey { .. })), "{s}");
        }
        assert!(LabelSelector::parse("example.com/app-name_1.x=b").is_ok());
    }

    #[test]
    fn invalid_values_are_rejected() {
        let long = format!("a={}", "v".repeat(64));
        for s in ["a=-b", "a in (ok,b_)", long.as_str()] {
            assert!(matches!(LabelSelector::parse(s), Err(SelectorError::InvalidValue { .. })), "{s}");
        }
    }

    #[test]
    fn from_json_combines_match_labels_and_expressions() {
        let sel = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists", "values": []}
            ]
        }))
        .expect("valid selector");
        assert_eq!(sel.to_string(), "app=web,!canary,env notin (prod),team,tier in (a,b)");
        assert!(sel.matches(Some(&labels(json!({"app": "web", "tier": "a", "team": "x"})))));
        assert!(!sel.matches(Some(&labels(json!({"app": "web", "tier": "a"})))));
    }

    #[test]
    fn from_json_treats_null_and_empty_as_everything() {
        for v in [Value::Null, json!({}), json!({"matchLabels": null, "matchExpressions": []})] {
            let sel = LabelSelector::from_json(&v).expect("valid");
            assert!(sel.is_empty());
            assert!(sel.matches(None));
        }
    }

    #[test]
    fn from_json_rejects_bad_operators_and_value_sets() {
        let bad_op = json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]});
        assert_eq!(
            LabelSelector::from_json(&bad_op).map_err(|e| e.to_string()),
            Err("\"Gt\" is not a valid label selector operator".to_owned())
        );
        let empty = json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]});
        assert!(matches!(LabelSelector::from_json(&empty), Err(SelectorError::InvalidValues { .. })));
        let extra = json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]});
        assert!(matches!(LabelSelector::from_json(&extra), Err(SelectorError::InvalidValues { .. })));
        let not_string = json!({"matchLabels": {"a": 1}});
        assert!(matches!(LabelSelector::from_json(&not_string), Err(SelectorError::Malformed(_))));
        let bad_key = json!({"matchLabels": {"a b": "c"}});
        assert!(matches!(LabelSelector::from_json(&bad_key), Err(SelectorError::InvalidKey { .. })));
    }
}
