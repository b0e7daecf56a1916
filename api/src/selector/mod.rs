//! Label and field selectors: parsing (string syntax and `metav1.LabelSelector` JSON) and matching,
//! with the semantics of apimachinery's `labels` and `fields` packages.

mod field;
mod fields;
mod label;
mod parse;
#[cfg(test)]
mod test_support;

pub use field::{FieldOp, FieldRequirement, FieldSelector};
pub use fields::{field_value, supported_fields};
pub use label::LabelSelector;

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
