//! Builds the protobuf descriptor set of the Kubernetes API types that `http::protobuf` decodes
//! request bodies with, and (`build/openapi.rs`) the OpenAPI definitions `http::openapi` serves.
//!
//! No crate ships Kubernetes' `generated.proto` files, so the schema is read from the crates that
//! carry it: every message, field number, label and type from `k8s-pb`'s prost-generated source,
//! and every field's JSON name from `k8s-openapi`'s serde code (prost's snake_case loses the
//! casing of `podIP` or `hostIPC`). Nothing here names a Kubernetes type.

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

#[path = "build/openapi.rs"]
mod openapi;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/openapi.rs");
    // A new k8s-pb or k8s-openapi version shows up as a lock file change.
    println!("cargo:rerun-if-changed=../Cargo.lock");
    let meta = cargo_metadata();
    let pb = package_dir(&meta, "k8s-pb").join("src");
    let openapi = package_dir(&meta, "k8s-openapi").join("src");
    let names = json_names(&openapi);
    let mut messages = Vec::new();
    let mut markers = HashMap::new();
    for file in rust_files(&pb) {
        let module = module_of(&pb, &file);
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("parse {}: {e}", file.display()));
        messages.extend(ast.items.iter().filter_map(|item| message(item, &module)));
        openapi::markers(&ast, &module, &mut markers);
    }
    assert!(messages.len() > 1000, "found only {} messages in {}", messages.len(), pb.display());
    let set = descriptor_set(&messages, &names);
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("kubernetes.binpb");
    std::fs::write(&out, set.encode_to_vec()).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));

    let definitions = openapi::definitions(&openapi.join(k8s_openapi_version(&meta)), &markers);
    let out = out_dir.join("openapi-definitions.json");
    std::fs::write(&out, definitions.to_string()).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
}

/// The Kubernetes version k8s-openapi is built for (`v1_37`), from its enabled features.
fn k8s_openapi_version(meta: &serde_json::Value) -> String {
    let ids: Vec<&str> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == "k8s-openapi")
        .filter_map(|p| p["id"].as_str())
        .collect();
    let nodes = meta["resolve"]["nodes"].as_array().into_iter().flatten();
    let features: Vec<&str> = nodes
        .filter(|n| n["id"].as_str().is_some_and(|id| ids.contains(&id)))
        .flat_map(|n| n["features"].as_array().into_iter().flatten().filter_map(|f| f.as_str()))
        .filter(|f| f.starts_with("v1_"))
        .collect();
    let [version] = features[..] else { panic!("expected one k8s-openapi version feature, found {features:?}") };
    version.to_string()
}

