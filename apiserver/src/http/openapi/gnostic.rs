//! OpenAPI v2 as protobuf: the messages of gnostic's `openapi_v2` package (`OpenAPIv2.proto`,
//! the format kube-apiserver serves for `application/com.github.proto-openapi.spec.v2.v1.0+protobuf`
//! and kubectl reads), for the parts a Kubernetes document uses, and the conversion from the
//! JSON document. Field numbers are gnostic's; messages not used here are left out.

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub parameters: Vec<ParametersItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `oneof { Parameter parameter = 1; JsonReference json_reference = 2; }`: only the first here.
#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    #[prost(message, optional, tag = "1")]
    pub parameter: Option<Parameter>,
}

/// `oneof { BodyParameter body_parameter = 1; NonBodyParameter non_body_parameter = 2; }`.
#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(message, optional, tag = "1")]
    pub body_parameter: Option<BodyParameter>,
    #[prost(message, optional, tag = "2")]
    pub non_body_parameter: Option<NonBodyParameter>,
}

#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
}

/// `oneof { header = 1; form_data = 2; QueryParameterSubSchema = 3; PathParameterSubSchema = 4; }`.
#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    #[prost(message, optional, tag = "3")]
    pub query_parameter_sub_schema: Option<QueryParameter>,
    #[prost(message, optional, tag = "4")]
    pub path_parameter_sub_schema: Option<PathParameter>,
}

/// QueryParameterSubSchema's fields used here.
#[derive(Clone, PartialEq, Message)]
pub struct QueryParameter {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "6")]
    pub r#type: String,
}

/// PathParameterSubSchema's fields used here.
#[derive(Clone, PartialEq, Message)]
pub struct PathParameter {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub r#type: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

/// `oneof { Response response = 1; JsonReference json_reference = 2; }`.
#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    pub response: Option<Response>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
}

/// `oneof { Schema schema = 1; FileSchema file_schema = 2; }`.
#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `oneof { Schema schema = 1; bool boolean = 2; }`.
#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
    #[prost(bool, optional, tag = "2")]
    pub boolean: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// A value as YAML text (JSON is YAML), as gnostic keeps extensions, defaults and enums.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

fn any(v: &Value) -> Any {
    Any { yaml: v.to_string() }
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn extensions(v: &Value) -> Vec<NamedAny> {
    let Some(m) = v.as_object() else { return Vec::new() };
    m.iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny { name: k.clone(), value: Some(any(v)) })
        .collect()
}

