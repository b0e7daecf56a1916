//! The OpenAPI definitions of every Kubernetes type, for `http::openapi`.
//!
//! Read from the crates that carry them, so nothing is written by hand:
//! - k8s-openapi's schemas (its `schemars` impls, generated from Kubernetes' own OpenAPI: types,
//!   formats, descriptions, required fields). They are read from its source rather than by
//!   turning the `schemars` feature on, which would rebuild k8s-openapi and everything above it
//!   for every crate of the workspace; each impl is a JSON literal whose only non-literal part
//!   is `__gen.subschema_for::<Type>()` (a `$ref`), optionally with a description beside it.
//! - k8s-openapi's `impl Resource` blocks: each kind's group, version and kind.
//! - k8s-pb's doc comments, which keep the Go markers k8s-openapi's schemas lack:
//!   `+listType`, `+listMapKey`, `+patchMergeKey`, `+patchStrategy`, `+mapType`, `+structType`.
//!
//! Output (JSON): `{"definitions": {name: schema}, "kinds": {"group/version/Kind": name}}`, with
//! references as `#/components/schemas/<name>` and a described reference kept as
//! `{"$ref", "description"}` (the documents' writers shape both for v3 and v2).

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Go markers of one k8s-pb message: its own, and each field's (by squashed field name).
#[derive(Default)]
pub struct Markers {
    pub message: Vec<(String, String)>,
    pub fields: HashMap<String, Vec<(String, String)>>,
}

/// `(module, lowercased type) -> markers` from one parsed k8s-pb file.
pub fn markers(ast: &syn::File, module: &[String], out: &mut HashMap<(String, String), Markers>) {
    for item in &ast.items {
        let syn::Item::Struct(s) = item else { continue };
        let mut m = Markers { message: doc_markers(&s.attrs), ..Default::default() };
        for f in &s.fields {
            let Some(name) = &f.ident else { continue };
            let found = doc_markers(&f.attrs);
            if !found.is_empty() {
                m.fields.insert(super::squash(name.to_string().trim_start_matches("r#")), found);
            }
        }
        out.insert((module.join("/"), s.ident.to_string().to_lowercase()), m);
    }
}

