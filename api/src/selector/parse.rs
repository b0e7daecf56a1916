//! The label selector string syntax: lexer and recursive-descent parser, as in `labels.Parser`.

use super::label::{validate_key, Op, Requirement};
use super::{Result, SelectorError};

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
pub(super) struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    pub(super) fn new(s: &str) -> Self {
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

    pub(super) fn parse(&mut self) -> Result<Vec<Requirement>> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::selector::test_support::selects;
    use crate::selector::LabelSelector;

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
}
