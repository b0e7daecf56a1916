//! Label and field selectors: parsing (string syntax and `metav1.LabelSelector` JSON) and matching,
//! with the semantics of apimachinery's `labels` and `fields` packages.

use std::fmt;

use serde_json::{Map, Value};

/// Why a selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Syntax(String),
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue { key: String, value: String, reason: String },
    #[error("invalid values for key {key:?}: {reason}")]
    InvalidValues { key: String, reason: &'static str },
    #[error("{0:?} is not a valid label selector operator")]
    UnknownOperator(String),
    #[error("invalid label selector: {0}")]
    Malformed(&'static str),
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm { selector: String, term: String },
    #[error("invalid field selector: invalid escape sequence: {0}")]
    FieldEscape(String),
    #[error("invalid field selector: unescaped character in value: {0:?}")]
    FieldUnescaped(char),
}

pub type Result<T, E = SelectorError> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
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
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

impl Requirement {
    /// Validates like `labels.NewRequirement`.
    fn new(key: String, op: Op, values: Vec<String>) -> Result<Self> {
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
fn validate_key(key: &str) -> Result<()> {
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Bang,
    OpenPar,
    ClosePar,
    Comma,
    End,
}

impl Token {
    fn literal(&self) -> &str {
        match self {
            Token::Ident(s) => s,
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::Bang => "!",
            Token::OpenPar => "(",
            Token::ClosePar => ")",
            Token::Comma => ",",
            Token::End => "",
        }
    }

    /// In a values context the keywords `in` and `notin` are plain identifiers.
    fn into_value(self) -> Self {
        match self {
            Token::In => Token::Ident("in".to_owned()),
            Token::NotIn => Token::Ident("notin".to_owned()),
            other => other,
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn special_token(s: &str) -> Option<Token> {
    Some(match s {
        "=" => Token::Equals,
        "==" => Token::DoubleEquals,
        "!=" => Token::NotEquals,
        "!" => Token::Bang,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "(" => Token::OpenPar,
        ")" => Token::ClosePar,
        "," => Token::Comma,
        _ => return None,
    })
}

/// Splits a selector into tokens the way `labels.Lexer` does: whitespace separates, runs of
/// special characters take the longest known operator.
fn lex(s: &str) -> Vec<Token> {
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && chars[i].is_ascii_whitespace() {
            i += 1;
        }
        let Some(&c) = chars.get(i) else {
            tokens.push(Token::End);
            return tokens;
        };
        if is_special(c) {
            let mut buf = String::new();
            let mut best = None;
            while let Some(&c) = chars.get(i).filter(|c| is_special(**c)) {
                buf.push(c);
                match special_token(&buf) {
                    Some(t) => best = Some(t),
                    None if best.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            // Every single special character is a token, so `best` is always set here.
            tokens.push(best.unwrap_or(Token::End));
        } else {
            let start = i;
            while i < chars.len() && !is_special(chars[i]) && !chars[i].is_ascii_whitespace() {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Ident(word),
            });
        }
    }
}

/// Recursive-descent parser over the token list, mirroring `labels.Parser`.
struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        Self { tokens: lex(s), pos: 0 }
    }

    fn peek(&self, values: bool) -> Token {
        let tok = self.tokens.get(self.pos).cloned().unwrap_or(Token::End);
        if values {
            tok.into_value()
        } else {
            tok
        }
    }

    fn next(&mut self, values: bool) -> Token {
        let tok = self.peek(values);
        self.pos += 1;
        tok
    }

    fn parse(&mut self) -> Result<Vec<Requirement>> {
        let mut requirements = Vec::new();
        loop {
            match self.peek(true) {
                Token::Ident(_) | Token::Bang => {
                    requirements.push(self.requirement()?);
                    match self.next(true) {
                        Token::End => return Ok(requirements),
                        Token::Comma => match self.peek(true) {
                            Token::Ident(_) | Token::Bang => {}
                            t => {
                                return Err(syntax(format!("found '{}', expected: identifier after ','", t.literal())))
                            }
                        },
                        t => return Err(syntax(format!("found '{}', expected: ',' or 'end of string'", t.literal()))),
                    }
                }
                Token::End => return Ok(requirements),
                t => {
                    return Err(syntax(format!("found '{}', expected: !, identifier, or 'end of string'", t.literal())))
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement> {
        let mut tok = self.next(true);
        let negated = tok == Token::Bang;
        if negated {
            tok = self.next(true);
        }
        let Token::Ident(key) = tok else {
            return Err(syntax(format!("found '{}', expected: identifier", tok.literal())));
        };
        validate_key(&key)?;
        if negated {
            return Requirement::new(key, Op::DoesNotExist, Vec::new());
        }
        if matches!(self.peek(true), Token::End | Token::Comma) {
            return Requirement::new(key, Op::Exists, Vec::new());
        }
        let op = match self.next(false) {
            Token::In => Op::In,
            Token::NotIn => Op::NotIn,
            Token::Equals => Op::Equals,
            Token::DoubleEquals => Op::DoubleEquals,
            Token::NotEquals => Op::NotEquals,
            Token::GreaterThan => Op::GreaterThan,
            Token::LessThan => Op::LessThan,
            t => return Err(syntax(format!("found '{}', expected: in, notin, =, ==, !=, gt, lt", t.literal()))),
        };
        let values = match op {
            Op::In | Op::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        Requirement::new(key, op, values)
    }

    /// `( v1, v2, ... )`; returned sorted and deduplicated like a `sets.String`.
    fn value_set(&mut self) -> Result<Vec<String>> {
        let tok = self.next(true);
        if tok != Token::OpenPar {
            return Err(syntax(format!("found '{}' expected: '('", tok.literal())));
        }
        let mut values = Vec::new();
        match self.peek(true) {
            Token::ClosePar => {
                self.pos += 1;
                values.push(String::new());
            }
            Token::Ident(_) | Token::Comma => {
                self.identifiers(&mut values)?;
                let tok = self.next(true);
                if tok != Token::ClosePar {
                    return Err(syntax(format!("found '{}', expected: ')'", tok.literal())));
                }
            }
            t => return Err(syntax(format!("found '{}', expected: ',', ')' or identifier", t.literal()))),
        }
        values.sort();
        values.dedup();
        Ok(values)
    }

    /// A comma-separated list whose items may be empty (`(a,,b)`, `(,a)`, `(a,)`).
    fn identifiers(&mut self, values: &mut Vec<String>) -> Result<()> {
        loop {
            match self.next(true) {
                Token::Ident(v) => {
                    values.push(v);
                    match self.peek(true) {
                        Token::Comma => {}
                        Token::ClosePar => return Ok(()),
                        t => return Err(syntax(format!("found '{}', expected: ',' or ')'", t.literal()))),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.peek(true) {
                        Token::ClosePar => {
                            values.push(String::new());
                            return Ok(());
                        }
                        Token::Comma => values.push(String::new()),
                        _ => {}
                    }
                }
                t => return Err(syntax(format!("found '{}', expected: ',', or identifier", t.literal()))),
            }
        }
    }

    fn exact_value(&mut self) -> Result<String> {
        if matches!(self.peek(true), Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next(true) {
            Token::Ident(v) => Ok(v),
            t => Err(syntax(format!("found '{}', expected: identifier", t.literal()))),
        }
    }
}

fn syntax(msg: String) -> SelectorError {
    SelectorError::Syntax(msg)
}

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

/// Field labels a kind can be selected by, as the Kubernetes registries declare them.
pub fn supported_fields(kind: &str) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name", "metadata.namespace"];
    fields.extend_from_slice(match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ][..],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Node" => &["spec.unschedulable"],
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        "ReplicaSet" => &["status.replicas"],
        _ => &[],
    });
    fields
}

/// The value of a field label on an object, `None` when the field is absent or not supported
/// for `kind`. Typed fields report their Go zero value when absent (`spec.hostNetwork` is
/// `"false"`, `status.replicas` is `"0"`), so `spec.hostNetwork=false` selects such objects.
pub fn field_value(kind: &str, obj: &Value, field: &str) -> Option<String> {
    if !supported_fields(kind).contains(&field) {
        return None;
    }
    let at = |path: &str| lookup(obj, path).and_then(scalar);
    match (kind, field) {
        ("Pod", "spec.hostNetwork") | ("Node", "spec.unschedulable") => {
            Some(at(field).unwrap_or_else(|| "false".to_owned()))
        }
        ("ReplicaSet", "status.replicas") => Some(at(field).unwrap_or_else(|| "0".to_owned())),
        ("Pod", "status.podIP") => lookup(obj, "status.podIPs")
            .and_then(|ips| ips.get(0))
            .and_then(|ip| ip.get("ip"))
            .and_then(scalar)
            .or_else(|| at("status.podIP")),
        ("Event", "source") => at("source.component").filter(|s| !s.is_empty()).or_else(|| at("reportingComponent")),
        _ => at(field),
    }
}

fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(obj, |v, key| v.get(key))
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn selects(selector: &str, l: Value) -> bool {
        let sel = LabelSelector::parse(selector).expect("test selector parses");
        sel.matches(Some(&labels(l)))
    }

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
    fn keywords_are_values_inside_a_value_set() {
        assert!(selects("x in (in,notin)", json!({"x": "notin"})));
    }

    #[test]
    fn empty_parens_mean_the_empty_value_as_in_kubernetes() {
        assert!(selects("x in ()", json!({"x": ""})));
        assert!(selects("x in (a,)", json!({"x": ""})));
        assert!(selects("x=", json!({"x": ""})));
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
    fn malformed_syntax_reports_what_was_found() {
        let err = |s| LabelSelector::parse(s).expect_err("must fail").to_string();
        assert_eq!(err("a in (b"), "unable to parse requirement: found '', expected: ',' or ')'");
        assert_eq!(err("a in b)"), "unable to parse requirement: found 'b' expected: '('");
        assert_eq!(err("a in ("), "unable to parse requirement: found '', expected: ',', ')' or identifier");
        assert_eq!(err("a,"), "unable to parse requirement: found '', expected: identifier after ','");
        assert_eq!(err("a b"), "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt");
        assert_eq!(err("!a=b"), "unable to parse requirement: found '=', expected: ',' or 'end of string'");
        assert_eq!(err("=b"), "unable to parse requirement: found '=', expected: !, identifier, or 'end of string'");
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

    #[test]
    fn field_values_come_from_the_object() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}]}
        });
        assert_eq!(field_value("Pod", &pod, "metadata.name").as_deref(), Some("web"));
        assert_eq!(field_value("Pod", &pod, "status.phase").as_deref(), Some("Running"));
        assert_eq!(field_value("Pod", &pod, "status.podIP").as_deref(), Some("10.0.0.5"));
        assert_eq!(field_value("Pod", &pod, "spec.hostNetwork").as_deref(), Some("false"));
        assert_eq!(field_value("Pod", &pod, "spec.schedulerName"), None);
        assert_eq!(field_value("Pod", &pod, "spec.containers"), None);
        let rs = json!({"status": {"replicas": 3}});
        assert_eq!(field_value("ReplicaSet", &rs, "status.replicas").as_deref(), Some("3"));
        let node = json!({"spec": {"unschedulable": true}});
        assert_eq!(field_value("Node", &node, "spec.unschedulable").as_deref(), Some("true"));
        let event = json!({"involvedObject": {"kind": "Pod"}, "reportingComponent": "kubelet"});
        assert_eq!(field_value("Event", &event, "involvedObject.kind").as_deref(), Some("Pod"));
        assert_eq!(field_value("Event", &event, "source").as_deref(), Some("kubelet"));
    }

    #[test]
    fn supported_fields_extend_the_metadata_fields_per_kind() {
        assert_eq!(supported_fields("ConfigMap"), vec!["metadata.name", "metadata.namespace"]);
        assert!(supported_fields("Pod").contains(&"status.phase"));
        assert!(supported_fields("Event").contains(&"involvedObject.uid"));
        assert!(supported_fields("Secret").contains(&"type"));
        assert!(!supported_fields("Service").contains(&"status.phase"));
    }
}