/// A v2 JSON schema as gnostic's message.
pub fn schema(v: &Value) -> Schema {
    let strings = |key: &str| -> Vec<String> {
        v.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let named = |m: &serde_json::Map<String, Value>| -> Vec<NamedSchema> {
        m.iter().map(|(k, s)| NamedSchema { name: k.clone(), value: Some(schema(s)) }).collect()
    };
    Schema {
        r#ref: text(v, "$ref"),
        format: text(v, "format"),
        title: text(v, "title"),
        description: text(v, "description"),
        default: v.get("default").map(any),
        required: strings("required"),
        r#enum: v.get("enum").and_then(Value::as_array).into_iter().flatten().map(any).collect(),
        additional_properties: v.get("additionalProperties").map(|a| {
            Box::new(match a {
                Value::Bool(b) => AdditionalPropertiesItem { schema: None, boolean: Some(*b) },
                s => AdditionalPropertiesItem { schema: Some(schema(s)), boolean: None },
            })
        }),
        r#type: v.get("type").and_then(Value::as_str).map(|t| TypeItem { value: vec![t.to_string()] }),
        items: v.get("items").map(|i| ItemsItem { schema: vec![schema(i)] }),
        all_of: v.get("allOf").and_then(Value::as_array).into_iter().flatten().map(schema).collect(),
        properties: v
            .get("properties")
            .and_then(Value::as_object)
            .map(|m| Properties { additional_properties: named(m) }),
        vendor_extension: extensions(v),
    }
}

fn parameter(p: &Value) -> ParametersItem {
    let parameter = if p["in"] == "body" {
        Parameter {
            body_parameter: Some(BodyParameter {
                description: text(p, "description"),
                name: text(p, "name"),
                r#in: "body".into(),
                required: p["required"].as_bool().unwrap_or(false),
                schema: p.get("schema").map(schema),
            }),
            non_body_parameter: None,
        }
    } else {
        let (required, description, name) =
            (p["required"].as_bool().unwrap_or(false), text(p, "description"), text(p, "name"));
        let in_path = p["in"] == "path";
        Parameter {
            body_parameter: None,
            non_body_parameter: Some(NonBodyParameter {
                query_parameter_sub_schema: (!in_path).then(|| QueryParameter {
                    required,
                    r#in: "query".into(),
                    description: description.clone(),
                    name: name.clone(),
                    r#type: text(p, "type"),
                }),
                path_parameter_sub_schema: in_path.then(|| PathParameter {
                    required,
                    r#in: "path".into(),
                    description,
                    name,
                    r#type: text(p, "type"),
                }),
            }),
        }
    };
    ParametersItem { parameter: Some(parameter) }
}

fn operation(op: &Value) -> Operation {
    let strings = |key: &str| -> Vec<String> {
        op.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let responses = op.get("responses").and_then(Value::as_object).map(|m| Responses {
        response_code: m
            .iter()
            .map(|(code, r)| NamedResponseValue {
                name: code.clone(),
                value: Some(ResponseValue {
                    response: Some(Response {
                        description: text(r, "description"),
                        schema: r.get("schema").map(|s| SchemaItem { schema: Some(schema(s)) }),
                    }),
                }),
            })
            .collect(),
    });
    Operation {
        tags: strings("tags"),
        description: text(op, "description"),
        operation_id: text(op, "operationId"),
        produces: strings("produces"),
        consumes: strings("consumes"),
        parameters: op.get("parameters").and_then(Value::as_array).into_iter().flatten().map(parameter).collect(),
        responses,
        vendor_extension: extensions(op),
    }
}

/// The protobuf encoding of a v2 (swagger 2.0) JSON document.
pub fn encode(doc: &Value) -> Vec<u8> {
    let op = |item: &Value, verb: &str| item.get(verb).map(operation);
    let paths = doc["paths"].as_object().map(|m| Paths {
        path: m
            .iter()
            .map(|(name, item)| NamedPathItem {
                name: name.clone(),
                value: Some(PathItem {
                    get: op(item, "get"),
                    put: op(item, "put"),
                    post: op(item, "post"),
                    delete: op(item, "delete"),
                    patch: op(item, "patch"),
                    parameters: item
                        .get("parameters")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(parameter)
                        .collect(),
                }),
            })
            .collect(),
    });
    let definitions = doc["definitions"].as_object().map(|m| Definitions {
        additional_properties: m.iter().map(|(k, s)| NamedSchema { name: k.clone(), value: Some(schema(s)) }).collect(),
    });
    Document {
        swagger: text(doc, "swagger"),
        info: Some(Info { title: text(&doc["info"], "title"), version: text(&doc["info"], "version") }),
        paths,
        definitions,
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_keeps_its_reference_types_and_extensions() {
        let s = json!({"description": "d", "type": "array", "items": {"$ref": "#/definitions/X"},
                       "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]});
        let bytes = schema(&s).encode_to_vec();
        let back = Schema::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(back.items.expect("items").schema[0].r#ref, "#/definitions/X");
        assert_eq!(back.r#type.expect("type").value, ["array"]);
        let ext: Vec<(String, String)> =
            back.vendor_extension.into_iter().map(|e| (e.name, e.value.expect("value").yaml)).collect();
        assert!(ext.contains(&("x-kubernetes-list-map-keys".into(), r#"["name"]"#.into())), "{ext:?}");
    }
}