/// `+key=value` lines of a doc comment.
fn doc_markers(attrs: &[syn::Attribute]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for a in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let syn::Meta::NameValue(nv) = &a.meta else { continue };
        let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value else { continue };
        let text = s.value();
        if let Some((k, v)) = text.trim().strip_prefix('+').and_then(|m| m.split_once('=')) {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// Every schema of the enabled Kubernetes version in k8s-openapi's `src/<version>`.
pub fn definitions(version_dir: &Path, pb: &HashMap<(String, String), Markers>) -> Value {
    let mut schemas: Vec<(String, String, String, TokenStream)> = Vec::new(); // module, type, name, body
    let mut names: HashMap<String, String> = HashMap::new(); // `crate::module::Type` -> name
    let mut kinds = BTreeMap::new();
    for file in super::rust_files(version_dir) {
        let dir = file.parent().and_then(|d| d.strip_prefix(version_dir).ok()).expect("file under version dir");
        let module: Vec<String> = dir.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        if !text.contains("impl crate::schemars::JsonSchema for ") {
            continue;
        }
        let tokens: TokenStream = text.parse().unwrap_or_else(|e| panic!("lex {}: {e:?}", file.display()));
        let top: Vec<TokenTree> = tokens.into_iter().collect();
        for (ty, trait_name, body) in impls(&top) {
            match trait_name.as_str() {
                "schemars::JsonSchema" => {
                    let name = first_string_after(&body, "schema_name").expect("schema_name returns a literal");
                    let schema = macro_args(&body, "json_schema").expect("json_schema! in json_schema()");
                    names.insert(format!("crate::{}::{ty}", module.join("::")), name.clone());
                    schemas.push((module.join("/"), ty, name, schema));
                }
                "Resource" => {
                    let konst = |k: &str| first_string_after(&body, k);
                    if let (Some(av), Some(kind)) = (konst("API_VERSION"), konst("KIND")) {
                        kinds
                            .insert(format!("{av}/{kind}").trim_start_matches('/').to_string(), (module.join("/"), ty));
                    }
                }
                _ => {}
            }
        }
    }
    let mut defs = Map::new();
    for (module, ty, name, body) in &schemas {
        let mut schema = value(body.clone(), &names);
        if let Some(m) = pb.get(&(module.clone(), ty.to_lowercase())) {
            apply_markers(&mut schema, m);
        }
        defs.insert(name.clone(), schema);
    }
    let by_type: HashMap<(String, String), String> =
        schemas.iter().map(|(m, t, n, _)| ((m.clone(), t.clone()), n.clone())).collect();
    let kinds: Map<String, Value> =
        kinds.into_iter().filter_map(|(gvk, key)| Some((gvk, Value::String(by_type.get(&key)?.clone())))).collect();
    assert!(defs.len() > 500 && kinds.len() > 50, "found {} schemas and {} kinds", defs.len(), kinds.len());
    json!({"definitions": defs, "kinds": kinds})
}

/// `impl crate::<Trait> for <Type> { body }` at the top of a file: (type, trait, body).
fn impls(top: &[TokenTree]) -> Vec<(String, String, Vec<TokenTree>)> {
    let mut out = Vec::new();
    for (i, t) in top.iter().enumerate() {
        if !matches!(t, TokenTree::Ident(id) if id == "impl") {
            continue;
        }
        // `impl crate :: a :: B for Type { ... }`: no generics in the impls wanted here.
        let mut j = i + 1;
        let mut path = Vec::new();
        while let Some(tt) = top.get(j) {
            match tt {
                TokenTree::Ident(id) if id == "for" => break,
                TokenTree::Ident(id) => path.push(id.to_string()),
                TokenTree::Punct(p) if p.as_char() == ':' => {}
                _ => break,
            }
            j += 1;
        }
        let (Some(TokenTree::Ident(ty)), Some(TokenTree::Group(g))) = (top.get(j + 1), top.get(j + 2)) else {
            continue;
        };
        if g.delimiter() != Delimiter::Brace || path.first().is_none_or(|p| p != "crate") {
            continue;
        }
        out.push((ty.to_string(), path[1..].join("::"), g.stream().into_iter().collect()));
    }
    out
}

fn flatten(tokens: &[TokenTree], out: &mut Vec<TokenTree>) {
    for t in tokens {
        match t {
            TokenTree::Group(g) => flatten(&g.stream().into_iter().collect::<Vec<_>>(), out),
            other => out.push(other.clone()),
        }
    }
}

fn string_literal(t: &TokenTree) -> Option<String> {
    let TokenTree::Literal(l) = t else { return None };
    match syn::parse_str::<syn::Lit>(&l.to_string()).ok()? {
        syn::Lit::Str(s) => Some(s.value()),
        _ => None,
    }
}

/// The first string literal after the identifier `ident` (searching inside groups too).
fn first_string_after(body: &[TokenTree], ident: &str) -> Option<String> {
    let mut flat = Vec::new();
    flatten(body, &mut flat);
    let at = flat.iter().position(|t| matches!(t, TokenTree::Ident(id) if id == ident))?;
    flat[at..].iter().find_map(string_literal)
}

/// The argument tokens of the macro call `name!( ... )` somewhere in `body`.
fn macro_args(body: &[TokenTree], name: &str) -> Option<TokenStream> {
    for (i, t) in body.iter().enumerate() {
        if let TokenTree::Group(g) = t {
            if let Some(found) = macro_args(&g.stream().into_iter().collect::<Vec<_>>(), name) {
                return Some(found);
            }
        }
        if matches!(t, TokenTree::Ident(id) if id == name) {
            if let (Some(TokenTree::Punct(p)), Some(TokenTree::Group(g))) = (body.get(i + 1), body.get(i + 2)) {
                if p.as_char() == '!' {
                    return Some(g.stream());
                }
            }
        }
    }
    None
}

/// The JSON a `json_schema!` argument stands for.
fn value(tokens: TokenStream, names: &HashMap<String, String>) -> Value {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    match tokens.as_slice() {
        [TokenTree::Group(g)] if g.delimiter() == Delimiter::Brace => {
            let mut m = Map::new();
            for entry in split_commas(g.stream()) {
                let [key, TokenTree::Punct(colon), rest @ ..] = entry.as_slice() else { panic!("not `key: value`") };
                assert_eq!(colon.as_char(), ':', "not `key: value`");
                let key = string_literal(key).expect("object keys are string literals");
                m.insert(key, value(rest.iter().cloned().collect(), names));
            }
            Value::Object(m)
        }
        [TokenTree::Group(g)] if g.delimiter() == Delimiter::Bracket => {
            Value::Array(split_commas(g.stream()).into_iter().map(|e| value(e.into_iter().collect(), names)).collect())
        }
        [TokenTree::Group(g)] if g.delimiter() == Delimiter::Parenthesis => reference(g.stream(), names),
        [TokenTree::Ident(id)] if id == "true" || id == "false" => Value::Bool(id == "true"),
        [TokenTree::Ident(id)] if id == "null" => Value::Null,
        [TokenTree::Punct(p), TokenTree::Literal(l)] if p.as_char() == '-' => {
            serde_json::from_str(&format!("-{l}")).unwrap_or_else(|_| panic!("unsupported literal -{l}"))
        }
        [TokenTree::Literal(l)] => {
            if let Some(s) = string_literal(&tokens[0]) {
                return Value::String(s);
            }
            let text = l.to_string();
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("unsupported literal {text}"))
        }
        _ if tokens.iter().any(|t| matches!(t, TokenTree::Ident(id) if id == "subschema_for")) => {
            reference(tokens.into_iter().collect(), names)
        }
        other => panic!("unsupported schema tokens: {}", other.iter().map(ToString::to_string).collect::<String>()),
    }
}

/// `__gen.subschema_for::<crate::x::T>()`, possibly in a block that inserts `"description"`.
fn reference(tokens: TokenStream, names: &HashMap<String, String>) -> Value {
    let mut flat = Vec::new();
    flatten(&tokens.into_iter().collect::<Vec<_>>(), &mut flat);
    let at = flat.iter().position(|t| matches!(t, TokenTree::Ident(id) if id == "subschema_for")).expect("a subschema");
    let mut path = String::new();
    for t in flat[at + 1..].iter().skip_while(|t| !matches!(t, TokenTree::Punct(p) if p.as_char() == '<')).skip(1) {
        match t {
            TokenTree::Punct(p) if p.as_char() == '>' => break,
            TokenTree::Punct(p) => path.push(p.as_char()),
            other => path.push_str(&other.to_string()),
        }
    }
    let name = names.get(&path).unwrap_or_else(|| panic!("no schema for {path}"));
    let mut m = Map::new();
    m.insert("$ref".into(), format!("#/components/schemas/{name}").into());
    // `.insert("description".into(), "...".into())`: the two string literals after `insert`.
    let mut i = 0;
    while let Some(off) = flat[i..].iter().position(|t| matches!(t, TokenTree::Ident(id) if id == "insert")) {
        let strings: Vec<String> = flat[i + off..].iter().filter_map(string_literal).take(2).collect();
        if let [k, v] = &strings[..] {
            m.insert(k.clone(), v.clone().into());
        }
        i += off + 1;
    }
    Value::Object(m)
}

fn split_commas(tokens: TokenStream) -> Vec<Vec<TokenTree>> {
    let mut out = vec![Vec::new()];
    for t in tokens {
        match &t {
            TokenTree::Punct(p) if p.as_char() == ',' => out.push(Vec::new()),
            _ => out.last_mut().expect("one entry at least").push(t),
        }
    }
    out.retain(|e| !e.is_empty());
    out
}

/// The Go markers as Kubernetes' OpenAPI extensions, on the definition and its properties.
fn apply_markers(schema: &mut Value, m: &Markers) {
    let ext = |markers: &[(String, String)]| {
        let mut out = Map::new();
        let map_keys: Vec<Value> =
            markers.iter().filter(|(k, _)| k == "listMapKey").map(|(_, v)| v.clone().into()).collect();
        for (k, v) in markers {
            let name = match k.as_str() {
                "listType" => "x-kubernetes-list-type",
                "patchMergeKey" => "x-kubernetes-patch-merge-key",
                "patchStrategy" => "x-kubernetes-patch-strategy",
                "mapType" => "x-kubernetes-map-type",
                "structType" => "x-kubernetes-map-type",
                _ => continue,
            };
            out.insert(name.into(), v.clone().into());
        }
        if !map_keys.is_empty() {
            out.insert("x-kubernetes-list-map-keys".into(), map_keys.into());
        }
        out
    };
    if let Some(obj) = schema.as_object_mut() {
        obj.extend(ext(&m.message).into_iter().filter(|(k, _)| k == "x-kubernetes-map-type"));
    }
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return };
    for (name, prop) in props.iter_mut() {
        if let (Some(markers), Some(p)) = (m.fields.get(&super::squash(name)), prop.as_object_mut()) {
            p.extend(ext(markers));
        }
    }
}