/// The workspace's resolved packages, as `cargo metadata` lists them.
fn cargo_metadata() -> serde_json::Value {
    let cargo = std::env::var_os("CARGO").expect("cargo sets CARGO");
    let manifest =
        Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("Cargo.toml");
    // Only the target's packages: cargo downloaded those for this build (it does not fetch other
    // platforms'). `--locked`: never rewrite the lock file from inside a build.
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", &target, "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// The source directory of the one version of `name` in the build.
fn package_dir(meta: &serde_json::Value, name: &str) -> PathBuf {
    let found: Vec<&str> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == name)
        .filter_map(|p| p["manifest_path"].as_str())
        .collect();
    let [manifest] = found[..] else {
        panic!("expected one version of {name} among the dependencies, found {found:?}")
    };
    Path::new(manifest).parent().expect("a manifest lives in a directory").to_path_buf()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `api/core/v1/mod.rs` under `root` is module `["api", "core", "v1"]`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("file under root");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    if last != "mod.rs" && last != "lib.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// JSON field names by (module path, lowercased type name), from each type's `deserialize_struct` call.
fn json_names(src: &Path) -> HashMap<(String, String), Vec<String>> {
    let mut names = HashMap::new();
    let versions = std::fs::read_dir(src).expect("read k8s-openapi src").filter_map(|e| {
        let p = e.ok()?.path();
        (p.is_dir() && p.file_name()?.to_str()?.starts_with("v1_")).then_some(p)
    });
    for version in versions {
        for file in rust_files(&version) {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let dir = file.parent().and_then(|d| d.strip_prefix(&version).ok()).expect("file under version dir");
            let module = dir.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/");
            let mut rest = text.as_str();
            while let Some(at) = rest.find("deserialize_struct(") {
                rest = &rest[at..];
                let Some(end) = rest.find(']') else { break };
                let strings = quoted(&rest[..end]);
                rest = &rest[end..];
                if let Some((ty, fields)) = strings.split_first() {
                    let entry: &mut Vec<String> = names.entry((module.clone(), ty.to_lowercase())).or_default();
                    for f in fields {
                        if !entry.contains(f) {
                            entry.push(f.clone());
                        }
                    }
                }
            }
        }
    }
    names
}

fn quoted(s: &str) -> Vec<String> {
    s.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// One prost message of k8s-pb.
struct Msg {
    module: Vec<String>,
    name: String,
    fields: Vec<Field>,
}

struct Field {
    name: String,
    tag: i32,
    repeated: bool,
    kind: Kind,
}

enum Kind {
    Scalar(Type),
    Message(String),
    Map(Type, Box<Kind>),
}

fn message(item: &syn::Item, module: &[String]) -> Option<Msg> {
    let syn::Item::Struct(s) = item else { return None };
    let is_message = s.attrs.iter().any(|a| {
        let mut found = false;
        if a.path().is_ident("derive") {
            let _ = a.parse_nested_meta(|m| {
                found |= m.path.segments.last().is_some_and(|seg| seg.ident == "Message");
                Ok(())
            });
        }
        found
    });
    if !is_message {
        return None;
    }
    let fields = s.fields.iter().filter_map(|f| field(f, module)).collect();
    Some(Msg { module: module.to_vec(), name: s.ident.to_string(), fields })
}

fn field(f: &syn::Field, module: &[String]) -> Option<Field> {
    let attr = f.attrs.iter().find(|a| a.path().is_ident("prost"))?;
    let name = f.ident.as_ref().expect("prost messages have named fields").to_string();
    let name = name.trim_start_matches("r#").to_string();
    let (mut scalar, mut tag, mut repeated, mut is_message, mut map) = (None, None, false, false, None);
    attr.parse_nested_meta(|m| {
        let key = m.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
        let value = if m.input.peek(syn::Token![=]) { Some(m.value()?.parse::<syn::LitStr>()?.value()) } else { None };
        match key.as_str() {
            "tag" => tag = value.and_then(|v| v.parse().ok()),
            "repeated" => repeated = true,
            "message" => is_message = true,
            "btree_map" | "hash_map" | "map" => map = value,
            "optional" | "boxed" | "packed" => {}
            other => scalar = Some(scalar_type(other).unwrap_or_else(|| panic!("unsupported prost attribute {other}"))),
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("parse #[prost] on {name}: {e}"));
    let tag = tag.unwrap_or_else(|| panic!("field {name} has no tag"));
    let target = || message_type(&f.ty, module).unwrap_or_else(|| panic!("no message type for field {name}"));
    let kind = if let Some(map) = map {
        let (k, v) = map.split_once(',').expect("map = \"key, value\"");
        let key = scalar_type(k.trim()).expect("map keys are scalars");
        let value = match v.trim() {
            "message" => Kind::Message(target()),
            other => Kind::Scalar(scalar_type(other).unwrap_or_else(|| panic!("unsupported map value {other}"))),
        };
        Kind::Map(key, Box::new(value))
    } else if is_message {
        Kind::Message(target())
    } else {
        Kind::Scalar(scalar.unwrap_or_else(|| panic!("field {name} has no type")))
    };
    Some(Field { name, tag, repeated, kind })
}

fn scalar_type(name: &str) -> Option<Type> {
    Some(match name {
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "bool" => Type::Bool,
        "int32" => Type::Int32,
        "int64" => Type::Int64,
        "uint32" => Type::Uint32,
        "uint64" => Type::Uint64,
        "sint32" => Type::Sint32,
        "sint64" => Type::Sint64,
        "fixed32" => Type::Fixed32,
        "fixed64" => Type::Fixed64,
        "sfixed32" => Type::Sfixed32,
        "sfixed64" => Type::Sfixed64,
        "double" => Type::Double,
        "float" => Type::Float,
        _ => return None,
    })
}

/// The fully qualified proto name of the message a field holds: `Option<super::super::X>`,
/// `Vec<X>`, `Box<X>`, or a map's value type, resolved against the field's module.
fn message_type(ty: &syn::Type, module: &[String]) -> Option<String> {
    let syn::Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    let args: Vec<&syn::Type> = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                syn::GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    match last.ident.to_string().as_str() {
        "Option" | "Vec" | "Box" => return message_type(args.first()?, module),
        "BTreeMap" | "HashMap" => return message_type(args.get(1)?, module),
        _ => {}
    }
    let mut path = module.to_vec();
    let segments: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
    let (name, dirs) = segments.split_last()?;
    for seg in dirs {
        match seg.as_str() {
            "super" => {
                path.pop();
            }
            "crate" => path.clear(),
            other => path.push(other.to_string()),
        }
    }
    Some(format!(".{}.{name}", package(&path)))
}

fn package(module: &[String]) -> String {
    format!("k8s.io.{}", module.join("."))
}

fn upper_camel(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

fn lower_camel(snake: &str) -> String {
    let upper = upper_camel(snake);
    let mut c = upper.chars();
    c.next().map(|f| f.to_ascii_lowercase().to_string() + c.as_str()).unwrap_or_default()
}

fn squash(name: &str) -> String {
    name.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

fn descriptor_set(messages: &[Msg], names: &HashMap<(String, String), Vec<String>>) -> FileDescriptorSet {
    let mut files: BTreeMap<Vec<String>, FileDescriptorProto> = BTreeMap::new();
    let mut deps: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    let mut unmatched = Vec::new();
    let file_of = |module: &[String]| format!("{}/generated.proto", module.join("/"));
    for m in messages {
        let json = names.get(&(m.module.join("/"), m.name.to_lowercase()));
        let mut json_name = |f: &Field| {
            let Some(json) = json else { return lower_camel(&f.name) };
            if let Some(n) = json.iter().find(|n| squash(n) == squash(&f.name)) {
                return n.clone();
            }
            // A Go struct embedded with `json:",inline"` (Probe's ProbeHandler, Volume's
            // VolumeSource) is a field in protobuf; its JSON name is empty.
            if let (false, Kind::Message(t)) = (f.repeated, &f.kind) {
                let (pkg, ty) = t.trim_start_matches(".k8s.io.").rsplit_once('.').expect("qualified name");
                // k8s-openapi has no type for most of them (OpenAPI flattens them too).
                let inner = names.get(&(pkg.replace('.', "/"), ty.to_lowercase()));
                if inner.is_none_or(|inner| inner.iter().all(|n| json.contains(n))) {
                    return String::new();
                }
            }
            if m.module.first().is_some_and(|m| m == "api" || m == "apimachinery") {
                unmatched.push(format!("{}.{}.{}", package(&m.module), m.name, f.name));
            }
            lower_camel(&f.name)
        };
        let mut d = DescriptorProto { name: Some(m.name.clone()), ..Default::default() };
        let full_name = format!("{}.{}", package(&m.module), m.name);
        for f in &m.fields {
            let mut fd = FieldDescriptorProto {
                name: Some(f.name.clone()),
                json_name: Some(json_name(f)),
                number: Some(f.tag),
                label: Some(if f.repeated { Label::Repeated } else { Label::Optional } as i32),
                ..Default::default()
            };
            let mut refer = |type_name: &str, fd: &mut FieldDescriptorProto| {
                fd.r#type = Some(Type::Message as i32);
                fd.type_name = Some(type_name.to_string());
                let pkg = type_name.trim_start_matches('.').rsplit_once('.').map(|(p, _)| p).unwrap_or("");
                if pkg != package(&m.module) {
                    let module: Vec<String> =
                        pkg.trim_start_matches("k8s.io.").split('.').map(str::to_string).collect();
                    deps.entry(m.module.clone()).or_default().insert(file_of(&module));
                }
            };
            match &f.kind {
                Kind::Scalar(t) => fd.r#type = Some(*t as i32),
                Kind::Message(t) => refer(t, &mut fd),
                Kind::Map(key, value) => {
                    let entry_name = format!("{}Entry", upper_camel(&f.name));
                    let mut value_fd = FieldDescriptorProto {
                        name: Some("value".into()),
                        json_name: Some("value".into()),
                        number: Some(2),
                        label: Some(Label::Optional as i32),
                        ..Default::default()
                    };
                    match value.as_ref() {
                        Kind::Scalar(t) => value_fd.r#type = Some(*t as i32),
                        Kind::Message(t) => refer(t, &mut value_fd),
                        Kind::Map(..) => panic!("map of maps in {}.{}", m.name, f.name),
                    }
                    let key_fd = FieldDescriptorProto {
                        name: Some("key".into()),
                        json_name: Some("key".into()),
                        number: Some(1),
                        label: Some(Label::Optional as i32),
                        r#type: Some(*key as i32),
                        ..Default::default()
                    };
                    d.nested_type.push(DescriptorProto {
                        name: Some(entry_name.clone()),
                        field: vec![key_fd, value_fd],
                        options: Some(MessageOptions { map_entry: Some(true), ..Default::default() }),
                        ..Default::default()
                    });
                    fd.label = Some(Label::Repeated as i32);
                    fd.r#type = Some(Type::Message as i32);
                    fd.type_name = Some(format!(".{full_name}.{entry_name}"));
                }
            }
            d.field.push(fd);
        }
        let file = files.entry(m.module.clone()).or_insert_with(|| FileDescriptorProto {
            name: Some(file_of(&m.module)),
            package: Some(package(&m.module)),
            syntax: Some("proto2".into()),
            ..Default::default()
        });
        file.message_type.push(d);
    }
    for (module, file) in files.iter_mut() {
        file.dependency = deps.remove(module).unwrap_or_default().into_iter().collect();
    }
    if !unmatched.is_empty() {
        println!("cargo:warning={} fields without a k8s-openapi JSON name: {:?}", unmatched.len(), unmatched);
    }
    FileDescriptorSet { file: files.into_values().collect() }
}
