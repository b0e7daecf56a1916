//! ServiceAccount tokens: the keys, the JWTs, the TokenRequest subresource that issues them and
//! the authenticator that accepts them.

pub mod keys;
pub mod token;
